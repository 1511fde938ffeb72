//! Warm provider sessions for the relay: per `rust: true` realtime deployment, up to N sessions
//! dialed ahead (upgrade done, `session.created` read and held), refilled side by side, failing
//! dials backing off 0.5 -> 30 s, sessions older than the idle limit closed and redialed. While
//! a session waits, a watcher reads it: a frame or a close makes it dead. A client takes the
//! oldest live one; with none warm it goes to the proxy, which dials as LiteLLM does.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{Notify, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::upstream::{Dialed, Socket, dial};

const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long closing a session may wait for the provider's close frame.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// What one deployment's pool dials, and how many sessions it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// `wss://…/v1/realtime?model=…`, as LiteLLM's handler builds it.
    pub url: String,
    /// `Bearer <key>`.
    pub authorization: String,
    pub size: usize,
    pub idle: Duration,
}

/// The pools' events since the lane started (the Python pool's counts, same names).
#[derive(Default)]
pub struct PoolCounts {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub expiries: AtomicU64,
    pub dead: AtomicU64,
    pub dials: AtomicU64,
    pub dial_failures: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A warm session waiting: its watcher hands it over through `take`.
struct Entry {
    id: u64,
    born: Instant,
    take: oneshot::Sender<oneshot::Sender<Dialed>>,
}

#[derive(Default)]
struct PoolState {
    ready: VecDeque<Entry>,
    dialing: usize,
    backoff: Duration,
    retry_at: Option<Instant>,
    next_id: u64,
}

pub(super) struct Pool {
    spec: PoolSpec,
    state: Mutex<PoolState>,
    wake: Notify,
    closed: AtomicBool,
    counts: Arc<PoolCounts>,
}

impl Pool {
    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The oldest live warm session, or None (a miss).
    pub(super) async fn take(&self) -> Option<Dialed> {
        loop {
            let Some(entry) = self.state().ready.pop_front() else {
                bump(&self.counts.misses);
                return None;
            };
            self.wake.notify_one();
            if entry.born.elapsed() > self.spec.idle {
                // Dropping the entry tells its watcher to close the session.
                bump(&self.counts.expiries);
                continue;
            }
            let (reply, handed) = oneshot::channel();
            if entry.take.send(reply).is_err() {
                bump(&self.counts.dead);
                continue;
            }
            match handed.await {
                Ok(dialed) => {
                    bump(&self.counts.hits);
                    return Some(dialed);
                }
                // Its watcher saw it talk or close just then.
                Err(_) => bump(&self.counts.dead),
            }
        }
    }

    pub(super) fn warm(&self) -> usize {
        self.state().ready.len()
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // The entries' watchers close their sessions.
        self.state().ready.clear();
        self.wake.notify_one();
    }

    /// Keeps the pool at its size until it is closed.
    async fn keep_filled(self: Arc<Self>) {
        while !self.closed.load(Ordering::Acquire) {
            let now = Instant::now();
            let (to_dial, wake_in) = {
                let mut state = self.state();
                while state
                    .ready
                    .front()
                    .is_some_and(|entry| now.duration_since(entry.born) > self.spec.idle)
                {
                    state.ready.pop_front();
                    bump(&self.counts.expiries);
                }
                let mut to_dial = 0;
                if state.retry_at.is_none_or(|at| now >= at) {
                    to_dial = self
                        .spec
                        .size
                        .saturating_sub(state.ready.len() + state.dialing);
                    state.dialing += to_dial;
                }
                let mut wake_in = self.spec.idle;
                if let Some(oldest) = state.ready.front() {
                    wake_in =
                        wake_in.min((oldest.born + self.spec.idle).saturating_duration_since(now));
                }
                if let Some(at) = state.retry_at.filter(|at| *at > now) {
                    wake_in = wake_in.min(at - now);
                }
                (to_dial, wake_in.max(Duration::from_millis(10)))
            };
            for _ in 0..to_dial {
                tokio::spawn(Arc::clone(&self).dial_one());
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wake_in) => {}
            }
        }
    }

