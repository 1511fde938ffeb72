//! rpm limits on a key's scopes (the key, its user, its team, its team membership), counted in
//! LiteLLM's v3 limiter's fixed windows: `{descriptor:value}:window` holds when the window
//! started, `{descriptor:value}:requests` how many requests it counted (a request is counted
//! before it is judged; past the limit it is refused, and stays counted).
//!
//! Where LiteLLM's counters are the worker's own (no Redis), the replay's pre-call hook counts
//! the request; the lane holds one request per scope until then (`holds`) and admits while
//! `held + 1 ≤ limit − counted`, away from the window's end; a key's tpm windows the same way,
//! with the limiter's estimate for the request (see `tokens`). `counted` is the latest reading
//! of the window, whichever key's verdict or settlement it came with (`Readings`). Where they
//! are in Redis, the lane counts the request there itself, with the limiter's own script,
//! before the provider call, and the replay's limiter leaves it counted (`redis`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::counting::{RateRefusal, Reading, Readings, RedisCounting, WindowKind, limit_headers};
use super::parallel::{self, Gauge};
use super::redis::Reply;
use super::tokens::{self, TokenScope};
use crate::lane::holds::Claim;

/// A window ending sooner than this goes to the proxy: the replay could count the request in
/// the next window, where the lane's headers would be wrong.
const WINDOW_MARGIN: Duration = Duration::from_secs(2);

/// One scope's rpm limit, and its window as last read.
#[derive(Clone, Debug, PartialEq)]
pub struct RateScope {
    /// LiteLLM's descriptor (`api_key`, `user`, `team`, `team_member`) and its value.
    pub descriptor: String,
    pub value: String,
    pub limit: u64,
    /// What the window counted, the latest request LiteLLM judged included.
    pub counted: u64,
    /// When the window ends (UNIX_EPOCH: no window yet).
    pub window_ends: SystemTime,
}

impl RateScope {
    pub fn held_counter(&self) -> String {
        WindowKind::Requests.held_counter(&self.descriptor, &self.value)
    }

    fn window_key(&self) -> String {
        format!("{{{}:{}}}:window", self.descriptor, self.value)
    }

    fn requests_key(&self) -> String {
        format!("{{{}:{}}}:requests", self.descriptor, self.value)
    }

    fn reading(&self) -> Reading {
        Reading {
            counted: self.counted,
            window_ends: self.window_ends,
        }
    }
}

/// Where LiteLLM counts a key's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counting {
    /// The worker's memory: the replay counts; the lane holds until it has.
    Worker,
    /// The proxy's Redis: the lane counts there itself.
    Redis,
}

/// A key's rate limits, as its verdict carries them.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyRates {
    pub scopes: Vec<RateScope>,
    /// The key's tpm limits (see `tokens`).
    pub tokens: Vec<TokenScope>,
    /// The key's parallel-request limits (see `parallel`).
    pub gauges: Vec<Gauge>,
    pub counting: Counting,
}

/// One window a request holds on where the worker counts: the hold, and the window's count as
/// last read (the limiter's header adds what is held).
pub struct WindowClaim {
    pub claim: Claim,
    pub counted: u64,
}

impl KeyRates {
    /// Records the verdict's readings of its windows (where the worker counts).
    pub fn record(&self, readings: &mut Readings) {
        if self.counting == Counting::Redis {
            return;
        }
        for scope in &self.scopes {
            readings.record_window(scope.held_counter(), scope.reading());
        }
        for scope in &self.tokens {
            readings.record_window(scope.held_counter(), scope.reading());
        }
        for gauge in &self.gauges {
            readings.record_slots(gauge.key(), gauge.in_flight);
        }
    }

    /// The holds a request takes where the worker counts (none where Redis does): one request
    /// on each rpm window, `tokens` (the limiter's estimate) on each tpm window, against the
    /// latest readings; or a refusal when a window is near its end.
    pub fn claims(
        &self,
        now: SystemTime,
        tokens: Option<u64>,
        readings: &Readings,
    ) -> Result<Vec<WindowClaim>, RateRefusal> {
        if self.counting == Counting::Redis {
            return Ok(Vec::new());
        }
        // A key with tpm windows is only admitted with the request's estimate.
        let tokens = match tokens {
            Some(tokens) => tokens,
            None if self.tokens.is_empty() => 0,
            None => return Err(RateRefusal::AtLimit),
        };
        let rpm = self
            .scopes
            .iter()
            .map(|scope| (scope.held_counter(), scope.limit, scope.reading(), 1));
        let tpm = self
            .tokens
            .iter()
            .map(|scope| (scope.held_counter(), scope.limit, scope.reading(), tokens));
        rpm.chain(tpm)
            .map(|(counter, limit, own, amount)| {
                let reading = readings.window(&counter).unwrap_or(own);
                if now + WINDOW_MARGIN >= reading.window_ends {
                    return Err(RateRefusal::AtLimit);
                }
                Ok(WindowClaim {
                    counted: reading.counted,
                    claim: Claim {
                        counter,
                        amount: amount as f64,
                        room: limit.saturating_sub(reading.counted) as f64,
                    },
                })
            })
            .collect()
    }

