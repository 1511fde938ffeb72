//! Parallel-request limits (`max_parallel_requests` on a key) against LiteLLM's v3 limiter's
//! own concurrency gauge: a sorted set `{api_key:<hash>}:max_parallel_requests` of the slots
//! in flight, one per admitted request, scored by when it was taken (Redis's clock), pruned
//! after the limiter's slot TTL. The lane takes a slot with the limiter's own acquire script
//! after counting the request's rpm windows (LiteLLM's order: a window's refusal never strands
//! a slot), and gives it back with the limiter's release script once the answer is complete.
//!
//! Where LiteLLM keeps the gauge in the worker (its Python registry of slots), the lane holds
//! its requests' slots itself (`holds`, under the gauge's key) beside the registry's, and the
//! two count each other: a request of the lane fits while the registry's slots (as last
//! recorded, `Readings`) and the lane's leave room; a request of the proxy takes its slot in
//! the registry through `Lane::enter_gauge`, which counts the lane's slots and records the
//! registry's new count, under the same lock as the lane's admissions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::counting::{RateRefusal, Readings, RedisCounting, limit_headers};
use super::redis::Reply;
use crate::lane::holds::{Claim, Hold, Holds};

/// One scope's parallel-request limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Gauge {
    /// LiteLLM's descriptor (`api_key`) and its value.
    pub descriptor: String,
    pub value: String,
    pub limit: u64,
    /// The slots LiteLLM's registry in the worker held when the verdict was read (0 where
    /// Redis keeps the gauge).
    pub in_flight: u64,
}

impl Gauge {
    /// The limiter's gauge key (`create_rate_limit_keys(..., "max_parallel_requests")`).
    pub fn key(&self) -> String {
        format!(
            "{{{}:{}}}:max_parallel_requests",
            self.descriptor, self.value
        )
    }
}

/// A request's slots, until it gives them back (`release`).
pub enum Slot {
    /// In the gauges in Redis, under the request's slot id.
    Redis {
        counting: Arc<RedisCounting>,
        keys: Vec<String>,
        id: String,
    },
    /// Held by the lane beside the worker's registry.
    Worker(Hold),
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Redis { id, .. } => formatter.debug_tuple("Slot::Redis").field(id).finish(),
            Slot::Worker(hold) => formatter.debug_tuple("Slot::Worker").field(hold).finish(),
        }
    }
}

impl Slot {
    /// Gives the slot back in every gauge. Best effort in Redis, as in LiteLLM: a slot Redis
    /// never heard of again ages out after the slot TTL.
    pub async fn release(self) {
        match self {
            Slot::Redis { counting, keys, id } => {
                let args = vec![id; keys.len()];
                let script = &counting.gauge_scripts.release;
                let _ = counting.redis.eval(script, &keys, &args).await;
            }
            Slot::Worker(hold) => drop(hold),
        }
    }

    /// Gives a slot the worker keeps back at once (one in Redis needs a round trip: see
    /// `release`); the Redis slot back otherwise.
    pub fn release_now(self) -> Option<Slot> {
        match self {
            Slot::Worker(hold) => {
                drop(hold);
                None
            }
            redis => Some(redis),
        }
    }
}

/// Takes the request's slot in every gauge the worker keeps, beside the registry's slots as
/// last recorded: the slot and each gauge's slots in flight with it; `AtLimit` when a gauge is
/// full (the proxy's limiter then decides, counting the lane's slots).
pub fn hold_in_worker(
    holds: &Arc<Holds>,
    gauges: &[Gauge],
    readings: &Readings,
) -> Result<(Slot, Vec<u64>), RateRefusal> {
    let registered: Vec<u64> = gauges
        .iter()
        .map(|gauge| readings.slots(&gauge.key()).unwrap_or(gauge.in_flight))
        .collect();
    let claims: Vec<Claim> = gauges
        .iter()
        .zip(&registered)
        .map(|(gauge, registered)| Claim {
            counter: gauge.key(),
            amount: 1.0,
            room: gauge.limit.saturating_sub(*registered) as f64,
        })
        .collect();
    let (hold, held) = holds.try_hold(&claims).map_err(|_| RateRefusal::AtLimit)?;
    let in_flight = registered
        .iter()
        .zip(held)
        .map(|(registered, held)| registered + held.round() as u64)
        .collect();
    Ok((Slot::Worker(hold), in_flight))
}

