//! The fast lane (#11): in each proxy worker, Rust accepts the public connections, answers the
//! requests it can answer exactly as the proxy would, and forwards every other request
//! unchanged to the proxy's own uvicorn server behind it, on a private Unix socket.
//!
//! A request takes the lane when it is a plain chat completion for a model group the lane
//! serves, sent with an API key LiteLLM has already judged (see `table`). The lane calls the
//! provider once and answers. The request then waits in a queue for the proxy, which replays it
//! in-process through its own endpoint with a ticket that hands it the provider's outcome
//! instead of calling the provider again: so LiteLLM's auth counters, router state, logging
//! callbacks, cost and spend tracking all run as on the normal path, after the client has its
//! answer. An outcome whose answer the lane does not write itself (an error, an unusual shape)
//! is forwarded to the proxy with its ticket instead, and the proxy's answer goes to the
//! client: one provider call either way.
//!
//! Streams take the lane too (`streamed`): the lane writes the proxy's SSE frames as the
//! provider's events arrive, and the replay hands LiteLLM the first chunk and the assembled
//! answer. Where the end of a stream is not one the lane writes (a usage chunk, an error), the
//! lane waits for the replay and sends the end the proxy wrote.

pub mod answer;
mod keepalive;
pub mod messages;
mod messages_stream;
pub mod request;
mod restamp;
mod streamed;
pub mod table;
mod tickets;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONNECTION, CONTENT_LENGTH};
use http::{HeaderName, HeaderValue, Method};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::Notify;

use crate::call::{self, CallError, Completion, ResponseShape};
use crate::http::UpstreamRequest;
use crate::model::LaneReason;
use crate::providers::chunks::StreamOptions;
use crate::runtime::Engine;
use crate::stream::{Piece, StreamTransform};
pub use table::{
    CachePrices, Group, LaneDeployment, LaneMessages, LaneStreams, MessagesStreams, Pricing,
    Settings, StreamUsage, Table, Verdict,
};
pub use tickets::Ticket;
use tickets::Tickets;

/// The header that carries a ticket to the proxy. Stripped from every client request.
/// Not `x-litellm-*`: the proxy leaves those out of the headers its hooks see.
pub const TICKET_HEADER: &str = "x-fastpath-lane-ticket";
/// The client's address on a forwarded request (the app behind the lane sees a Unix socket
/// peer; the Python layer puts this address back into the request). Stripped from clients'.
pub const PEER_HEADER: &str = "x-fastpath-lane-peer";
/// Routes the lane serves: the proxy's chat completion routes, and its Messages route.
const CHAT_PATHS: &[&str] = &["/chat/completions", "/v1/chat/completions"];
const MESSAGES_PATH: &str = "/v1/messages";
/// The `anthropic-version` the lane passes on for `/v1/messages` (the only one there is).
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Anthropic OAuth tokens, which the proxy passes on to the provider as its credential.
const ANTHROPIC_OAUTH_PREFIX: &str = "sk-ant-oat";
/// Larger bodies go to the proxy as they stream in (the lane reads a body whole).
const MAX_BODY_BYTES: u64 = 1 << 20;
/// LiteLLM reads its key from these headers too; a request carrying one goes to the proxy.
const OTHER_KEY_HEADERS: &[&str] = &[
    "x-litellm-api-key",
    "api-key",
    "x-api-key",
    "x-goog-api-key",
    "ocp-apim-subscription-key",
];
/// Client headers the proxy passes on to Anthropic-family providers (its
/// `add_provider_specific_headers_to_request`), as `typesafe-danger-zone-*` ones to others.
const PROVIDER_HEADERS: &[&str] = &["anthropic-version", "anthropic-beta"];
/// The proxy takes a caller's call id up to this length (`MAX_LITELLM_CALL_ID_LENGTH`).
const MAX_CALL_ID_LEN: usize = 256;
/// Replays waiting for the proxy (each runs the proxy's per-request Python, so they keep logging
/// and spend no more than this far behind); past this the lane sends new requests to the proxy.
/// Env `LITELLM_FASTPATH_LANE_BACKLOG` overrides.
const MAX_BACKLOG: usize = 256;
/// With several workers on one socket: replays waiting past which this worker counts as busy
/// (about 0.1 s of the proxy's Python). Env `LITELLM_FASTPATH_LANE_BUSY_BACKLOG` overrides.
const BUSY_BACKLOG: usize = 32;
/// The longest a busy worker leaves new connections to the others before it takes one anyway.
const BUSY_ACCEPT_PAUSE: Duration = Duration::from_millis(50);

fn backlog_setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
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

type Body = BoxBody<Bytes, hyper::Error>;
type AppSender = hyper::client::conn::http1::SendRequest<Body>;

/// A request the lane served, for the proxy to replay in-process after the client has its
/// answer (its auth, hooks, router and logging run; its answer goes nowhere).
#[derive(Debug)]
pub struct Replay {
    pub path: String,
    /// Every header as the client sent it (values that are not text are left out), plus
    /// `x-litellm-call-id` when the lane chose the call id.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub client: Option<SocketAddr>,
    pub server: Option<SocketAddr>,
    pub ticket: String,
}