    /// The limiter's headers for a request admitted where the worker counts, from each
    /// window's count with what is held on it (in `claims`' order: rpm, then tpm) and each
    /// gauge's slots in flight (LiteLLM's order: rpm, gauges, tpm).
    pub fn worker_headers(&self, counts: &[u64], in_flight: &[u64]) -> Vec<(String, String)> {
        let (rpm, tpm) = counts.split_at(self.scopes.len().min(counts.len()));
        let mut found = headers(&self.scopes, rpm);
        found.extend(parallel::headers(&self.gauges, in_flight));
        found.extend(tokens::headers(&self.tokens, tpm));
        found
    }

    /// The windows' counters the lane drains before the proxy decides on them (a full gauge
    /// is not drained: LiteLLM refuses at once what finds no slot).
    pub fn held_counters(&self) -> Vec<String> {
        let rpm = self.scopes.iter().map(RateScope::held_counter);
        rpm.chain(self.tokens.iter().map(TokenScope::held_counter))
            .collect()
    }

    /// Whether a window is spent as last read (Redis counting: the proxy decides at once).
    pub fn spent(&self) -> bool {
        self.scopes.iter().any(|scope| scope.counted >= scope.limit)
    }
}

/// The limiter's headers for an admitted request, from each window's count with the request:
/// `x-ratelimit-{descriptor}-remaining-requests` and `-limit-requests`.
pub fn headers(scopes: &[RateScope], counts: &[u64]) -> Vec<(String, String)> {
    scopes
        .iter()
        .zip(counts)
        .flat_map(|(scope, count)| {
            let remaining = scope.limit as i128 - *count as i128;
            limit_headers(&scope.descriptor, "requests", remaining, scope.limit)
        })
        .collect()
}

impl RedisCounting {
    /// Counts the request in every scope's window with the limiter's script. Each window's start
    /// and count with it, or the refusal: a window past its limit (the increments are taken back, so that the
    /// proxy's limiter counts and refuses the request as it would have alone), or no Redis.
    pub async fn count(&self, scopes: &[RateScope]) -> Result<Vec<(u64, u64)>, RateRefusal> {
        if scopes.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = scopes
            .iter()
            .flat_map(|scope| [scope.window_key(), scope.requests_key()])
            .collect();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let args = [now.to_string(), self.window_size.to_string()];
        let reply = self
            .redis
            .eval(&self.script, &keys, &args)
            .await
            .map_err(|_| RateRefusal::Unreachable)?;
        let counts = window_counts(&reply, scopes.len()).ok_or(RateRefusal::Unreachable)?;
        if scopes
            .iter()
            .zip(&counts)
            .all(|(scope, (_, count))| *count <= scope.limit)
        {
            return Ok(counts);
        }
        self.take_back(scopes).await;
        Err(RateRefusal::AtLimit)
    }

    /// Takes a request's count back from every window (refused after it was counted), so that
    /// the proxy's limiter counts and judges it as it would have alone.
    pub async fn take_back(&self, scopes: &[RateScope]) {
        for scope in scopes {
            // Best effort: a window that expires meanwhile takes the count with it anyway.
            let key = scope.requests_key();
            let _ = self.redis.command(&[b"DECR", key.as_bytes()]).await;
        }
    }
}

