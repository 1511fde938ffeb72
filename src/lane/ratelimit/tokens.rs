//! tpm limits on a key's scopes (the key, its user, its team, its team membership), against
//! LiteLLM's v3 limiter's token windows in Redis: before the provider call the limiter
//! reserves its estimate of the request's tokens in each scope's `{descriptor:value}:tokens`
//! counter with its check-and-increment script, one scope at a time (refusing, and refunding
//! the scopes already reserved, when a window would pass its limit); after the answer its
//! success callback adds the actual usage less the reservation. The lane makes the reservation
//! with the same script and the same estimate (`estimate`, proven equal to the limiter's own on
//! the same bodies); the replay's callbacks reconcile it, with the limiter's stash as its
//! pre-call hook would have left it.
//!
//! Where LiteLLM keeps the windows in the worker, the replay's limiter reserves (and its
//! callbacks reconcile) in the worker's windows, and the lane holds the estimate on each window
//! until the replay has reserved, as it holds rpm counts (see `scopes`).

use std::time::SystemTime;

use serde_json::Value;

use super::counting::{RateRefusal, Reading, RedisCounting, WindowKind, limit_headers};
use super::redis::Reply;

/// The limiter's `DEFAULT_MAX_TOKENS_ESTIMATE // _TPM_FLOOR_FRACTION`: the output floor for a
/// request without `max_tokens`, when no limit constrains it.
const BASELINE_OUTPUT_FLOOR: i64 = 4096 / TPM_FLOOR_FRACTION;
const TPM_FLOOR_FRACTION: i64 = 4;
/// `DEFAULT_CHARS_PER_TOKEN`.
const CHARS_PER_TOKEN: i64 = 4;

/// One scope's tpm limit, and its window as last read (where the worker counts).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenScope {
    /// LiteLLM's descriptor (`api_key`, `user`, `team`, `team_member`) and its value.
    pub descriptor: String,
    pub value: String,
    pub limit: u64,
    /// The tokens the window counted, reservations included.
    pub counted: u64,
    /// When the window ends (UNIX_EPOCH: no window yet).
    pub window_ends: SystemTime,
}

impl TokenScope {
    /// The scope's counter among the lane's holds.
    pub fn held_counter(&self) -> String {
        WindowKind::Tokens.held_counter(&self.descriptor, &self.value)
    }

    pub(super) fn reading(&self) -> Reading {
        Reading {
            counted: self.counted,
            window_ends: self.window_ends,
        }
    }

    fn window_key(&self) -> String {
        format!("{{{}:{}}}:window", self.descriptor, self.value)
    }

    fn tokens_key(&self) -> String {
        format!("{{{}:{}}}:tokens", self.descriptor, self.value)
    }
}

/// Why the lane cannot reserve a request's tokens as the limiter would.
#[derive(Debug, PartialEq, Eq)]
pub enum EstimateRefusal {
    /// The limiter would write `max_tokens` into the request before calling the provider (no
    /// output cap and a tpm limit below 4096): the proxy sends that body.
    ImplicitCap,
    /// A body whose estimate the limiter's Python works out in ways the lane does not follow
    /// (a cap given as a string, `n`, search results, content it would fail on).
    Unusual,
}

