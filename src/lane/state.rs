//! The lane of one process: what it knows (`Table`), where it forwards (`App`), its provider
//! engine, the outcomes and replays it holds for the proxy, and what it counts.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use super::holds::Holds;
use super::ratelimit::counting::{Reading, Readings, RedisCounting};
use super::realtime::hub::Realtime;
use super::replay::{Replay, Replays};
use super::table::{Table, Verdict};
use super::tickets::{Ticket, Tickets};
use crate::model::LaneReason;
use crate::runtime::Engine;

/// Replays waiting for the proxy (each runs the proxy's per-request Python, so they keep logging
/// and spend no more than this far behind); past this the lane sends new requests to the proxy.
/// About five seconds of a worker's lane at its highest rate with a recording callback here: a
/// full collection of the proxy's heap stops its Python for about 0.7 s (LiteLLM's logging makes
/// cyclic garbage per request), which the lane rides out; a lower bound sent the requests of
/// such a pause to the proxy, whose Python then fell behind for seconds. Env
/// `LITELLM_FASTPATH_LANE_BACKLOG` overrides.
const MAX_BACKLOG: usize = 2048;
/// With several workers on one socket: replays waiting past which this worker counts as busy
/// (about 0.1 s of the proxy's Python). Env `LITELLM_FASTPATH_LANE_BUSY_BACKLOG` overrides.
const BUSY_BACKLOG: usize = 32;
/// Distinct `lane_off:<setting>` counts kept (the settings come from the proxy's config, so a
/// handful; the bound only guards memory).
const MAX_OFF_REASONS: usize = 64;

fn backlog_setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// Upper bounds, in seconds, of the buckets the lane sorts its provider calls' durations into
/// (the proxy's `litellm_fastpath_upstream_duration_seconds` histogram uses the same ones).
pub const UPSTREAM_BUCKETS_S: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// What the lane served for one route and model group: requests, and their provider calls'
/// durations (time to the answer, or to a stream's first frames) by bucket, the last one past
/// every bound.
#[derive(Clone, Debug, PartialEq)]
pub struct ServedTally {
    pub requests: u64,
    pub buckets: Vec<u64>,
    pub upstream_s: f64,
}

impl ServedTally {
    fn new() -> ServedTally {
        ServedTally {
            requests: 0,
            buckets: vec![0; UPSTREAM_BUCKETS_S.len() + 1],
            upstream_s: 0.0,
        }
    }

    fn add(&mut self, upstream: Duration) {
        let seconds = upstream.as_secs_f64();
        let bucket = UPSTREAM_BUCKETS_S
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(UPSTREAM_BUCKETS_S.len());
        self.requests += 1;
        self.buckets[bucket] += 1;
        self.upstream_s += seconds;
    }
}

/// Where requests the lane does not answer go.
#[derive(Clone, Debug)]
pub struct App {
    pub socket: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error("the app behind the lane is unreachable: {0}")]
    AppUnreachable(std::io::Error),
    #[error("forwarding to the app failed: {0}")]
    Forward(#[from] hyper::Error),
    /// The client stopped sending before its body was whole: the connection closes unanswered,
    /// as uvicorn leaves it.
    #[error("the client's request body ended early")]
    BodyCut,
}

/// The lane of one process.
pub struct Lane {
    pub table: Table,
    pub(super) app: App,
    pub(super) engine: Arc<Engine>,
    pub(super) tickets: Tickets,
    pub(super) replays: Replays,
    /// What requests admitted on keys with budgets or rpm limits hold until their replays are
    /// counted.
    pub holds: Arc<Holds>,
    /// Taken while a request reads its key's verdict and takes its holds, and while a new
    /// verdict replaces the old and releases the hold it was read after: a request never pairs
    /// the old headroom with the holds as they are once the new one's hold is gone. It guards
    /// the latest reading of each window and gauge the worker keeps (see `ratelimit::counting`).
    admission: Mutex<Readings>,
    /// LiteLLM's coordination Redis, where the lane counts rpm windows (None: the worker's).
    rate_counting: Mutex<Option<Arc<RedisCounting>>>,
    /// Realtime sessions relayed in Rust: groups, warm provider sessions, records to replay.
    pub realtime: Realtime,
    max_backlog: usize,
    /// Other workers accept on the same socket (see `Lane::busy`).
    shared_socket: bool,
    busy_backlog: usize,
    /// uvicorn's `timeout_keep_alive`, applied to the client connections the lane holds.
    pub(super) keep_alive_timeout: Option<Duration>,
    /// Requests the lane is serving now (each joins the backlog when it is answered).
    serving: AtomicUsize,
    counts: Mutex<HashMap<&'static str, u64>>,
    /// `lane_off` requests by what turned the lane off (`lane_off:<setting>`).
    off_counts: Mutex<HashMap<String, u64>>,
    /// Served requests by route and model group (groups are the table's, so bounded).
    served: Mutex<HashMap<&'static str, HashMap<String, ServedTally>>>,
}

