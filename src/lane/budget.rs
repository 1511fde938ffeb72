//! Budgets on the lane (#26): a key, user, team or team member with a `max_budget`.
//!
//! LiteLLM reserves a request's estimated maximum cost on every budget counter (`spend:*`) before
//! the provider call, refuses once a counter is spent, and settles the reservation on the actual
//! cost. The lane answers before LiteLLM's auth runs (its replay reserves afterwards), so it
//! admits a request only where LiteLLM certainly would, with room to spare:
//! - the verdict carries the key's *headroom*, `min(max_budget − counter)` over LiteLLM's own
//!   counters, read after every request of the key LiteLLM judged;
//! - each admitted request holds an upper bound of LiteLLM's estimate until its replay has
//!   reserved (the Python layer then reads the counters again and releases the hold);
//! - a request is admitted while `held + 2 × bound ≤ headroom`. Past that it waits for the key's
//!   holds to drain (every replay reserved) and goes to the proxy, which decides on the counters
//!   as LiteLLM alone would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// LiteLLM's output-token default when neither the request nor the model caps it
/// (`DEFAULT_MAX_OUTPUT_TOKENS_FALLBACK`).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 16_384;
/// Fields LiteLLM reads a request's output cap from, in its order (`_OUTPUT_TOKEN_FIELDS`).
const OUTPUT_TOKEN_FIELDS: &[&str] = &["max_completion_tokens", "max_tokens", "max_output_tokens"];
/// Content LiteLLM counts by other means than its text (images by their size, documents,
/// audio): a body naming one has no bound the lane can work out from its length.
const UNBOUNDED_CONTENT: &[&[u8]] = &[
    b"\"image\"",
    b"\"image_url\"",
    b"\"document\"",
    b"\"file\"",
    b"\"input_audio\"",
    b"\"audio\"",
];
/// A hold whose replay never reported back (its ticket lost) stops counting after this.
const HOLD_LIFETIME: Duration = Duration::from_secs(120);
/// How long a request past the headroom waits for the key's replays to reserve.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A model group's prices as LiteLLM's reservation reads them (`cached_model_group_info`): the
/// input rate, the higher of the output and reasoning rates, and the model's output ceiling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReservationRates {
    pub input_per_token: f64,
    pub output_per_token: f64,
    pub max_output_tokens: u64,
}

impl ReservationRates {
    /// At least what LiteLLM's `estimate_request_max_cost` reserves for this body (its input
    /// tokens count the messages' text and tools, fewer than twice the body's bytes; its output
    /// tokens are the request's cap, at most the model's), or None for a body with content
    /// counted otherwise.
    pub fn bound(&self, body: &[u8]) -> Option<f64> {
        if UNBOUNDED_CONTENT
            .iter()
            .any(|pattern| contains(body, pattern))
        {
            return None;
        }
        let input_tokens = 2 * body.len() as u64 + 256;
        let output_tokens = requested_output(body)
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS)
            .min(self.max_output_tokens);
        Some(
            input_tokens as f64 * self.input_per_token
                + output_tokens as f64 * self.output_per_token,
        )
    }
}

/// The first output cap the body gives as a non-negative integer; a cap of another form (LiteLLM
/// reads strings and floats too) counts as none, which only raises the bound to the ceiling.
fn requested_output(body: &[u8]) -> Option<u64> {
    let serde_json::Value::Object(fields) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    let first = OUTPUT_TOKEN_FIELDS
        .iter()
        .find_map(|name| fields.get(*name).filter(|value| !value.is_null()))?;
    match first {
        serde_json::Value::Number(n) if n.is_i64() && n.as_i64().is_some_and(|n| n < 0) => Some(0),
        serde_json::Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// What a key's verdict says of its budgets.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyBudget {
    /// `min(max_budget − counter)` over LiteLLM's counters for the key, as last read.
    pub headroom: f64,
    /// `x-litellm-key-max-budget` as the proxy writes it (`str(max_budget)`), if the key has one.
    pub max_budget_header: Option<String>,
}

/// What the lane has admitted on budgeted keys and their replays have not reserved yet.
#[derive(Default)]
pub struct Holds {
    state: Mutex<HoldState>,
    released: Notify,
}

#[derive(Default)]
struct HoldState {
    by_key: HashMap<String, f64>,
    live: HashMap<u64, (String, f64, Instant)>,
    next_id: u64,
    last_purge: Option<Instant>,
}

impl HoldState {
    fn release(&mut self, id: u64) -> bool {
        let Some((key, amount, _)) = self.live.remove(&id) else {
            return false;
        };
        if let Some(held) = self.by_key.get_mut(&key) {
            *held -= amount;
            if self.live.values().all(|(other, _, _)| *other != key) {
                self.by_key.remove(&key);
            }
        }
        true
    }

    /// Drops holds past their lifetime (at most once a second).
    fn purge(&mut self, now: Instant) {
        if self
            .last_purge
            .is_some_and(|last| now.duration_since(last) < Duration::from_secs(1))
        {
            return;
        }
        self.last_purge = Some(now);
        let expired: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, (_, _, since))| now.duration_since(*since) >= HOLD_LIFETIME)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.release(id);
        }
    }
}

