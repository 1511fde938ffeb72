//! Budgets on the lane (#26): a key, user, team or team member with a `max_budget`.
//!
//! LiteLLM reserves a request's estimated maximum cost on every budget counter (`spend:*`) before
//! the provider call, refuses once a counter is spent, and settles the reservation on the actual
//! cost. The lane answers before LiteLLM's auth runs (its replay reserves afterwards), so it
//! admits a request only where LiteLLM certainly would, with room to spare:
//! - the verdict carries the key's *headroom*, `min(max_budget − counter)` over LiteLLM's own
//!   counters, read after every request of the key LiteLLM judged;
//! - each admitted request holds an upper bound of LiteLLM's estimate until its replay has
//!   reserved (`holds`; the Python layer then reads the counters again and releases the hold);
//! - a request is admitted while `held + 2 × bound ≤ headroom`. Past that it waits for the key's
//!   holds to drain (every replay reserved) and goes to the proxy, which decides on the counters
//!   as LiteLLM alone would.

use super::holds::Claim;

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
}

impl KeyBudget {
    /// The request's claim on the key's budget: it fits while `held + 2 × bound ≤ headroom`.
    pub fn claim(&self, key_hash: &str, bound: f64) -> Claim {
        Claim {
            counter: key_hash.to_string(),
            amount: bound,
            room: self.headroom - bound,
        }
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
}