    async fn dial_one(self: Arc<Self>) {
        bump(&self.counts.dials);
        let dialed = dial(&self.spec.url, &self.spec.authorization).await;
        let mut state = self.state();
        state.dialing -= 1;
        match dialed {
            Ok(dialed) if !self.closed.load(Ordering::Acquire) => {
                state.backoff = Duration::ZERO;
                state.retry_at = None;
                state.next_id += 1;
                let id = state.next_id;
                let (take, asked) = oneshot::channel();
                state.ready.push_back(Entry {
                    id,
                    born: Instant::now(),
                    take,
                });
                tokio::spawn(watch(Arc::downgrade(&self), id, dialed, asked));
            }
            Ok(dialed) => {
                tokio::spawn(close_quietly(dialed.socket));
            }
            Err(_) => {
                bump(&self.counts.dial_failures);
                let now = Instant::now();
                if state.retry_at.is_none_or(|at| now >= at) {
                    state.backoff = (state.backoff * 2).clamp(BACKOFF_FIRST, BACKOFF_MAX);
                    state.retry_at = Some(now + state.backoff);
                }
            }
        }
        drop(state);
        self.wake.notify_one();
    }

    /// A waiting session talked or closed: out of the pool, unless a client took it just then.
    fn remove_dead(&self, id: u64) {
        let mut state = self.state();
        if let Some(at) = state.ready.iter().position(|entry| entry.id == id) {
            state.ready.remove(at);
            bump(&self.counts.dead);
            drop(state);
            self.wake.notify_one();
        }
    }
}

/// Holds a warm session until a client takes it, or it talks or closes (dead), or its entry is
/// dropped (expired, or the pool closed).
async fn watch(
    pool: Weak<Pool>,
    id: u64,
    mut dialed: Dialed,
    mut asked: oneshot::Receiver<oneshot::Sender<Dialed>>,
) {
    let talked = async {
        // The provider's pings are answered (on the next read) and are not talk.
        while let Some(Ok(Message::Ping(_) | Message::Pong(_))) = dialed.socket.next().await {}
    };
    let taken = tokio::select! {
        asked = &mut asked => Some(asked),
        () = talked => None,
    };
    match taken {
        Some(Ok(reply)) => {
            if let Err(dialed) = reply.send(dialed) {
                close_quietly(dialed.socket).await;
            }
        }
        Some(Err(_)) => close_quietly(dialed.socket).await,
        None => {
            if let Some(pool) = pool.upgrade() {
                pool.remove_dead(id);
            }
            close_quietly(dialed.socket).await;
        }
    }
}

/// Closes a provider session with 1000, as the `websockets` client's `close()` does.
pub(super) async fn close_quietly(mut socket: Socket) {
    let normal = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        // After the provider's own close frame this only sends the answer queued for it.
        if socket.close(Some(normal)).await.is_err() {
            let _ = socket.flush().await;
        }
        // Until the provider's close frame (or the end of the stream).
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
}

/// Every `rust: true` realtime deployment's pool, by deployment id.
#[derive(Default)]
pub(super) struct Pools {
    by_deployment: Mutex<HashMap<String, Arc<Pool>>>,
    pub(super) counts: Arc<PoolCounts>,
}

impl Pools {
    /// Keeps pools whose spec is unchanged, closes the others, opens new ones.
    pub(super) fn configure(
        &self,
        specs: HashMap<String, PoolSpec>,
        runtime: &tokio::runtime::Handle,
    ) {
        let mut pools = self.by_deployment.lock().unwrap_or_else(|p| p.into_inner());
        pools.retain(|id, pool| {
            let keep = specs.get(id) == Some(&pool.spec);
            if !keep {
                pool.close();
            }
            keep
        });
        for (id, spec) in specs {
            if spec.size == 0 || pools.contains_key(&id) {
                continue;
            }
            let pool = Arc::new(Pool {
                spec,
                state: Mutex::default(),
                wake: Notify::new(),
                closed: AtomicBool::new(false),
                counts: Arc::clone(&self.counts),
            });
            runtime.spawn(Arc::clone(&pool).keep_filled());
            pools.insert(id, pool);
        }
    }

    pub(super) fn pool(&self, deployment_id: &str) -> Option<Arc<Pool>> {
        let pools = self.by_deployment.lock().unwrap_or_else(|p| p.into_inner());
        pools.get(deployment_id).cloned()
    }

    /// Sessions waiting now, over every pool.
    pub(super) fn warm(&self) -> usize {
        let pools = self.by_deployment.lock().unwrap_or_else(|p| p.into_inner());
        pools.values().map(|pool| pool.warm()).sum()
    }

    pub(super) fn close_all(&self) {
        let mut pools = self.by_deployment.lock().unwrap_or_else(|p| p.into_inner());
        for pool in pools.values() {
            pool.close();
        }
        pools.clear();
    }
}