impl Holds {
    /// Holds `bound` on the key if `held + 2 × bound ≤ headroom`; None otherwise.
    pub fn try_hold(self: &Arc<Self>, key: &str, bound: f64, headroom: f64) -> Option<Hold> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.purge(Instant::now());
        let held = state.by_key.get(key).copied().unwrap_or(0.0);
        // A headroom or bound that is not a number admits nothing.
        let fits = (held + 2.0 * bound)
            .partial_cmp(&headroom)
            .is_some_and(|order| order.is_le());
        if !fits {
            return None;
        }
        state.next_id += 1;
        let id = state.next_id;
        *state.by_key.entry(key.to_string()).or_default() += bound;
        state
            .live
            .insert(id, (key.to_string(), bound, Instant::now()));
        Some(Hold {
            holds: Arc::clone(self),
            id,
        })
    }

    /// Releases a kept hold (its replay reserved, or ended); false if it was gone already.
    pub fn release(&self, id: u64) -> bool {
        let released = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(id);
        if released {
            self.released.notify_waiters();
        }
        released
    }

    /// What the key holds now.
    pub fn held(&self, key: &str) -> f64 {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.by_key.get(key).copied().unwrap_or(0.0)
    }

    /// Waits until the key holds nothing (every replay of it reserved), at most `timeout`.
    pub async fn drained(&self, key: &str, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.held(key) <= 0.0 {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }
}

/// An admitted request's hold on its key's headroom: released when dropped, unless `kept` for
/// its replay (then released by id, or after `HOLD_LIFETIME`).
pub struct Hold {
    holds: Arc<Holds>,
    id: u64,
}

impl Hold {
    /// Keeps the hold past this request's serving, for its replay to release by id.
    pub fn keep(self) -> u64 {
        let id = self.id;
        std::mem::forget(self);
        id
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.holds.release(self.id);
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").field("id", &self.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATES: ReservationRates = ReservationRates {
        input_per_token: 1e-6,
        output_per_token: 2e-6,
        max_output_tokens: 1000,
    };

    #[test]
    fn the_bound_takes_the_cap_up_to_the_model_ceiling() {
        let body = br#"{"model":"m","messages":[],"max_tokens":16}"#;
        let input = (2 * body.len() as u64 + 256) as f64 * 1e-6;
        let bound = RATES.bound(body).unwrap();
        assert!((bound - (input + 16.0 * 2e-6)).abs() < 1e-12);
        let body = br#"{"model":"m","max_tokens":null,"max_output_tokens":5000}"#;
        let input = (2 * body.len() as u64 + 256) as f64 * 1e-6;
        assert!((RATES.bound(body).unwrap() - (input + 1000.0 * 2e-6)).abs() < 1e-12);
        // No cap, or one of another form: the ceiling.
        for body in [&br#"{"model":"m"}"#[..], br#"{"max_tokens":"16"}"#] {
            let input = (2 * body.len() as u64 + 256) as f64 * 1e-6;
            assert!((RATES.bound(body).unwrap() - (input + 1000.0 * 2e-6)).abs() < 1e-12);
        }
    }

    #[test]
    fn media_has_no_bound() {
        let body = br#"{"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}"#;
        assert_eq!(RATES.bound(body), None);
        // The word inside a text is escaped, and does not count.
        let body = br#"{"messages":[{"role":"user","content":"say \"image\""}]}"#;
        assert!(RATES.bound(body).is_some());
    }

    #[tokio::test]
    async fn holds_admit_while_twice_the_bound_fits_and_release_on_drop() {
        let holds = Arc::new(Holds::default());
        let first = holds.try_hold("k", 1.0, 5.0).unwrap();
        let kept = holds.try_hold("k", 1.0, 5.0).unwrap().keep();
        assert_eq!(holds.held("k"), 2.0);
        // 2 + 2 × 1 > 3.9: refused; another key is not affected.
        assert!(holds.try_hold("k", 1.0, 3.9).is_none());
        assert!(holds.try_hold("other", 1.0, 2.0).is_some());
        drop(first);
        assert_eq!(holds.held("k"), 1.0);
        assert!(holds.release(kept));
        assert!(!holds.release(kept));
        assert_eq!(holds.held("k"), 0.0);
        holds.drained("k", Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_drain_waits_for_the_key_s_holds() {
        let holds = Arc::new(Holds::default());
        let id = holds.try_hold("k", 1.0, 5.0).unwrap().keep();
        let waiting = {
            let holds = Arc::clone(&holds);
            tokio::spawn(async move { holds.drained("k", Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        holds.release(id);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }
}