/// The limiter's estimate for a chat or `/v1/messages` body (`_estimate_tokens_for_request`
/// with LiteLLM's call type for either, floored at 1): the characters of the messages' text
/// (`get_str_from_messages`) over 4, plus the output cap (`max_tokens`,
/// `max_completion_tokens`: the larger), or without one the larger of the input estimate and
/// the floor (`no_max_tokens_output_floor` of the smallest tpm limit).
pub fn estimate(body: &[u8], min_limit: u64) -> Result<u64, EstimateRefusal> {
    let body: Value = serde_json::from_slice(body).map_err(|_| EstimateRefusal::Unusual)?;
    let body = body.as_object().ok_or(EstimateRefusal::Unusual)?;
    if ["n", "best_of"].iter().any(|name| body.contains_key(*name)) {
        return Err(EstimateRefusal::Unusual);
    }
    let chars = match body.get("messages") {
        Some(Value::Array(messages)) => messages_chars(messages)?,
        _ => 0,
    };
    let mut explicit: Option<i64> = None;
    for name in ["max_tokens", "max_completion_tokens"] {
        if let Some(cap) = output_cap(body.get(name))? {
            explicit = Some(explicit.map_or(cap, |found| found.max(cap)));
        }
    }
    let min_limit = i64::try_from(min_limit).unwrap_or(i64::MAX);
    let floor = BASELINE_OUTPUT_FLOOR.min((min_limit / TPM_FLOOR_FRACTION).max(1));
    if explicit.is_none() && floor < BASELINE_OUTPUT_FLOOR {
        return Err(EstimateRefusal::ImplicitCap);
    }
    let input = if chars > 0 {
        (chars / CHARS_PER_TOKEN).max(1)
    } else {
        0
    };
    let output = match explicit {
        Some(cap) => cap,
        None if chars == 0 => 0,
        None => input.max(floor),
    };
    Ok(u64::try_from(input.saturating_add(output).max(1)).unwrap_or(1))
}

/// `len(get_str_from_messages(messages))`: a message's string content, or the truthy `text`
/// of each block of its list content, in characters (Python counts code points).
fn messages_chars(messages: &[Value]) -> Result<i64, EstimateRefusal> {
    let mut chars: usize = 0;
    for message in messages {
        let message = message.as_object().ok_or(EstimateRefusal::Unusual)?;
        if !matches!(message.get("search_results"), None | Some(Value::Null)) {
            return Err(EstimateRefusal::Unusual);
        }
        match message.get("content") {
            Some(Value::String(text)) => chars += text.chars().count(),
            Some(Value::Array(blocks)) => {
                for block in blocks {
                    let block = block.as_object().ok_or(EstimateRefusal::Unusual)?;
                    match block.get("text") {
                        Some(Value::String(text)) => chars += text.chars().count(),
                        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
                        // Python adds any other truthy value to a string, and fails.
                        Some(_) => return Err(EstimateRefusal::Unusual),
                    }
                }
            }
            _ => {}
        }
    }
    i64::try_from(chars).map_err(|_| EstimateRefusal::Unusual)
}

/// `_parse_output_cap_value`: a number (truncated), not a bool; a string is parsed by Python's
/// `float`, which the lane leaves to the proxy.
fn output_cap(value: Option<&Value>) -> Result<Option<i64>, EstimateRefusal> {
    match value {
        Some(Value::Number(number)) => match number.as_i64() {
            Some(cap) => Ok(Some(cap)),
            None => match number.as_f64() {
                Some(cap) if cap.is_finite() && cap.abs() < 9.0e18 => Ok(Some(cap.trunc() as i64)),
                _ => Err(EstimateRefusal::Unusual),
            },
        },
        Some(Value::String(_)) => Err(EstimateRefusal::Unusual),
        _ => Ok(None),
    }
}

/// A reservation made in every scope's token window: what the success callback reconciles.
#[derive(Clone, Debug, PartialEq)]
pub struct Reserved {
    pub tokens: u64,
    /// Each window's count with the reservation.
    pub counts: Vec<u64>,
}

/// One scope's reservation, as the refund needs it.
struct Applied {
    window_key: String,
    tokens_key: String,
    window_start: String,
}

/// Reserves `tokens` in every scope's window with the limiter's check-and-increment script,
/// one scope at a time as the limiter does; on a refusal or a failure, the scopes already
/// reserved are refunded with the limiter's window-guarded script.
pub async fn reserve(
    counting: &RedisCounting,
    scopes: &[TokenScope],
    tokens: u64,
) -> Result<Reserved, RateRefusal> {
    let window = counting.window_size.to_string();
    let mut applied: Vec<Applied> = Vec::with_capacity(scopes.len());
    let mut counts = Vec::with_capacity(scopes.len());
    for scope in scopes {
        let keys = [scope.window_key(), scope.tokens_key()];
        let args = [
            scope.limit.to_string(),
            tokens.to_string(),
            window.clone(),
            window.clone(),
        ];
        let reply = counting
            .redis
            .eval(&counting.token_scripts.check_and_increment, &keys, &args)
            .await;
        let outcome = match reply {
            Ok(reply) => reserved(&reply),
            Err(_) => Err(RateRefusal::Unreachable),
        };
        match outcome {
            Ok((count, window_start)) => {
                let [window_key, tokens_key] = keys;
                applied.push(Applied {
                    window_key,
                    tokens_key,
                    window_start,
                });
                counts.push(count);
            }
            Err(refusal) => {
                refund(counting, &applied, tokens).await;
                return Err(refusal);
            }
        }
    }
    Ok(Reserved { tokens, counts })
}