impl Lane {
    pub fn new(
        app: App,
        engine: Arc<Engine>,
        shared_socket: bool,
        keep_alive_timeout: Option<Duration>,
    ) -> Arc<Lane> {
        Arc::new(Lane {
            table: Table::new(),
            app,
            engine,
            tickets: Tickets::default(),
            replays: Replays::default(),
            holds: Arc::new(Holds::default()),
            admission: Mutex::new(Readings::default()),
            rate_counting: Mutex::new(None),
            realtime: Realtime::default(),
            max_backlog: backlog_setting("LITELLM_FASTPATH_LANE_BACKLOG", MAX_BACKLOG),
            shared_socket,
            busy_backlog: backlog_setting("LITELLM_FASTPATH_LANE_BUSY_BACKLOG", BUSY_BACKLOG),
            keep_alive_timeout,
            serving: AtomicUsize::new(0),
            counts: Mutex::new(HashMap::new()),
            off_counts: Mutex::new(HashMap::new()),
            served: Mutex::new(HashMap::new()),
        })
    }

    /// The end of the proxy's answer to a stream's replay (the frames after the first chunk's),
    /// for the lane to send to the client it is still streaming to.
    pub fn send_tail(&self, ticket: &str, tail: Bytes) {
        self.replays.send_tail(ticket, tail);
    }

    /// Whether a client waits for the end of the proxy's answer to this ticket's replay.
    pub fn awaits_tail(&self, ticket: &str) -> bool {
        self.replays.awaits_tail(ticket)
    }

