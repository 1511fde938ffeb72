//! A realtime session at the lane: whether the lane relays it (`admit`), the upgrade answered
//! here, and the session relayed on the relay's thread; else handed back for the proxy.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, UPGRADE};
use http::{HeaderValue, Method, StatusCode};
use hyper::Response;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::hub::{RealtimeDeployment, SessionRecord};
use super::pool::close_quietly;
use super::relay;
use super::upstream::{self, Io};
use crate::lane::connection::{Connection, PEER_HEADER};
use crate::lane::gate::{Route, has_proxy_options, key_hash};
use crate::lane::keepalive::Tracked;
use crate::lane::response::{Body, full};
use crate::lane::state::Lane;

const PATH: &str = "/v1/realtime";
/// uvicorn's `ws_max_size`: the largest client message the proxy takes.
const CLIENT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// A WebSocket upgrade to the proxy's realtime route.
pub(crate) fn is_session_request<B>(request: &hyper::Request<B>) -> bool {
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
    // Keys with budgets reserve per session in LiteLLM's auth, and rpm limits count each
    // session in the limiter: the proxy's.
    if verdict.budget.is_some()
        || verdict.rates.is_some()
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
pub(crate) async fn serve(
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