/// The lane of one process.
pub struct Lane {
    pub table: Table,
    app: App,
    engine: Arc<Engine>,
    tickets: Tickets,
    replays: Mutex<ReplayQueue>,
    replay_ready: Notify,
    backlog: AtomicUsize,
    max_backlog: usize,
    /// Other workers accept on the same socket (see `Lane::busy`).
    shared_socket: bool,
    busy_backlog: usize,
    /// uvicorn's `timeout_keep_alive`, applied to the client connections the lane holds.
    keep_alive_timeout: Option<Duration>,
    /// Requests the lane is serving now (each joins the backlog when it is answered).
    serving: AtomicUsize,
    counts: Mutex<HashMap<&'static str, u64>>,
    /// Streams waiting for the end of the proxy's answer to their replay, by ticket.
    tails: Mutex<HashMap<String, tokio::sync::oneshot::Sender<Bytes>>>,
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
            replays: Mutex::new(ReplayQueue::default()),
            replay_ready: Notify::new(),
            backlog: AtomicUsize::new(0),
            max_backlog: backlog_setting("LITELLM_FASTPATH_LANE_BACKLOG", MAX_BACKLOG),
            shared_socket,
            busy_backlog: backlog_setting("LITELLM_FASTPATH_LANE_BUSY_BACKLOG", BUSY_BACKLOG),
            keep_alive_timeout,
            serving: AtomicUsize::new(0),
            counts: Mutex::new(HashMap::new()),
            tails: Mutex::new(HashMap::new()),
        })
    }

    /// The end of the proxy's answer to a stream's replay (the frames after the first chunk's),
    /// for the lane to send to the client it is still streaming to.
    pub fn send_tail(&self, ticket: &str, tail: Bytes) {
        let waiting = self
            .tails
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(ticket);
        if let Some(waiting) = waiting {
            let _ = waiting.send(tail);
        }
    }

    /// Requests per outcome: `served`, `replayed`, and each reason a request went to the proxy.
    pub fn counts(&self) -> HashMap<&'static str, u64> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Requests being served, and served requests whose replay has not finished yet (what a
    /// shutdown waits for).
    pub fn backlog(&self) -> usize {
        self.serving.load(Ordering::Acquire) + self.backlog.load(Ordering::Acquire)
    }

    /// Every served request waiting for its replay, once the queue is due (see `ReplayQueue`).
    pub async fn next_replays(&self) -> Vec<Replay> {
        loop {
            let due_in = {
                let mut queue = self.replays.lock().unwrap_or_else(|p| p.into_inner());
                match queue.due_in(Instant::now()) {
                    Some(wait) if wait.is_zero() => return queue.take(),
                    due_in => due_in,
                }
            };
            match due_in {
                None => self.replay_ready.notified().await,
                // A replay queued meanwhile may be urgent, or extend the quiet.
                Some(wait) => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.replay_ready.notified() => {}
                    }
                }
            }
        }
    }

    /// Whether this worker's Python is falling behind while other workers share its socket.
    /// A busy worker closes the connection after each answer and leaves new connections to
    /// the others for a moment, so its clients' next requests go to a less busy worker:
    /// connections are spread by whoever accepts first, and a few keep-alive connections could
    /// otherwise keep one worker's Python saturated while another idles.
    fn busy(&self) -> bool {
        self.shared_socket && self.backlog.load(Ordering::Acquire) >= self.busy_backlog
    }

    /// The proxy finished one replay.
    pub fn replayed(&self) {
        let _ = self
            .backlog
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// The outcome a ticket stands for, once.
    pub fn claim(&self, ticket: &str) -> Option<Ticket> {
        self.tickets.claim(ticket)
    }

    fn count(&self, what: &'static str) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(what)
            .or_default() += 1;
    }
}

/// Accepts connections on `listener` until the task is dropped; each is served on its own task.
pub async fn serve(listener: TcpListener, lane: Arc<Lane>) {
    loop {
        let paused = Instant::now();
        while lane.busy() && paused.elapsed() < BUSY_ACCEPT_PAUSE {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of file descriptors, a connection reset before accept: the listener
                // itself is fine, so keep accepting (after a pause, not in a busy loop).
                tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                continue;
            }
        };
        let local = stream.local_addr().ok();
        // A 40 ms Nagle/delayed-ACK stall is the known trap for gateways.
        let _ = stream.set_nodelay(true);
        let Ok((stream, watch)) = watched(stream) else {
            continue;
        };
        let lane = Arc::clone(&lane);
        let connection = Connection {
            peer,
            local,
            watch: Arc::new(watch),
        };
        tokio::spawn(async move {
            // The client's connection ends here; its app connection with it.
            let _ = serve_connection(stream, lane, connection).await;
        });
    }
}

