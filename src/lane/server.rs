//! The server: the lane accepts the public connections, serves each on its own task (HTTP/1.1,
//! keep-alive as uvicorn keeps it), reads the requests of its routes and hands them to the
//! route, and forwards every other request (and whatever a route leaves) to the proxy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderValue;
use http::header::CONNECTION;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::connection::{Connection, PEER_HEADER};
use super::forward::{AppSlot, forward};
use super::gate::{Route, drain_counters, key_hash, lane_route};
use super::holds::DRAIN_TIMEOUT;
use super::keepalive;
use super::response::{Body, bad_gateway, full, set_header};
use super::served::{ClientRequest, Served};
use super::state::{Lane, LaneError};
use super::tickets::TICKET_HEADER;
use super::{chat, messages, realtime};
use crate::model::LaneReason;

/// Headers the lane takes in one request (uvicorn's h11 takes any number; hyper's default is
/// 100).
const MAX_HEADERS: usize = 1000;
/// How often a request left to the router looks whether the lane's picks are counted.
const ROUTING_POLL: Duration = Duration::from_millis(2);
/// The shortest pause between two checks of an idle connection.
const IDLE_CHECK_MIN: Duration = Duration::from_millis(10);
/// How long the listener pauses after a failed accept.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(10);
/// The longest a busy worker leaves new connections to the others before it takes one anyway.
const BUSY_ACCEPT_PAUSE: Duration = Duration::from_millis(50);

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
        // A 40 ms Nagle/delayed-ACK stall is the known trap for gateways.
        let _ = stream.set_nodelay(true);
        let Ok((stream, connection)) = Connection::accepted(stream, peer) else {
            continue;
        };
        let lane = Arc::clone(&lane);
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
    let app_slot: Arc<AppSlot> = Arc::default();
    let io = TokioIo::new(keepalive::Tracked::new(stream, Arc::clone(&activity)));
    let in_flight = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let lane = Arc::clone(&lane);
        let app_slot = Arc::clone(&app_slot);
        let connection = connection.clone();
        let answering = in_flight.enter();
        async move {
            let response = handle(&lane, &app_slot, request, &connection).await?;
            // The request counts as in flight until its body has been written (or dropped).
            Ok::<_, LaneError>(response.map(|body| keepalive::Answering::new(body, answering)))
        }
    });
    let serving = hyper::server::conn::http1::Builder::new()
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

/// One request: to its route when it is on one, else (or when the route leaves it) to the app.
async fn handle(
    lane: &Arc<Lane>,
    app_slot: &AppSlot,
    request: Request<Incoming>,
    connection: &Connection,
) -> Result<Response<Body>, LaneError> {
    let mut request = request;
    // Only the lane hands out tickets and says who the client is.
    let headers = request.headers_mut();
    headers.remove(TICKET_HEADER);
    headers.remove(PEER_HEADER);
    set_header(headers, PEER_HEADER, &connection.peer.to_string());
    if realtime::is_session_request(&request) {
        request = match realtime::serve(lane, request, connection).await {
            Ok(relayed) => return Ok(relayed),
            Err(request) => request,
        };
    }
    let (parts, body) = request.into_parts();
    let Some(route) = lane_route(&parts) else {
        let request = Request::from_parts(parts, body.boxed());
        return Ok(forward(lane, app_slot, request).await);
    };
    let Ok(collected) = body.collect().await else {
        return Err(LaneError::BodyCut);
    };
    let body = collected.to_bytes();
    let request = ClientRequest {
        lane,
        route,
        parts: &parts,
        body: &body,
        connection,
    };
    let served = match route {
        Route::Chat => chat::serve(request).await,
        Route::Messages => messages::serve(request).await,
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
            if let Some(key) = key_hash(&parts.headers, route) {
                // The proxy decides on LiteLLM's counters once they hold every request the
                // lane admitted on them (their replays counted).
                let counters = drain_counters(lane, &key, why);
                if !counters.is_empty() {
                    lane.holds.drained(&counters, DRAIN_TIMEOUT).await;
                }
            }
            if why == LaneReason::RoutingLimit {
                routing_counted(lane, &body).await;
            }
            forward(lane, app_slot, Request::from_parts(parts, full(body))).await
        }
        Served::Replay(ticket) => {
            lane.count("replayed");
            let mut request = Request::from_parts(parts, full(body));
            set_header(request.headers_mut(), TICKET_HEADER, &ticket.id);
            if ticket.call_id.added {
                set_header(
                    request.headers_mut(),
                    "x-litellm-call-id",
                    &ticket.call_id.id,
                );
            }
            forward(lane, app_slot, request).await
        }
    })
}

/// A request usage-based routing leaves to the proxy's router (a deployment near its limit):
/// its pick waits until the router counted every request the lane picked in the group, so it
/// reads what the lane's pick read (bounded: the lane never holds a request for long).
async fn routing_counted(lane: &Lane, body: &[u8]) {
    #[derive(serde::Deserialize)]
    struct Named {
        model: String,
    }
    let Ok(named) = serde_json::from_slice::<Named>(body) else {
        return;
    };
    let Some(group) = lane.table.group(&named.model) else {
        return;
    };
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while Instant::now() < deadline
        && group.deployments.iter().any(|deployment| {
            deployment
                .routing
                .as_ref()
                .is_some_and(|routing| routing.pending())
        })
    {
        tokio::time::sleep(ROUTING_POLL).await;
    }
}
