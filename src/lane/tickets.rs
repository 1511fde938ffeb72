//! Tickets: a provider call's outcome, held for the proxy's replay of the request to claim once,
//! and the call id the request goes by.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::ratelimit::tokens::Reserved;
use crate::call::{CallError, Completion};
use crate::stream::Piece;

/// The header that carries a ticket to the proxy. Stripped from every client request.
/// Not `x-litellm-*`: the proxy leaves those out of the headers its hooks see.
pub const TICKET_HEADER: &str = "x-fastpath-lane-ticket";
/// Unclaimed tickets (a replay that never reached the provider step) are dropped after this.
const TICKET_LIFETIME: Duration = Duration::from_secs(600);
/// The proxy takes a caller's call id up to this length (`MAX_LITELLM_CALL_ID_LEN`).
const MAX_CALL_ID_LEN: usize = 256;

/// A provider call's outcome, as a ticket holds it.
#[derive(Debug)]
pub enum Outcome {
    Call(Result<Completion, CallError>),
    Stream(StreamOutcome),
}

/// A stream the lane opened: the provider's headers (or the error that kept it from opening),
/// then what the replay's stream wrapper needs of it: the first chunk, and the end (the
/// assembled answer, or the failure).
#[derive(Debug)]
pub struct StreamOutcome {
    pub opened: Result<http::HeaderMap, CallError>,
    pub pieces: Vec<Piece>,
    /// The pieces are the provider's bytes (`/v1/messages`), not chunks.
    pub raw: bool,
}

/// The call id a request goes by: the client's (`x-litellm-call-id`, as the proxy takes it) or
/// one the lane chose (`added`: the proxy's record of the client's headers should not show it).
#[derive(Clone, Debug)]
pub struct CallId {
    pub id: String,
    pub added: bool,
}

impl CallId {
    pub fn of(headers: &http::HeaderMap) -> CallId {
        let given = headers
            .get("x-litellm-call-id")
            .and_then(|value| value.to_str().ok())
            .filter(|id| !id.is_empty() && id.len() <= MAX_CALL_ID_LEN);
        match given {
            Some(id) => CallId {
                id: id.to_string(),
                added: false,
            },
            None => CallId {
                id: uuid4(),
                added: true,
            },
        }
    }
}

/// What the proxy's replay gets for a ticket.
#[derive(Debug)]
pub struct Ticket {
    /// The deployment the lane called (the replay's router must pick this one).
    pub deployment_id: String,
    /// Whether the lane chose the call id (so the proxy's record of the client's headers
    /// should not show it).
    pub call_id_added: bool,
    pub outcome: Outcome,
    /// The request's hold on its key's budget and rpm windows (`holds`), for the replay to
    /// release.
    pub hold: Option<u64>,
    pub counted: RateCounted,
}

/// What the lane counted of a request in LiteLLM's rate-limit state in Redis itself (all None
/// where it did not): the replay's limiter must not count it again.
#[derive(Clone, Debug, Default)]
pub struct RateCounted {
    /// Whether the key has rate limits the lane applied (the replay's limiter counts the
    /// request in the worker's windows, or records what the lane counted in Redis).
    pub rate_limited: bool,
    /// Each rpm window's start and count with the request.
    pub rate_counts: Option<Vec<(u64, u64)>>,
    /// Each parallel-request gauge's slots in flight with the request's (the lane gives its
    /// slot back; the replay's limiter takes none).
    pub parallel_counts: Option<Vec<u64>>,
    /// The tokens reserved in the key's tpm windows, for the replay's callbacks to reconcile.
    pub tokens_reserved: Option<Reserved>,
}

/// A ticket as the lane sends it along.
pub struct Issued {
    pub id: String,
    pub call_id: CallId,
}

#[derive(Default)]
pub struct Tickets {
    held: Mutex<HashMap<String, (Instant, Ticket)>>,
}

impl Tickets {
    pub fn issue(
        &self,
        deployment_id: &str,
        call_id: CallId,
        outcome: Outcome,
        hold: Option<u64>,
        counted: RateCounted,
    ) -> Issued {
        let id = random_hex(4);
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.len() % 1024 == 1023 {
            held.retain(|_, (issued, _)| now.duration_since(*issued) < TICKET_LIFETIME);
        }
        held.insert(
            id.clone(),
            (
                now,
                Ticket {
                    deployment_id: deployment_id.to_string(),
                    call_id_added: call_id.added,
                    outcome,
                    hold,
                    counted,
                },
            ),
        );
        Issued { id, call_id }
    }

    pub fn claim(&self, id: &str) -> Option<Ticket> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.remove(id).map(|(_, ticket)| ticket)
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `words` random 64-bit words as hex, from the process's SipHash keys (randomly seeded by
/// the OS) over a counter: unpredictable to clients, who never see another's ticket anyway.
fn random_hex(words: usize) -> String {
    let mut out = String::with_capacity(words * 16);
    for _ in 0..words {
        out.push_str(&format!("{:016x}", random_u64()));
    }
    out
}

fn random_u64() -> u64 {
    thread_local! {
        static STATE: RandomState = RandomState::new();
    }
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    STATE.with(|state| state.hash_one(count))
}

/// A random (version 4) UUID, as Python's `str(uuid.uuid4())` writes it.
pub fn uuid4() -> String {
    let high = random_u64();
    let low = random_u64();
    let bytes: [u8; 16] = {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        bytes
    };
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_look_like_pythons() {
        let id = uuid4();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uuid4(), id);
    }
}