/// One client connection; its connection to the app opens when a request first needs it, so
/// HTTP/1.1 keep-alive and request order carry over one to one.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    lane: Arc<Lane>,
    connection: Connection,
) -> Result<(), LaneError> {
    let keep_alive = lane.keep_alive_timeout;
    let activity = keepalive::Activity::new();
    let app_connection: Arc<tokio::sync::Mutex<Option<AppConnection>>> = Arc::default();
    let io = TokioIo::new(keepalive::Tracked::new(stream, Arc::clone(&activity)));
    let in_flight = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let lane = Arc::clone(&lane);
        let app_connection = Arc::clone(&app_connection);
        let connection = connection.clone();
        let answering = in_flight.enter();
        async move {
            let response = handle(&lane, &app_connection, request, &connection).await?;
            // The request counts as in flight until its body has been written (or dropped).
            Ok::<_, LaneError>(response.map(|body| keepalive::Answering::new(body, answering)))
        }
    });
    let serving = hyper::server::conn::http1::Builder::new()
        // uvicorn (h11) takes any number of headers; hyper's default is 100.
        .max_headers(MAX_HEADERS)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(serving);
    let Some(limit) = keep_alive else {
        return Ok(serving.await?);
    };
    loop {
        let check_in = activity.idle_close_in(limit).unwrap_or(limit);
        tokio::select! {
            served = serving.as_mut() => return Ok(served?),
            _ = tokio::time::sleep(check_in.max(IDLE_CHECK_MIN)) => {
                if activity.idle_close_in(limit).is_some_and(|left| left.is_zero()) {
                    serving.as_mut().graceful_shutdown();
                    return Ok(serving.await?);
                }
            }
        }
    }
}

async fn connect_app(app: &App) -> Result<AppSender, LaneError> {
    let stream = UnixStream::connect(&app.socket)
        .await
        .map_err(LaneError::AppUnreachable)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection.with_upgrades());
    Ok(sender)
}

/// A client connection's own connection to the app, and when it was last used.
struct AppConnection {
    sender: AppSender,
    used: Instant,
}

/// Sends one request to the app on the connection's own app connection.
///
/// uvicorn closes an app connection `timeout_keep_alive` after its last answer, so one idle
/// for a while is replaced before use rather than raced; and a request the app connection
/// never took (it closed just then) is sent once more on a new one.
async fn forward(
    lane: &Lane,
    app_connection: &tokio::sync::Mutex<Option<AppConnection>>,
    request: Request<Body>,
) -> Response<Body> {
    let mut slot = app_connection.lock().await;
    let mut request = request;
    for _ in 0..2 {
        let stale = slot.as_ref().is_none_or(|app| {
            app.sender.is_closed() || app.used.elapsed() >= APP_CONNECTION_REUSE_LIMIT
        });
        if stale {
            *slot = match connect_app(&lane.app).await {
                Ok(sender) => Some(AppConnection {
                    sender,
                    used: Instant::now(),
                }),
                Err(_) => None,
            };
        }
        let Some(app) = slot.as_mut() else {
            return bad_gateway();
        };
        app.used = Instant::now();
        if app.sender.ready().await.is_err() {
            *slot = None;
            continue;
        }
        match app.sender.try_send_request(request).await {
            Ok(response) => return response.map(BodyExt::boxed),
            Err(mut failed) => {
                *slot = None;
                match failed.take_message() {
                    Some(unsent) => request = unsent,
                    None => return bad_gateway(),
                }
            }
        }
    }
    bad_gateway()
}