    /// Requests per outcome: `served`, `replayed`, each reason a request went to the proxy, and
    /// `lane_off` requests by what turned the lane off (`lane_off:<setting>`).
    pub fn counts(&self) -> HashMap<String, u64> {
        let mut counts: HashMap<String, u64> = self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(name, count)| ((*name).to_string(), *count))
            .collect();
        let off = self
            .off_counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (why, count) in off.iter() {
            counts.insert(format!("{}:{why}", LaneReason::Off.as_str()), *count);
        }
        counts
    }

    /// Served requests since the lane started, by route and model group.
    pub fn served(&self) -> Vec<(&'static str, String, ServedTally)> {
        let served = self
            .served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        served
            .iter()
            .flat_map(|(route, groups)| {
                groups
                    .iter()
                    .map(|(group, tally)| (*route, group.clone(), tally.clone()))
            })
            .collect()
    }

    /// One request answered by the lane: counted as `served` and in its route's and group's
    /// tally, with how long its provider call took.
    pub(super) fn count_served(&self, route: &'static str, group: &str, upstream: Duration) {
        self.count("served");
        let mut served = self
            .served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let groups = served.entry(route).or_default();
        match groups.get_mut(group) {
            Some(tally) => tally.add(upstream),
            None => {
                let mut tally = ServedTally::new();
                tally.add(upstream);
                groups.insert(group.to_owned(), tally);
            }
        }
    }

    /// Requests being served, and served requests whose replay has not finished yet (what a
    /// shutdown waits for).
    pub fn backlog(&self) -> usize {
        self.serving.load(Ordering::Acquire) + self.replays.backlog() + self.realtime.backlog()
    }

    /// Every served request waiting for its replay, once the queue is due.
    pub async fn next_replays(&self) -> Vec<Replay> {
        self.replays.next().await
    }

    /// The proxy finished one replay.
    pub fn replayed(&self) {
        self.replays.replayed();
    }

    /// The outcome a ticket stands for, once.
    pub fn claim(&self, ticket: &str) -> Option<Ticket> {
        self.tickets.claim(ticket)
    }

    /// Held while a request is judged (see `admission`), with the latest reading of the
    /// worker's rate-limit windows.
    pub(super) fn admitting(&self) -> MutexGuard<'_, Readings> {
        self.admission.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A key's new verdict, and the release of the hold of the replay it was read after (see
    /// `admission`).
    pub fn set_verdict(&self, key_hash: String, verdict: Verdict, release: Option<u64>) {
        let mut readings = self.admitting();
        if let Some(rates) = &verdict.rates {
            rates.record(&mut readings);
        }
        self.table.set_key(key_hash, verdict);
        if let Some(id) = release {
            self.holds.release(id);
        }
    }

    /// New readings of windows the worker counts in (read again after LiteLLM's limiter
    /// settled a request's tokens), whichever keys they belong to.
    pub fn set_readings(&self, found: Vec<(String, Reading)>) {
        let mut readings = self.admitting();
        for (counter, reading) in found {
            readings.record_window(counter, reading);
        }
    }

    /// A request the proxy serves takes a slot in the worker's parallel-request gauge
    /// `gauge_key` (LiteLLM's registry holds `registered` slots without it): whether it fits
    /// beside the lane's slots, and how many the lane holds. Where it fits, the registry's
    /// count with it is recorded, so the lane's next admissions see it.
    pub fn enter_gauge(&self, gauge_key: String, limit: u64, registered: u64) -> (bool, u64) {
        let mut readings = self.admitting();
        let lane = self.holds.held(&gauge_key).round() as u64;
        let fits = registered + lane < limit;
        if fits {
            readings.record_slots(gauge_key, registered + 1);
        }
        (fits, lane)
    }

    /// LiteLLM's registry holds `registered` slots in the worker's gauge `gauge_key` (read
    /// again once a request of the proxy gave its slot back).
    pub fn set_gauge(&self, gauge_key: String, registered: u64) {
        self.admitting().record_slots(gauge_key, registered);
    }

    /// Where the lane counts rpm windows: LiteLLM's Redis (see `ratelimit::scopes`).
    pub fn set_rate_counting(&self, counting: Option<RedisCounting>) {
        *self.rate_counting.lock().unwrap_or_else(|p| p.into_inner()) = counting.map(Arc::new);
    }

    pub(super) fn rate_counting(&self) -> Option<Arc<RedisCounting>> {
        self.rate_counting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether this worker's Python is falling behind while other workers share its socket.
    /// A busy worker closes the connection after each answer and leaves new connections to
    /// the others for a moment, so its clients' next requests go to a less busy worker:
    /// connections are spread by whoever accepts first, and a few keep-alive connections could
    /// otherwise keep one worker's Python saturated while another idles.
    pub(super) fn busy(&self) -> bool {
        self.shared_socket && self.replays.backlog() >= self.busy_backlog
    }

    /// Whether the replays are too far behind for the lane to take more requests.
    pub(super) fn backlog_full(&self) -> bool {
        self.replays.backlog() >= self.max_backlog
    }

    /// A request turned away because the lane is off, by the setting that turned it off.
    pub(super) fn count_off(&self, why: &str) {
        let mut off = self
            .off_counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = off.get_mut(why) {
            *count += 1;
        } else if off.len() < MAX_OFF_REASONS {
            off.insert(why.to_string(), 1);
        }
    }

    pub(super) fn count(&self, what: &'static str) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(what)
            .or_default() += 1;
    }
}

/// A request the lane is serving, counted until it is answered and queued for its replay (or
/// handed to the proxy, or its client left).
pub(super) struct Serving(Arc<Lane>);

impl Serving {
    pub(super) fn new(lane: &Arc<Lane>) -> Serving {
        lane.serving.fetch_add(1, Ordering::AcqRel);
        Serving(Arc::clone(lane))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_sorts_durations_into_buckets_by_upper_bound() {
        let mut tally = ServedTally::new();
        for millis in [1, 5, 6, 250, 200_000] {
            tally.add(Duration::from_millis(millis));
        }
        assert_eq!(tally.requests, 5);
        assert_eq!(tally.buckets.len(), UPSTREAM_BUCKETS_S.len() + 1);
        // 1 ms and exactly 5 ms in the first bucket (le 0.005), 6 ms in the second, 250 ms in
        // le 0.25, 200 s past every bound.
        assert_eq!(tally.buckets[0], 2);
        assert_eq!(tally.buckets[1], 1);
        assert_eq!(tally.buckets[5], 1);
        assert_eq!(tally.buckets[UPSTREAM_BUCKETS_S.len()], 1);
        assert_eq!(tally.buckets.iter().sum::<u64>(), 5);
        assert!((tally.upstream_s - 200.262).abs() < 1e-9);
    }
}