/// A slot id no other request of any worker or instance has: LiteLLM's are uuid4 hex, the
/// lane's are the process, a counter and the clock.
fn slot_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "lane-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Takes a slot in every gauge, or none: the slot and each gauge's count of slots in flight
/// with it; `AtLimit` when a gauge is full (the proxy's limiter then refuses the request as
/// LiteLLM does, or admits it if a slot was freed meanwhile), `Unreachable` without Redis.
pub async fn acquire(
    counting: &Arc<RedisCounting>,
    gauges: &[Gauge],
) -> Result<(Slot, Vec<u64>), RateRefusal> {
    let keys: Vec<String> = gauges.iter().map(Gauge::key).collect();
    let id = slot_id();
    let ttl = counting.gauge_scripts.slot_ttl.to_string();
    let args: Vec<String> = gauges
        .iter()
        .flat_map(|gauge| [gauge.limit.to_string(), ttl.clone(), id.clone()])
        .collect();
    let reply = counting
        .redis
        .eval(&counting.gauge_scripts.acquire, &keys, &args)
        .await
        .map_err(|_| RateRefusal::Unreachable)?;
    let in_flight = acquired(&reply, gauges.len())?;
    let slot = Slot::Redis {
        counting: Arc::clone(counting),
        keys,
        id,
    };
    Ok((slot, in_flight))
}

/// The acquire script's reply: `{0, in_flight...}` admitted, `{1, index, in_flight, limit}`
/// refused.
fn acquired(reply: &Reply, gauges: usize) -> Result<Vec<u64>, RateRefusal> {
    let Reply::Array(items) = reply else {
        return Err(RateRefusal::Unreachable);
    };
    let number = |reply: &Reply| reply.as_i64().and_then(|n| u64::try_from(n).ok());
    match items.first().and_then(number) {
        Some(0) if items.len() == gauges + 1 => items[1..]
            .iter()
            .map(number)
            .collect::<Option<Vec<u64>>>()
            .ok_or(RateRefusal::Unreachable),
        Some(1) => Err(RateRefusal::AtLimit),
        _ => Err(RateRefusal::Unreachable),
    }
}

/// The limiter's headers for an admitted request's gauges:
/// `x-ratelimit-{descriptor}-remaining-max_parallel_requests` and `-limit-...`.
pub fn headers(gauges: &[Gauge], in_flight: &[u64]) -> Vec<(String, String)> {
    gauges
        .iter()
        .zip(in_flight)
        .flat_map(|(gauge, count)| {
            let remaining = gauge.limit.saturating_sub(*count).into();
            limit_headers(
                &gauge.descriptor,
                "max_parallel_requests",
                remaining,
                gauge.limit,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acquire_script_s_reply_admits_or_refuses() {
        let admitted = Reply::Array(vec![Reply::Int(0), Reply::Int(2)]);
        assert_eq!(acquired(&admitted, 1), Ok(vec![2]));
        let refused = Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(1),
            Reply::Int(3),
            Reply::Int(3),
        ]);
        assert_eq!(acquired(&refused, 1), Err(RateRefusal::AtLimit));
        assert_eq!(acquired(&admitted, 2), Err(RateRefusal::Unreachable));
        assert_eq!(acquired(&Reply::Nil, 1), Err(RateRefusal::Unreachable));
    }

    #[test]
    fn gauge_headers_never_go_below_zero() {
        let gauge = Gauge {
            descriptor: "api_key".into(),
            value: "h".into(),
            limit: 2,
            in_flight: 0,
        };
        assert_eq!(gauge.key(), "{api_key:h}:max_parallel_requests");
        assert_eq!(
            headers(std::slice::from_ref(&gauge), &[3]),
            [
                ("x-ratelimit-api_key-remaining-max_parallel_requests", "0"),
                ("x-ratelimit-api_key-limit-max_parallel_requests", "2"),
            ]
            .map(|(name, value)| (name.to_string(), value.to_string()))
        );
        assert!(slot_id() != slot_id());
    }

    #[test]
    fn the_worker_s_gauge_counts_the_registry_s_slots_and_the_lane_s() {
        let holds = Arc::new(Holds::default());
        let gauge = Gauge {
            descriptor: "api_key".into(),
            value: "h".into(),
            limit: 3,
            in_flight: 2,
        };
        let gauges = std::slice::from_ref(&gauge);
        let mut readings = Readings::default();
        // The verdict's reading: 2 registered, room for one.
        let (first, in_flight) = hold_in_worker(&holds, gauges, &readings).unwrap();
        assert_eq!(in_flight, [3]);
        assert!(hold_in_worker(&holds, gauges, &readings).is_err());
        // The registry gave one back (a later reading): room again.
        readings.record_slots(gauge.key(), 1);
        let (second, in_flight) = hold_in_worker(&holds, gauges, &readings).unwrap();
        assert_eq!(in_flight, [3]);
        assert_eq!(holds.held(&gauge.key()), 2.0);
        assert!(first.release_now().is_none());
        drop(second);
        assert_eq!(holds.held(&gauge.key()), 0.0);
    }
}