async fn refund(counting: &RedisCounting, applied: &[Applied], tokens: u64) {
    let decrement = format!("-{tokens}");
    for scope in applied {
        let keys = [scope.window_key.clone(), scope.tokens_key.clone()];
        let args = [
            scope.window_start.clone(),
            decrement.clone(),
            "0".to_string(),
        ];
        // Best effort, as in LiteLLM: the refusal already decided the request.
        let _ = counting
            .redis
            .eval(
                &counting.token_scripts.window_guarded_increment,
                &keys,
                &args,
            )
            .await;
    }
}

/// The check-and-increment script's reply for one scope: `{0, count, window_start}` reserved,
/// `{1, index, count, limit}` refused.
fn reserved(reply: &Reply) -> Result<(u64, String), RateRefusal> {
    let Reply::Array(items) = reply else {
        return Err(RateRefusal::Unreachable);
    };
    let number = |reply: &Reply| reply.as_i64();
    match items.first().and_then(number) {
        Some(0) if items.len() == 3 => {
            let count = number(&items[1]).ok_or(RateRefusal::Unreachable)?;
            let start = number(&items[2]).ok_or(RateRefusal::Unreachable)?;
            Ok((u64::try_from(count).unwrap_or(0), start.to_string()))
        }
        Some(1) => Err(RateRefusal::AtLimit),
        _ => Err(RateRefusal::Unreachable),
    }
}

/// The limiter's headers for a reservation: `x-ratelimit-{descriptor}-remaining-tokens` and
/// `-limit-tokens`.
pub fn headers(scopes: &[TokenScope], counts: &[u64]) -> Vec<(String, String)> {
    scopes
        .iter()
        .zip(counts)
        .flat_map(|(scope, count)| {
            let remaining = scope.limit.saturating_sub(*count).into();
            limit_headers(&scope.descriptor, "tokens", remaining, scope.limit)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reservation_script_s_reply_gives_the_count_and_window() {
        let reserved_reply = Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(34),
            Reply::Bulk(b"1700000000".to_vec()),
        ]);
        assert_eq!(
            reserved(&reserved_reply),
            Ok((34, "1700000000".to_string()))
        );
        let refused = Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(1),
            Reply::Int(90),
            Reply::Int(100),
        ]);
        assert_eq!(reserved(&refused), Err(RateRefusal::AtLimit));
        assert_eq!(reserved(&Reply::Nil), Err(RateRefusal::Unreachable));
    }

    #[test]
    fn an_uncapped_request_under_a_small_limit_goes_to_the_proxy() {
        let body = br#"{"messages":[{"role":"user","content":"hello world!"}]}"#;
        // 12 characters: 3 input tokens; no cap: the larger of those and the floor.
        assert_eq!(estimate(body, 1_000_000), Ok(3 + 1024));
        assert_eq!(estimate(body, 4095), Err(EstimateRefusal::ImplicitCap));
        let capped = br#"{"messages":[{"role":"user","content":"hello world!"}],"max_tokens":5}"#;
        assert_eq!(estimate(capped, 4095), Ok(8));
    }

    #[test]
    fn token_headers_name_each_descriptor() {
        let scope = TokenScope {
            descriptor: "team".into(),
            value: "t".into(),
            limit: 100,
            counted: 0,
            window_ends: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(
            headers(&[scope], &[120]),
            [
                ("x-ratelimit-team-remaining-tokens", "0"),
                ("x-ratelimit-team-limit-tokens", "100"),
            ]
            .map(|(name, value)| (name.to_string(), value.to_string()))
        );
    }
}