/// `(window start, count)` per scope, from the script's reply (`[window_start, counter]` each).
fn window_counts(reply: &Reply, scopes: usize) -> Option<Vec<(u64, u64)>> {
    let Reply::Array(items) = reply else {
        return None;
    };
    if items.len() != 2 * scopes {
        return None;
    }
    items
        .chunks(2)
        .map(|pair| {
            let number = |reply: &Reply| reply.as_i64().and_then(|n| u64::try_from(n).ok());
            Some((number(&pair[0])?, number(&pair[1])?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(descriptor: &str, limit: u64, counted: u64, ends_in: u64) -> RateScope {
        RateScope {
            descriptor: descriptor.into(),
            value: "v".into(),
            limit,
            counted,
            window_ends: SystemTime::now() + Duration::from_secs(ends_in),
        }
    }

    fn token_scope(descriptor: &str, limit: u64, counted: u64, ends_in: u64) -> TokenScope {
        TokenScope {
            descriptor: descriptor.into(),
            value: "v".into(),
            limit,
            counted,
            window_ends: SystemTime::now() + Duration::from_secs(ends_in),
        }
    }

    fn worker(scopes: Vec<RateScope>, tokens: Vec<TokenScope>) -> KeyRates {
        KeyRates {
            scopes,
            tokens,
            gauges: Vec::new(),
            counting: Counting::Worker,
        }
    }

    fn held(claims: &[WindowClaim]) -> Vec<(&str, f64, f64, u64)> {
        claims
            .iter()
            .map(|found| {
                let claim = &found.claim;
                (
                    claim.counter.as_str(),
                    claim.amount,
                    claim.room,
                    found.counted,
                )
            })
            .collect()
    }

    #[test]
    fn the_worker_s_windows_claim_one_request_each_away_from_their_end() {
        let rates = worker(
            vec![scope("api_key", 5, 2, 30), scope("team", 10, 9, 30)],
            Vec::new(),
        );
        let readings = Readings::default();
        let claims = rates.claims(SystemTime::now(), None, &readings).unwrap();
        assert_eq!(
            held(&claims),
            [("rpm:api_key:v", 1.0, 3.0, 2), ("rpm:team:v", 1.0, 1.0, 9)]
        );
        let ending = worker(vec![scope("api_key", 5, 2, 1)], Vec::new());
        let now = SystemTime::now();
        assert!(matches!(
            ending.claims(now, None, &readings),
            Err(RateRefusal::AtLimit)
        ));
        let redis = KeyRates {
            counting: Counting::Redis,
            ..ending
        };
        assert!(redis.claims(now, None, &readings).unwrap().is_empty());
    }

    #[test]
    fn tpm_windows_claim_the_estimate_and_need_one() {
        let rates = worker(
            vec![scope("api_key", 5, 2, 30)],
            vec![token_scope("team", 1000, 400, 30)],
        );
        let readings = Readings::default();
        let now = SystemTime::now();
        let claims = rates.claims(now, Some(120), &readings).unwrap();
        assert_eq!(
            held(&claims),
            [
                ("rpm:api_key:v", 1.0, 3.0, 2),
                ("tpm:team:v", 120.0, 600.0, 400)
            ]
        );
        assert!(matches!(
            rates.claims(now, None, &readings),
            Err(RateRefusal::AtLimit)
        ));
        assert_eq!(
            rates.worker_headers(&[3, 520], &[]),
            [
                ("x-ratelimit-api_key-remaining-requests", "2"),
                ("x-ratelimit-api_key-limit-requests", "5"),
                ("x-ratelimit-team-remaining-tokens", "480"),
                ("x-ratelimit-team-limit-tokens", "1000"),
            ]
            .map(|(name, value)| (name.to_string(), value.to_string()))
        );
        assert_eq!(rates.held_counters(), ["rpm:api_key:v", "tpm:team:v"]);
    }

    #[test]
    fn a_window_shared_by_keys_is_admitted_on_its_latest_reading() {
        // Key A's verdict read the team's window at 9; key B's, older, at 3.
        let key_a = worker(vec![scope("team", 10, 9, 30)], Vec::new());
        let key_b = worker(vec![scope("team", 10, 3, 30)], Vec::new());
        let mut readings = Readings::default();
        key_b.record(&mut readings);
        key_a.record(&mut readings);
        let claims = key_b.claims(SystemTime::now(), None, &readings).unwrap();
        assert_eq!(held(&claims), [("rpm:team:v", 1.0, 1.0, 9)]);
        // Where Redis counts, the verdict records nothing.
        let mut none = Readings::default();
        KeyRates {
            counting: Counting::Redis,
            ..key_a
        }
        .record(&mut none);
        assert_eq!(none.window("rpm:team:v"), None);
    }

    #[test]
    fn headers_name_each_descriptor_with_what_remains() {
        let scopes = [scope("api_key", 5, 0, 30), scope("user", 2, 0, 30)];
        assert_eq!(
            headers(&scopes, &[3, 2]),
            [
                ("x-ratelimit-api_key-remaining-requests", "2"),
                ("x-ratelimit-api_key-limit-requests", "5"),
                ("x-ratelimit-user-remaining-requests", "0"),
                ("x-ratelimit-user-limit-requests", "2"),
            ]
            .map(|(name, value)| (name.to_string(), value.to_string()))
        );
    }

    #[test]
    fn the_script_s_reply_gives_each_window_s_count() {
        let reply = Reply::Array(vec![
            Reply::Bulk(b"1700000000".to_vec()),
            Reply::Int(3),
            Reply::Bulk(b"1700000000".to_vec()),
            Reply::Bulk(b"7".to_vec()),
        ]);
        assert_eq!(
            window_counts(&reply, 2),
            Some(vec![(1_700_000_000, 3), (1_700_000_000, 7)])
        );
        assert_eq!(window_counts(&reply, 1), None);
        assert_eq!(window_counts(&Reply::Nil, 1), None);
    }
}
