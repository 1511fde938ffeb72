//! The relay's state in the lane: the groups it relays, its pools, its thread, and the records
//! of relayed sessions waiting for their replay.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use tokio::sync::Notify;

use super::events::Logged;
use super::pool::{PoolSpec, Pools};
use super::relay::{CloseNotice, RecordedFrame, SessionEnd};
use crate::lane::shuffle::Shuffle;

/// A `rust: true` realtime deployment the relay serves: its router id, simple-shuffle weight,
/// and pool.
#[derive(Clone, Debug)]
pub struct RealtimeDeployment {
    pub id: String,
    pub weight: f64,
    pub pool: PoolSpec,
}

/// A session the lane relayed, for the proxy's replay.
#[derive(Debug)]
pub struct SessionRecord {
    /// The path with its query string, as the client sent it.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub client: Option<SocketAddr>,
    pub server: Option<SocketAddr>,
    pub deployment_id: String,
    /// The frames LiteLLM's relay reads for its logging, in the order each side sent them.
    pub frames: Vec<RecordedFrame>,
    pub end: SessionEnd,
}

/// The relay's part of the lane: its groups, pools, and the sessions waiting for their replay.
#[derive(Default)]
pub struct Realtime {
    pub(super) groups: RwLock<Arc<HashMap<String, Arc<Vec<RealtimeDeployment>>>>>,
    pub(super) logged: RwLock<Arc<Logged>>,
    pub(super) notice: RwLock<Option<Arc<CloseNotice>>>,
    pub(super) pools: Pools,
    /// The relay's own thread (see `thread`).
    thread: OnceLock<tokio::runtime::Handle>,
    records: Mutex<VecDeque<SessionRecord>>,
    ready: Notify,
    /// Records queued or being replayed.
    backlog: AtomicUsize,
    pub(super) relayed: AtomicU64,
    shuffle: Shuffle,
}

impl Realtime {
    /// Replaces the groups (and their pools: unchanged ones keep their warm sessions), which
    /// events the replay needs, and how the client's close is worked out.
    pub fn configure(
        &self,
        groups: HashMap<String, Vec<RealtimeDeployment>>,
        logged: Logged,
        notice: Option<Arc<CloseNotice>>,
    ) {
        let specs = groups
            .values()
            .flatten()
            .map(|deployment| (deployment.id.clone(), deployment.pool.clone()))
            .collect();
        self.pools.configure(specs, &self.thread());
        let groups = groups
            .into_iter()
            .map(|(name, deployments)| (name, Arc::new(deployments)))
            .collect();
        *self.groups.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(groups);
        *self.logged.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(logged);
        *self.notice.write().unwrap_or_else(|p| p.into_inner()) = notice;
    }

    /// The runtime of the relay's own thread, started on first use. Every session's two
    /// sockets and every pool run there: a frame's way through the relay then stays on one
    /// thread, where on the lane's two I/O workers each frame also woke the other worker (a
    /// thread wake-up costs more than relaying the frame: measured 28 against 21 us per 6 KiB
    /// frame). One core relays some 50,000 frames a second.
    pub(super) fn thread(&self) -> tokio::runtime::Handle {
        self.thread
            .get_or_init(|| {
                let (handle, started) = std::sync::mpsc::channel();
                let spawned = std::thread::Builder::new()
                    .name("fastpath-rt".into())
                    .spawn(move || {
                        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                        else {
                            return;
                        };
                        let _ = handle.send(runtime.handle().clone());
                        runtime.block_on(std::future::pending::<()>());
                    });
                // Without a thread of its own the relay shares the lane's runtime.
                spawned
                    .ok()
                    .and_then(|_| started.recv().ok())
                    .unwrap_or_else(tokio::runtime::Handle::current)
            })
            .clone()
    }

    /// Closes every pool (the lane is stopping).
    pub fn close(&self) {
        self.pools.close_all();
    }

    /// The pools' counts, `warm` (sessions waiting now) and `relayed` (sessions the lane
    /// relayed).
    pub fn counts(&self) -> HashMap<&'static str, u64> {
        let counts = &self.pools.counts;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        HashMap::from([
            ("hits", read(&counts.hits)),
            ("misses", read(&counts.misses)),
            ("expiries", read(&counts.expiries)),
            ("dead", read(&counts.dead)),
            ("dials", read(&counts.dials)),
            ("dial_failures", read(&counts.dial_failures)),
            ("warm", self.pools.warm() as u64),
            ("relayed", read(&self.relayed)),
        ])
    }

    /// Every relayed session waiting for its replay, once there is one.
    pub async fn next_records(&self) -> Vec<SessionRecord> {
        loop {
            let notified = self.ready.notified();
            {
                let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
                if !records.is_empty() {
                    return records.drain(..).collect();
                }
            }
            notified.await;
        }
    }

    /// The proxy finished one session's replay.
    pub fn replayed(&self) {
        let _ = self
            .backlog
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    pub(crate) fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Acquire)
    }

    pub(super) fn queue(&self, record: SessionRecord) {
        self.backlog.fetch_add(1, Ordering::AcqRel);
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(record);
        self.ready.notify_one();
    }

    /// The router's simple-shuffle pick among the group's deployments, by weight.
    pub(super) fn pick<'a>(
        &self,
        deployments: &'a [RealtimeDeployment],
    ) -> Option<&'a RealtimeDeployment> {
        if deployments.len() <= 1 {
            return deployments.first();
        }
        let weights: Vec<f64> = deployments.iter().map(|d| d.weight).collect();
        deployments.get(self.shuffle.pick(deployments.len(), &weights))
    }
}
