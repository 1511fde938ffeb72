//! What the lane's three kinds of rate limit share: LiteLLM's coordination Redis with the v3
//! limiter's scripts, the refusals that send a request to the proxy, the limiter's headers, and
//! what the lane last read of the worker's windows and gauges.

use std::collections::HashMap;
use std::time::SystemTime;

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

/// A window's count as last read in the worker, and when it ends (UNIX_EPOCH: no window).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    pub counted: u64,
    pub window_ends: SystemTime,
}

/// What the lane last read of LiteLLM's limits in the worker: each window's count, by the
/// lane's name for it (its held counter, `rpm:…`, `tpm:…`), and the slots the proxy's own
/// requests hold in each parallel-request gauge (LiteLLM's registry), by gauge key. A window
/// shared by several keys (a team's, a user's) is read whenever LiteLLM judges a request of any
/// of them: every key's admission uses the latest.
#[derive(Debug, Default)]
pub struct Readings {
    windows: HashMap<String, Reading>,
    slots: HashMap<String, u64>,
}

/// Readings kept at most (one per window or gauge of a judged key; past this they start over,
/// and each key's verdict brings its own again).
const MAX_READINGS: usize = 200_000;

impl Readings {
    pub fn window(&self, counter: &str) -> Option<Reading> {
        self.windows.get(counter).copied()
    }

    pub fn record_window(&mut self, counter: String, reading: Reading) {
        record_bounded(&mut self.windows, counter, reading);
    }

    pub fn slots(&self, gauge_key: &str) -> Option<u64> {
        self.slots.get(gauge_key).copied()
    }

    pub fn record_slots(&mut self, gauge_key: String, slots: u64) {
        record_bounded(&mut self.slots, gauge_key, slots);
    }
}

fn record_bounded<V>(readings: &mut HashMap<String, V>, name: String, value: V) {
    if readings.len() >= MAX_READINGS && !readings.contains_key(&name) {
        readings.clear();
    }
    readings.insert(name, value);
}

/// The limiter's kinds of window counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowKind {
    Requests,
    Tokens,
}

impl WindowKind {
    /// The limiter's name for it (`{descriptor:value}:requests`, `:tokens`).
    pub fn named(name: &str) -> Option<WindowKind> {
        match name {
            "requests" => Some(WindowKind::Requests),
            "tokens" => Some(WindowKind::Tokens),
            _ => None,
        }
    }

    /// The window's counter among the lane's holds (shared by every key of a team, a user...).
    pub fn held_counter(self, descriptor: &str, value: &str) -> String {
        let prefix = match self {
            WindowKind::Requests => "rpm",
            WindowKind::Tokens => "tpm",
        };
        format!("{prefix}:{descriptor}:{value}")
    }
}
