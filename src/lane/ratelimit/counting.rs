//! What the lane's three kinds of rate limit share: LiteLLM's coordination Redis with the v3
//! limiter's scripts, the refusals that send a request to the proxy, and the limiter's headers.

use super::redis::Redis;

/// LiteLLM's coordination Redis as the lane counts in it: the limiter's own script.
pub struct RedisCounting {
    pub redis: Redis,
    /// The v3 limiter's `BATCH_RATE_LIMITER_SCRIPT`, as LiteLLM runs it.
    pub script: String,
    pub window_size: u64,
    /// The limiter's token-window scripts.
    pub token_scripts: TokenScripts,
    /// The limiter's parallel-request gauge scripts.
    pub gauge_scripts: GaugeScripts,
}

/// The limiter's token-window scripts, as LiteLLM runs them.
#[derive(Clone, Debug)]
pub struct TokenScripts {
    /// `CHECK_AND_INCREMENT_BY_N_SCRIPT`: checks a window, then adds the reservation.
    pub check_and_increment: String,
    /// `WINDOW_GUARDED_TOKEN_INCREMENT_SCRIPT`: a refund, only into the window reserved in.
    pub window_guarded_increment: String,
}

/// The limiter's parallel-request gauge scripts and slot TTL, as LiteLLM runs them.
#[derive(Clone, Debug)]
pub struct GaugeScripts {
    /// `PARALLEL_ACQUIRE_SCRIPT`: checks every gauge, then adds the slot to each.
    pub acquire: String,
    /// `PARALLEL_RELEASE_SCRIPT`: removes the slot (an absent slot is a no-op).
    pub release: String,
    /// `PARALLEL_REQUEST_SLOT_TTL_SECONDS`: a slot older than this no longer counts.
    pub slot_ttl: u64,
}

/// Why a request's rate limits send it to the proxy.
#[derive(Debug, PartialEq, Eq)]
pub enum RateRefusal {
    /// A window is at (or near) its limit, or near its end, or not started: LiteLLM decides.
    AtLimit,
    /// Redis did not answer (the proxy's limiter decides, and reports it as it does).
    Unreachable,
}

/// One limit's pair of the limiter's headers, `x-ratelimit-{descriptor}-remaining-{kind}` and
/// `-limit-{kind}` (`_merge_ratelimit_statuses_into_additional_headers`).
pub fn limit_headers(
    descriptor: &str,
    kind: &str,
    remaining: i128,
    limit: u64,
) -> [(String, String); 2] {
    let prefix = format!("x-ratelimit-{descriptor}");
    [
        (format!("{prefix}-remaining-{kind}"), remaining.to_string()),
        (format!("{prefix}-limit-{kind}"), limit.to_string()),
    ]
}
