//! Realtime sessions (`/v1/realtime`) relayed in Rust (#25): a GA WebSocket session for a
//! `rust: true` OpenAI realtime group, from a key the lane serves, is answered by the lane when
//! its deployment's pool has a warm provider session. The lane upgrades the client, relays the
//! frames both ways (`relay`), and queues the session's record: the proxy then replays it
//! in-process through LiteLLM's own realtime endpoint and relay against the record, so auth,
//! hooks, the router's slot, logging, cost and spend run as LiteLLM runs them, once per session.
//! A session the lane cannot serve that way (no warm session, the beta protocol, a subprotocol,
//! other query parameters, a key the lane does not serve) goes to the proxy unchanged.

mod events;
mod pool;
mod relay;
mod upstream;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, UPGRADE};
use http::{HeaderValue, Method, StatusCode};
use hyper::Response;
use hyper_util::rt::TokioIo;
use tokio::sync::Notify;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

pub use events::Logged;
pub use pool::{PoolCounts, PoolSpec};
pub use relay::{ClientClose, CloseNotice, RecordedFrame, SessionEnd};

use super::connection::{Connection, PEER_HEADER};
use super::gate::{Route, has_proxy_options, key_hash};
use super::keepalive::Tracked;
use super::response::{Body, full};
use super::state::Lane;
use pool::{Pools, close_quietly};
use upstream::Io;