fn bad_gateway() -> Response<Body> {
    let mut response = Response::new(full(Bytes::from_static(
        b"the proxy behind the fast lane is unreachable",
    )));
    *response.status_mut() = hyper::StatusCode::BAD_GATEWAY;
    response
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// A client connection: its and our address (what the proxy's request object shows), and a
/// second handle on its socket to notice the client leaving while the lane waits for the
/// provider (hyper reads nothing from a connection while its request is being served).
#[derive(Clone, Debug)]
struct Connection {
    peer: SocketAddr,
    local: Option<SocketAddr>,
    watch: Arc<std::net::TcpStream>,
}

impl Connection {
    /// Resolves once the client has closed its side of the connection (or it broke).
    async fn closed(&self) {
        let mut probe = [0u8; 1];
        loop {
            tokio::time::sleep(CLIENT_CHECK_INTERVAL).await;
            // Non-blocking (the socket is tokio's): WouldBlock means open and quiet.
            match self.watch.peek(&mut probe) {
                Ok(0) => return,
                Err(err) if err.kind() != std::io::ErrorKind::WouldBlock => return,
                _ => {}
            }
        }
    }
}

/// The socket, and a duplicate of it for `Connection::closed`.
fn watched(
    stream: tokio::net::TcpStream,
) -> std::io::Result<(tokio::net::TcpStream, std::net::TcpStream)> {
    let stream = stream.into_std()?;
    let watch = stream.try_clone()?;
    Ok((tokio::net::TcpStream::from_std(stream)?, watch))
}

async fn handle(
    lane: &Arc<Lane>,
    app_connection: &tokio::sync::Mutex<Option<AppConnection>>,
    request: Request<Incoming>,
    connection: &Connection,
) -> Result<Response<Body>, LaneError> {
    let (mut parts, body) = request.into_parts();
    // Only the lane hands out tickets and says who the client is.
    parts.headers.remove(TICKET_HEADER);
    parts.headers.remove(PEER_HEADER);
    set_header(
        &mut parts.headers,
        PEER_HEADER,
        &connection.peer.to_string(),
    );
    let Some(route) = lane_route(&parts) else {
        return Ok(forward(
            lane,
            app_connection,
            Request::from_parts(parts, body.boxed()),
        )
        .await);
    };
    let Ok(collected) = body.collect().await else {
        return Err(LaneError::BodyCut);
    };
    let body = collected.to_bytes();
    let served = match route {
        Route::Chat => serve_chat(lane, &parts, &body, connection).await,
        Route::Messages => serve_messages(lane, &parts, &body, connection).await,
    };
    Ok(match served {
        Served::Answer(mut response) => {
            if lane.busy() {
                lane.count("closed_busy");
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            response
        }
        Served::Gone => {
            lane.count("client_gone");
            bad_gateway()
        }
        Served::ToProxy(why) => {
            lane.count(why.as_str());
            forward(lane, app_connection, Request::from_parts(parts, full(body))).await
        }
        Served::Replay(ticket) => {
            lane.count("replayed");
            let mut request = Request::from_parts(parts, full(body));
            set_header(request.headers_mut(), TICKET_HEADER, &ticket.id);
            if ticket.call_id_added {
                set_header(request.headers_mut(), "x-litellm-call-id", &ticket.call_id);
            }
            forward(lane, app_connection, request).await
        }
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Chat,
    Messages,
}

/// A POST to a route the lane serves, with a sized body the lane may read whole.
fn lane_route(parts: &http::request::Parts) -> Option<Route> {
    let sized = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
        .is_some_and(|length| length <= MAX_BODY_BYTES);
    if parts.method != Method::POST || parts.uri.query().is_some() || !sized {
        return None;
    }
    let path = parts.uri.path();
    if CHAT_PATHS.contains(&path) {
        Some(Route::Chat)
    } else if path == MESSAGES_PATH {
        Some(Route::Messages)
    } else {
        None
    }
}

enum Served {
    Answer(Response<Body>),
    ToProxy(LaneReason),
    /// The provider was called; the proxy answers with this ticket's outcome.
    Replay(tickets::Issued),
    /// The client left while the lane waited for the provider.
    Gone,
}

/// A request the lane takes: where it goes and what it sends.
struct Admitted {
    model_group: String,
    key_hash: String,
    key_spend: f64,
    deployment: Arc<LaneDeployment>,
    plan: Plan,
}

/// The provider call an admitted request makes.
enum Plan {
    Call(UpstreamRequest),
    Stream {
        upstream: UpstreamRequest,
        transform: Box<dyn StreamTransform>,
        /// The client asked for the usage chunk (the proxy writes it; see `streamed`).
        usage_chunk: bool,
    },
}

/// Everything the lane checks before any I/O; the reason (counted) when the proxy should serve.
fn admit(lane: &Lane, parts: &http::request::Parts, body: &Bytes) -> Result<Admitted, LaneReason> {
    let key_hash = gate(lane, parts, Route::Chat)?;
    let request = request::parse(body).map_err(|_| LaneReason::Body)?;
    let (deployment, key_spend) = judge(lane, &key_hash, &request.model)?;
    let mut chat = request.chat;
    for (name, value) in &deployment.params {
        chat.params
            .entry(name.clone())
            .or_insert_with(|| value.clone());
    }
    // Where LiteLLM's form of a `json_schema` depends on the model (the Python layer decides
    // it per call), the lane leaves it to the proxy.
    if deployment
        .deployment
        .provider
        .json_schema_per_model(&chat.params)
    {
        return Err(LaneReason::Param);
    }
    // Declined or invalid: the proxy's own path answers (with LiteLLM's 400 if invalid).
    let plan = match request.stream {
        None => {
            let mut upstream = crate::providers::prepare(&deployment.deployment, &chat)
                .map_err(|_| LaneReason::Param)?;
            upstream.timeout = deployment.timeout;
            Plan::Call(upstream)
        }
        Some(stream) => {
            let streams = deployment.streams.ok_or(LaneReason::Stream)?;
            let (options_value, options) = stream_options(&stream, streams.usage);
            let (mut upstream, transform) = crate::providers::prepare_stream(
                &deployment.deployment,
                &chat,
                options_value,
                options,
            )
            .map_err(|_| LaneReason::Stream)?;
            upstream.timeout = streams.timeout;
            Plan::Stream {
                upstream,
                transform,
                usage_chunk: stream.include_usage,
            }
        }
    };
    Ok(Admitted {
        model_group: request.model,
        key_hash,
        key_spend,
        deployment,
        plan,
    })
}

/// The checks every route shares before the body is read: the lane is on, no header asks the
/// proxy for something, and the key comes the way the lane reads it (its hash).
fn gate(lane: &Lane, parts: &http::request::Parts, route: Route) -> Result<String, LaneReason> {
    if !lane.table.settings().enabled {
        return Err(LaneReason::Off);
    }
    if has_proxy_options(&parts.headers, route) {
        return Err(LaneReason::Header);
    }
    key_hash(&parts.headers, route).ok_or(LaneReason::Auth)
}

/// The checks every route shares, after the request is read: the model group, the key's
/// verdict for it, cooldowns and the backlog; then the deployment (picked as the router picks)
/// and the key's spend.
fn judge(
    lane: &Lane,
    key_hash: &str,
    model_group: &str,
) -> Result<(Arc<LaneDeployment>, f64), LaneReason> {
    let group = lane.table.group(model_group).ok_or(LaneReason::Model)?;
    let verdict = lane.table.verdict(key_hash).ok_or(LaneReason::Auth)?;
    verdict
        .admits(model_group, SystemTime::now())
        .map_err(|refusal| match refusal {
            table::KeyRefusal::Model => LaneReason::Access,
            table::KeyRefusal::Stale | table::KeyRefusal::Expired => LaneReason::Auth,
        })?;
    if lane.table.is_cooling(model_group) {
        return Err(LaneReason::Cooldown);
    }
    if lane.backlog.load(Ordering::Acquire) >= lane.max_backlog {
        return Err(LaneReason::Backlog);
    }
    Ok((lane.table.pick(&group), verdict.current_spend()))
}

/// A `/v1/messages` request the lane takes.
struct MessagesAdmitted {
    model_group: String,
    key_hash: String,
    key_spend: f64,
    deployment: Arc<LaneDeployment>,
    upstream: UpstreamRequest,
    stream: bool,
    /// The router holds a stream's frames until its first content.
    held: bool,
    bedrock: bool,
}

fn admit_messages(
    lane: &Lane,
    parts: &http::request::Parts,
    body: &Bytes,
) -> Result<MessagesAdmitted, LaneReason> {
    let key_hash = gate(lane, parts, Route::Messages)?;
    let request = messages::parse(body).map_err(|_| LaneReason::Body)?;
    let client_headers = messages_client_headers(&parts.headers).ok_or(LaneReason::Header)?;
    let (deployment, key_spend) = judge(lane, &key_hash, &request.model)?;
    let route = deployment.messages.as_ref().ok_or(LaneReason::Model)?;
    let (timeout, held) = match (request.stream, route.streams) {
        (false, _) => (route.timeout, false),
        (true, Some(streams)) => (streams.timeout, streams.held),
        (true, None) => return Err(LaneReason::Stream),
    };
    // The client's `anthropic-*` headers reach LiteLLM's header merge with the small params.
    let version = client_headers.get("anthropic-version");
    let usual = request.small_params.is_none()
        && !client_headers.contains_key("anthropic-beta")
        && version.is_none_or(|version| version == ANTHROPIC_VERSION);
    let headers = if usual && version.is_some() {
        route.versioned_headers.clone()
    } else if usual {
        route.headers.clone()
    } else {
        let key = messages::decision_key(request.small_params.as_deref(), &client_headers);
        let learned = lane.table.messages_headers(&deployment.id, &key);
        learned.ok_or(LaneReason::Unseen)?.as_ref().clone()
    };
    let prepared = crate::providers::messages::prepare(
        &route.deployment,
        crate::providers::messages::MessagesRequest {
            fields: request.fields,
            stream: request.stream,
            headers,
        },
    )
    .map_err(|_| LaneReason::Param)?;
    let mut upstream = prepared.upstream;
    upstream.timeout = timeout;
    let bedrock = prepared.api == crate::providers::MessagesApi::BedrockInvoke;
    Ok(MessagesAdmitted {
        model_group: request.model,
        key_hash,
        key_spend,
        deployment,
        upstream,
        stream: request.stream,
        held,
        bedrock,
    })
}

async fn serve_messages(
    lane: &Arc<Lane>,
    parts: &http::request::Parts,
    body: &Bytes,
    connection: &Connection,
) -> Served {
    let received = Instant::now();
    let admitted = match admit_messages(lane, parts, body) {
        Ok(admitted) => admitted,
        Err(why) => return Served::ToProxy(why),
    };
    let serving = Serving::new(lane);
    let MessagesAdmitted {
        model_group,
        key_hash,
        key_spend,
        deployment,
        upstream,
        stream,
        held,
        bedrock,
    } = admitted;
    let call_id = call_id(&parts.headers);
    if stream {
        let stream = messages_stream::MessagesStream {
            head: streamed::StreamHead {
                model_group,
                key_spend,
                deployment,
                call_id,
                received,
            },
            held,
            bedrock,
        };
        return messages_stream::serve(lane, parts, body, connection, stream, upstream, serving)
            .await;
    }
    let _serving = serving;
    let called = Instant::now();
    let outcome = tokio::select! {
        outcome = call::run(&lane.engine.transport, vec![upstream], &ResponseShape::Raw) => outcome,
        () = connection.closed() => return Served::Gone,
    };
    let upstream_ms = called.elapsed().as_secs_f64() * 1000.0;
    let completion = match outcome {
        Ok(completion) => completion,
        Err(err) => return with_ticket(lane, &deployment, call_id, Err(err)),
    };
    // An answer the lane does not write, or one whose cost it cannot work out: the proxy's.
    let written = completion
        .raw
        .as_deref()
        .and_then(|raw| messages::answer_body(raw, &model_group))
        .and_then(|(answer_body, usage)| Some((answer_body, usage.cost(deployment.pricing?)?)));
    let Some((answer_body, cost)) = written else {
        return with_ticket(lane, &deployment, call_id, Ok(completion));
    };
    let timings = answer::Timings {
        total_ms: received.elapsed().as_secs_f64() * 1000.0,
        upstream_ms,
    };
    let headers = answer::messages_headers(
        &lane.table.settings(),
        &deployment,
        &model_group,
        &call_id.0,
        cost,
        key_spend,
        timings,
    );
    lane.table.add_spend(&key_hash, cost.total);
    let response = answer_response(full(Bytes::from(answer_body)), headers);
    let replay = pending_replay(parts, body, connection);
    answered(lane, &deployment, call_id, completion, replay, response)
}

/// A call the lane does not answer itself: the proxy answers with this ticket for its outcome.
fn with_ticket(
    lane: &Lane,
    deployment: &LaneDeployment,
    call_id: (String, bool),
    outcome: Result<Completion, CallError>,
) -> Served {
    Served::Replay(
        lane.tickets
            .issue(&deployment.id, call_id, Outcome::Call(outcome)),
    )
}

/// A call the lane answered: its replay (with a ticket for the outcome) joins the queue.
fn answered(
    lane: &Lane,
    deployment: &LaneDeployment,
    call_id: (String, bool),
    completion: Completion,
    replay: PendingReplay,
    response: Response<Body>,
) -> Served {
    let issued = lane
        .tickets
        .issue(&deployment.id, call_id, Outcome::Call(Ok(completion)));
    enqueue_replay(lane, replay, issued, false);
    lane.count("served");
    Served::Answer(response)
}

/// The `stream_options` the proxy would send, and the chunk rules they imply: unless the client
/// asked for usage, the proxy asks for it itself on models that take `stream_options`, and
/// drops the usage chunk that brings (`_stream_usage_tracking_updates` in LiteLLM).
fn stream_options(
    stream: &request::StreamRequest,
    usage: StreamUsage,
) -> (Option<serde_json::Value>, StreamOptions) {
    let asked = |include: bool| serde_json::json!({ "include_usage": include });
    let mut options = StreamOptions {
        given: stream.options_given,
        include_usage: stream.include_usage,
        strip_usage_artifacts: false,
        repeat_limit: crate::providers::chunks::REPEATED_CHUNK_LIMIT,
    };
    if stream.include_usage {
        return (Some(asked(true)), options);
    }
    if usage == StreamUsage::AlwaysAsked {
        options.given = true;
        options.include_usage = true;
        options.strip_usage_artifacts = true;
        return (Some(asked(true)), options);
    }
    let given = stream.options_given.then(|| {
        if stream.explicit_usage {
            asked(false)
        } else {
            serde_json::json!({})
        }
    });
    (given, options)
}

async fn serve_chat(
    lane: &Arc<Lane>,
    parts: &http::request::Parts,
    body: &Bytes,
    connection: &Connection,
) -> Served {
    let received = Instant::now();
    let admitted = match admit(lane, parts, body) {
        Ok(admitted) => admitted,
        Err(why) => return Served::ToProxy(why),
    };
    let serving = Serving::new(lane);
    let Admitted {
        model_group,
        key_hash,
        key_spend,
        deployment,
        plan,
    } = admitted;
    let call_id = call_id(&parts.headers);
    let upstream = match plan {
        Plan::Call(upstream) => upstream,
        Plan::Stream {
            upstream,
            transform,
            usage_chunk,
        } => {
            let stream = streamed::Stream {
                head: streamed::StreamHead {
                    model_group,
                    key_spend,
                    deployment,
                    call_id,
                    received,
                },
                usage_chunk,
            };
            return streamed::serve(
                lane, parts, body, connection, stream, upstream, transform, serving,
            )
            .await;
        }
    };
    let called = Instant::now();
    let shape = ResponseShape::ChatCompletion(Arc::clone(&deployment.deployment));
    let outcome = tokio::select! {
        outcome = call::run(&lane.engine.transport, vec![upstream], &shape) => outcome,
        // Dropping the call closes the provider connection; nobody is left to answer.
        () = connection.closed() => return Served::Gone,
    };
    let upstream_ms = called.elapsed().as_secs_f64() * 1000.0;
    // An error, or an answer of a shape the lane does not write: the proxy answers.
    let (completion, answer_body, usage) = match outcome {
        Ok(mut completion) => {
            let minted = mint_id(&mut completion);
            let shape = deployment.deployment.provider.answer_shape();
            match answer::chat_body(shape, &completion.body, &model_group, minted.as_ref()) {
                Some((answer_body, usage)) => (completion, answer_body, usage),
                None => return with_ticket(lane, &deployment, call_id, Ok(completion)),
            }
        }
        Err(err) => return with_ticket(lane, &deployment, call_id, Err(err)),
    };
    let cost = match deployment.pricing.map(|pricing| usage.cost(pricing)) {
        // A price the lane does not know (cached tokens): the proxy answers.
        Some(None) => return with_ticket(lane, &deployment, call_id, Ok(completion)),
        Some(Some(cost)) => Some(cost),
        None => None,
    };
    let timings = answer::Timings {
        total_ms: received.elapsed().as_secs_f64() * 1000.0,
        upstream_ms,
    };
    let headers = answer::headers(
        &lane.table.settings(),
        &deployment,
        &model_group,
        &call_id.0,
        answer::CostHeaders::from(cost),
        key_spend,
        timings,
        &completion.headers,
    );
    if let Some(cost) = cost {
        lane.table.add_spend(&key_hash, cost.total);
    }
    let response = answer_response(full(Bytes::from(answer_body)), headers);
    let replay = pending_replay(parts, body, connection);
    answered(lane, &deployment, call_id, completion, replay, response)
}

/// The id and time of an answer: the provider's (OpenAI), else new ones as LiteLLM makes them
/// (`chatcmpl-<uuid4>`, now), also put into the completion so the proxy's replay logs them.
fn mint_id(completion: &mut Completion) -> Minted {
    let given = |name: &str| completion.body.get(name).cloned();
    if let (Some(serde_json::Value::String(id)), Some(created)) = (given("id"), given("created"))
        && let Some(created) = created.as_i64()
    {
        return Minted { id, created };
    }
    let minted = Minted {
        id: format!("chatcmpl-{}", tickets::uuid4()),
        created: SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs() as i64),
    };
    if let serde_json::Value::Object(body) = &mut completion.body {
        body.insert("id".into(), minted.id.clone().into());
        body.insert("created".into(), minted.created.into());
    }
    minted
}

struct Minted {
    id: String,
    created: i64,
}

impl Minted {
    fn as_ref(&self) -> (&str, i64) {
        (&self.id, self.created)
    }
}

fn answer_response(body: Body, headers: Vec<(String, String)>) -> Response<Body> {
    let mut response = Response::new(body);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// The client's call id (`x-litellm-call-id`, as the proxy takes it) or a new one.
fn call_id(headers: &http::HeaderMap) -> (String, bool) {
    let given = headers
        .get("x-litellm-call-id")
        .and_then(|value| value.to_str().ok())
        .filter(|id| !id.is_empty() && id.len() <= MAX_CALL_ID_LEN);
    match given {
        Some(id) => (id.to_string(), false),
        None => (tickets::uuid4(), true),
    }
}

/// Headers through which a caller asks the proxy for something (sessions, tags, end users,
/// CORS, headers for the provider): their requests go to the proxy. Only the call id
/// (`x-litellm-call-id`) is taken, and on `/v1/messages` the `anthropic-*` headers (see
/// `messages_client_headers`).
fn has_proxy_options(headers: &http::HeaderMap, route: Route) -> bool {
    headers.keys().any(|name| {
        let name = name.as_str();
        (name.starts_with("x-litellm-") && name != "x-litellm-call-id")
            || name.starts_with("litellm-")
            || name == "origin"
            || (PROVIDER_HEADERS.contains(&name) && route == Route::Chat)
            || name.starts_with("typesafe-danger-zone-")
    })
}

/// The `anthropic-*` headers the proxy passes on to a `/v1/messages` call, by name; None when
/// one is sent twice or is not text.
fn messages_client_headers(
    headers: &http::HeaderMap,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut found = serde_json::Map::new();
    for name in PROVIDER_HEADERS {
        let mut values = headers.get_all(*name).iter();
        if let Some(value) = values.next() {
            if values.next().is_some() {
                return None;
            }
            found.insert((*name).to_string(), value.to_str().ok()?.into());
        }
    }
    Some(found)
}
/// SHA-256 (hex) of the caller's key, as LiteLLM's `hash_token`: the bearer key, or on
/// `/v1/messages` an `x-api-key` sent alone; None when the request carries its key any other
/// way (or one the proxy passes on to the provider).
fn key_hash(headers: &http::HeaderMap, route: Route) -> Option<String> {
    let api_key_taken = route == Route::Messages && !headers.contains_key(AUTHORIZATION);
    if OTHER_KEY_HEADERS
        .iter()
        .any(|name| headers.contains_key(*name) && !(api_key_taken && *name == "x-api-key"))
    {
        return None;
    }
    let (name, prefix) = if api_key_taken {
        ("x-api-key", "")
    } else {
        (AUTHORIZATION.as_str(), "Bearer ")
    };
    let mut values = headers.get_all(name).iter();
    let value = values.next()?.to_str().ok()?;
    if values.next().is_some() {
        return None;
    }
    let key = value.strip_prefix(prefix)?;
    if key.is_empty() || key.trim() != key || key.starts_with(ANTHROPIC_OAUTH_PREFIX) {
        return None;
    }
    let digest = Sha256::digest(key.as_bytes());
    Some(digest.iter().map(|byte| format!("{byte:02x}")).collect())
}

fn set_header(headers: &mut http::HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

/// A request the lane is serving, counted until it is answered and queued for its replay (or
/// handed to the proxy, or its client left).
struct Serving(Arc<Lane>);

impl Serving {
    fn new(lane: &Arc<Lane>) -> Serving {
        lane.serving.fetch_add(1, Ordering::AcqRel);
        Serving(Arc::clone(lane))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A served request's replay, before its ticket is known.
struct PendingReplay {
    path: String,
    headers: Vec<(String, String)>,
    body: Bytes,
    client: Option<SocketAddr>,
    server: Option<SocketAddr>,
}

fn pending_replay(
    parts: &http::request::Parts,
    body: &Bytes,
    connection: &Connection,
) -> PendingReplay {
    PendingReplay {
        path: parts.uri.path().to_string(),
        headers: parts
            .headers
            .iter()
            .filter(|(name, _)| name.as_str() != PEER_HEADER)
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
            .collect(),
        body: body.clone(),
        client: Some(connection.peer),
        server: connection.local,
    }
}

/// Queues a replay; `first` puts it ahead of the others (a client waits for its end).
fn enqueue_replay(lane: &Lane, pending: PendingReplay, issued: tickets::Issued, first: bool) {
    let mut headers = pending.headers;
    if issued.call_id_added {
        headers.push(("x-litellm-call-id".into(), issued.call_id));
    }
    let replay = Replay {
        path: pending.path,
        headers,
        body: pending.body,
        client: pending.client,
        server: pending.server,
        ticket: issued.id,
    };
    lane.backlog.fetch_add(1, Ordering::AcqRel);
    let mut queue = lane.replays.lock().unwrap_or_else(|p| p.into_inner());
    queue.push(replay, first, Instant::now());
    drop(queue);
    lane.replay_ready.notify_one();
}

/// How long the queue must have been quiet (nothing queued) before its replays go to Python.
/// A replay is milliseconds of the proxy's Python, queued the moment its answer is written:
/// started at once, it takes the CPU just as the client wakes to read that answer, and on a
/// busy machine the client then waits up to a scheduler slice (measured: most of the lane's
/// p99 at 45 req/s). The client has read its answer well within this.
const REPLAY_QUIET: Duration = Duration::from_millis(2);
/// The longest a replay waits for a quiet moment; under steady load the queue goes as a batch.
const REPLAY_MAX_WAIT: Duration = Duration::from_millis(20);

/// Served requests waiting for their replay, handed to Python together once the lane has
/// been quiet for `REPLAY_QUIET` (or the oldest has waited `REPLAY_MAX_WAIT`), at once when a
/// client waits for one (a stream's end that the proxy writes).
#[derive(Default)]
struct ReplayQueue {
    items: VecDeque<Replay>,
    oldest: Option<Instant>,
    newest: Option<Instant>,
    urgent: bool,
}

impl ReplayQueue {
    /// Queues a replay; `urgent` puts it ahead of the others and makes the queue due.
    fn push(&mut self, replay: Replay, urgent: bool, now: Instant) {
        if urgent {
            self.items.push_front(replay);
        } else {
            self.items.push_back(replay);
        }
        self.urgent |= urgent;
        self.oldest.get_or_insert(now);
        self.newest = Some(now);
    }

    /// How long until the queue is due; None when it is empty.
    fn due_in(&self, now: Instant) -> Option<Duration> {
        let (oldest, newest) = (self.oldest?, self.newest?);
        if self.urgent {
            return Some(Duration::ZERO);
        }
        let quiet = (newest + REPLAY_QUIET).saturating_duration_since(now);
        let longest = (oldest + REPLAY_MAX_WAIT).saturating_duration_since(now);
        Some(quiet.min(longest))
    }

    fn take(&mut self) -> Vec<Replay> {
        self.oldest = None;
        self.newest = None;
        self.urgent = false;
        self.items.drain(..).collect()
    }
}

/// Headers the lane takes in one request (see `serve_connection`).
const MAX_HEADERS: usize = 1000;
/// The shortest pause between two checks of an idle connection.
const IDLE_CHECK_MIN: Duration = Duration::from_millis(10);
/// An app connection unused for this long is replaced before use (uvicorn closes idle ones).
const APP_CONNECTION_REUSE_LIMIT: Duration = Duration::from_secs(1);
/// How long the listener pauses after a failed accept.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(10);
/// How often a waiting request checks that its client is still there.
const CLIENT_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// A provider call's outcome, as a ticket holds it.
#[derive(Debug)]
pub enum Outcome {
    Call(Result<Completion, CallError>),
    Stream(StreamOutcome),
}

/// A stream the lane opened: the provider's headers (or the error that kept it from opening),
/// then what the replay's stream wrapper needs of it: the first chunk, and the end (the
/// assembled answer, or the failure).
#[derive(Debug)]
pub struct StreamOutcome {
    pub opened: Result<http::HeaderMap, CallError>,
    pub pieces: Vec<Piece>,
    /// The pieces are the provider's bytes (`/v1/messages`), not chunks.
    pub raw: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(ticket: &str) -> Replay {
        Replay {
            path: "/chat/completions".into(),
            headers: Vec::new(),
            body: Bytes::new(),
            client: None,
            server: None,
            ticket: ticket.into(),
        }
    }

    #[test]
    fn replays_wait_for_a_quiet_moment_then_go_together() {
        let start = Instant::now();
        let mut queue = ReplayQueue::default();
        assert_eq!(queue.due_in(start), None);
        queue.push(replay("a"), false, start);
        assert_eq!(queue.due_in(start), Some(REPLAY_QUIET));
        // Another answer 1 ms later extends the quiet.
        let later = start + Duration::from_millis(1);
        queue.push(replay("b"), false, later);
        assert_eq!(queue.due_in(later), Some(REPLAY_QUIET));
        assert_eq!(queue.due_in(later + REPLAY_QUIET), Some(Duration::ZERO));
        let tickets: Vec<_> = queue.take().into_iter().map(|r| r.ticket).collect();
        assert_eq!(tickets, ["a", "b"]);
        assert_eq!(queue.due_in(later), None);
    }

    #[test]
    fn steady_answers_cannot_hold_replays_back_for_long() {
        let start = Instant::now();
        let mut queue = ReplayQueue::default();
        let mut now = start;
        while now < start + REPLAY_MAX_WAIT {
            queue.push(replay("x"), false, now);
            now += Duration::from_millis(1);
        }
        assert_eq!(queue.due_in(now), Some(Duration::ZERO));
    }

    #[test]
    fn a_replay_a_client_waits_for_goes_first_and_at_once() {
        let now = Instant::now();
        let mut queue = ReplayQueue::default();
        queue.push(replay("a"), false, now);
        queue.push(replay("tail"), true, now);
        assert_eq!(queue.due_in(now), Some(Duration::ZERO));
        assert_eq!(queue.take()[0].ticket, "tail");
    }
}