const PATH: &str = "/v1/realtime";
/// uvicorn's `ws_max_size`: the largest client message the proxy takes.
const CLIENT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

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
    groups: RwLock<Arc<HashMap<String, Arc<Vec<RealtimeDeployment>>>>>,
    logged: RwLock<Arc<Logged>>,
    notice: RwLock<Option<Arc<CloseNotice>>>,
    pools: Pools,
    /// The relay's own thread (see `thread`).
    thread: OnceLock<tokio::runtime::Handle>,
    records: Mutex<VecDeque<SessionRecord>>,
    ready: Notify,
    /// Records queued or being replayed.
    backlog: AtomicUsize,
    relayed: AtomicU64,
    seed: AtomicU64,
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
    fn thread(&self) -> tokio::runtime::Handle {
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

    pub(super) fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Acquire)
    }

    fn queue(&self, record: SessionRecord) {
        self.backlog.fetch_add(1, Ordering::AcqRel);
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(record);
        self.ready.notify_one();
    }

    /// The router's simple-shuffle pick among the group's deployments, by weight.
    fn pick<'a>(&self, deployments: &'a [RealtimeDeployment]) -> Option<&'a RealtimeDeployment> {
        if deployments.len() <= 1 {
            return deployments.first();
        }
        let total: f64 = deployments.iter().map(|d| d.weight.max(0.0)).sum();
        let draw = self.draw()
            * if total > 0.0 {
                total
            } else {
                deployments.len() as f64
            };
        let mut reached = 0.0;
        for deployment in deployments {
            reached += if total > 0.0 {
                deployment.weight.max(0.0)
            } else {
                1.0
            };
            if draw < reached {
                return Some(deployment);
            }
        }
        deployments.last()
    }

    /// A uniform draw in [0, 1) (splitmix64 over a counter seeded by the clock).
    fn draw(&self) -> f64 {
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut z = self
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(seed);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A WebSocket upgrade to the proxy's realtime route.
pub(super) fn is_session_request<B>(request: &hyper::Request<B>) -> bool {
    request.method() == Method::GET
        && request.uri().path() == PATH
        && request
            .headers()
            .get(UPGRADE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.eq_ignore_ascii_case("websocket"))
}

/// The deployment a session the lane may relay goes to (picked as the router picks), or None
/// when it goes to the proxy.
fn admit<B>(lane: &Lane, request: &hyper::Request<B>) -> Option<RealtimeDeployment> {
    if lane.table.settings().off.is_some() {
        return None;
    }
    let headers = request.headers();
    // The beta protocol (LiteLLM translates every event), a subprotocol (the browser's key),
    // and headers asking the proxy for something stay with the proxy.
    if headers.contains_key("openai-beta")
        || headers.contains_key("sec-websocket-protocol")
        || !headers.contains_key(SEC_WEBSOCKET_KEY)
        || has_proxy_options(headers, Route::Chat)
    {
        return None;
    }
    let group = model_only(request.uri().query()?)?;
    let deployments = {
        let groups = lane
            .realtime
            .groups
            .read()
            .unwrap_or_else(|p| p.into_inner());
        Arc::clone(groups.get(&group)?)
    };
    let key = key_hash(headers, Route::Chat)?;
    let verdict = lane.table.verdict(&key)?;
    // Keys with budgets reserve per session in LiteLLM's auth: the proxy's.
    if verdict.budget.is_some()
        || verdict.admits(&group, SystemTime::now()).is_err()
        || lane.table.is_cooling(&group)
    {
        return None;
    }
    lane.realtime.pick(&deployments).cloned()
}

/// The query's `model`, when it is the only parameter (LiteLLM reads `intent` and `guardrails`
/// too).
fn model_only(query: &str) -> Option<String> {
    let (name, value) = query.split_once('=')?;
    if name != "model" || value.contains('&') || value.is_empty() {
        return None;
    }
    let value = value.replace('+', " ");
    percent_encoding::percent_decode_str(&value)
        .decode_utf8()
        .ok()
        .map(|model| model.into_owned())
}

/// A realtime session: relayed here when the lane may and a warm session is ready, else handed
/// back for the proxy.
pub(super) async fn serve(
    lane: &Arc<Lane>,
    mut request: hyper::Request<hyper::body::Incoming>,
    connection: &Connection,
) -> Result<Response<Body>, hyper::Request<hyper::body::Incoming>> {
    let Some(deployment) = admit(lane, &request) else {
        return Err(request);
    };
    let Some(pool) = lane.realtime.pools.pool(&deployment.id) else {
        return Err(request);
    };
    let Some(dialed) = pool.take().await else {
        return Err(request);
    };
    let Some(accept) = request
        .headers()
        .get(SEC_WEBSOCKET_KEY)
        .map(|key| derive_accept_key(key.as_bytes()))
    else {
        tokio::spawn(close_quietly(dialed.socket));
        return Err(request);
    };
    let upgrade = hyper::upgrade::on(&mut request);
    let record_path = request
        .uri()
        .path_and_query()
        .map_or(PATH.to_string(), |p| p.as_str().to_string());
    let record_headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .filter(|(name, _)| name.as_str() != PEER_HEADER)
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    let (peer, local) = (connection.peer, connection.local);
    let lane_for_session = Arc::clone(lane);
    lane.realtime.thread().spawn(async move {
        let lane = lane_for_session;
        let Some((io, read_ahead)) = upgrade.await.ok().and_then(client_socket) else {
            close_quietly(dialed.socket).await;
            return;
        };
        let client = WebSocketStream::from_partially_read(
            io,
            read_ahead.to_vec(),
            Role::Server,
            Some(upstream::config(Some(CLIENT_MAX_MESSAGE))),
        )
        .await;
        lane.realtime.relayed.fetch_add(1, Ordering::Relaxed);
        let logged = Arc::clone(
            &lane
                .realtime
                .logged
                .read()
                .unwrap_or_else(|p| p.into_inner()),
        );
        let notice = lane
            .realtime
            .notice
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (frames, end) = relay::relay(client, dialed, &logged, notice).await;
        lane.realtime.queue(SessionRecord {
            path: record_path,
            headers: record_headers,
            client: Some(peer),
            server: local,
            deployment_id: deployment.id,
            frames,
            end,
        });
    });
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    headers.insert("x-litellm-rust", HeaderValue::from_static("true"));
    Ok(response)
}

/// The client's connection, moved onto the relay's thread (its socket taken out of hyper and
/// registered with this thread's reactor), with what hyper had read past the upgrade.
fn client_socket(upgraded: hyper::upgrade::Upgraded) -> Option<(Box<dyn Io>, Bytes)> {
    match upgraded.downcast::<TokioIo<Tracked<tokio::net::TcpStream>>>() {
        Ok(parts) => {
            let socket = parts.io.into_inner().into_inner().into_std().ok()?;
            let socket = tokio::net::TcpStream::from_std(socket).ok()?;
            Some((Box::new(socket), parts.read_buf))
        }
        // Not the lane's own connection type: relayed through hyper's upgraded connection.
        Err(upgraded) => Some((Box::new(TokioIo::new(upgraded)), Bytes::new())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lone_model_parameter_is_the_lanes() {
        assert_eq!(model_only("model=gpt-rt").as_deref(), Some("gpt-rt"));
        assert_eq!(model_only("model=a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(model_only("model=a&intent=transcription"), None);
        assert_eq!(model_only("intent=transcription"), None);
        assert_eq!(model_only("model="), None);
    }
}
