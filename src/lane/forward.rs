//! Forwarding to the app behind the lane (the proxy's own uvicorn server, on a Unix socket):
//! every request the lane does not answer goes there unchanged, on the client connection's own
//! app connection; an upgraded one (WebSocket) is carried both ways until either side closes.

use std::time::{Duration, Instant};

use http::StatusCode;
use http::header::UPGRADE;
use http_body_util::BodyExt;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use super::response::{Body, bad_gateway};
use super::state::{App, Lane, LaneError};

/// An app connection unused for this long is replaced before use (uvicorn closes idle ones).
const APP_CONNECTION_REUSE_LIMIT: Duration = Duration::from_secs(1);

type AppSender = hyper::client::conn::http1::SendRequest<Body>;

/// A client connection's own connection to the app, and when it was last used; opened when a
/// request first needs it, so HTTP/1.1 keep-alive and request order carry over one to one.
pub(super) struct AppConnection {
    sender: AppSender,
    used: Instant,
}

/// The app connection of one client connection (None until a request needs it).
pub(super) type AppSlot = tokio::sync::Mutex<Option<AppConnection>>;

async fn connect_app(app: &App) -> Result<AppSender, LaneError> {
    let stream = UnixStream::connect(&app.socket)
        .await
        .map_err(LaneError::AppUnreachable)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection.with_upgrades());
    Ok(sender)
}

/// Sends one request to the app on the connection's own app connection.
///
/// uvicorn closes an app connection `timeout_keep_alive` after its last answer, so one idle
/// for a while is replaced before use rather than raced; and a request the app connection
/// never took (it closed just then) is sent once more on a new one.
pub(super) async fn forward(lane: &Lane, slot: &AppSlot, request: Request<Body>) -> Response<Body> {
    let mut slot = slot.lock().await;
    let mut request = request;
    // A WebSocket (or other) upgrade: once the app answers 101, both connections become one
    // byte stream that the lane carries both ways until either side closes.
    let mut client_upgrade = request
        .headers()
        .contains_key(UPGRADE)
        .then(|| hyper::upgrade::on(&mut request));
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
            Ok(mut response) => {
                if response.status() == StatusCode::SWITCHING_PROTOCOLS
                    && let Some(client_upgrade) = client_upgrade.take()
                {
                    let app_upgrade = hyper::upgrade::on(&mut response);
                    // This app connection now belongs to the upgraded session.
                    *slot = None;
                    tokio::spawn(carry_upgraded(client_upgrade, app_upgrade));
                }
                return response.map(BodyExt::boxed);
            }
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

/// Carries an upgraded connection's bytes both ways until one side closes (the other side's
/// write half is then shut down) or breaks (both are dropped, which closes the other).
async fn carry_upgraded(client: hyper::upgrade::OnUpgrade, app: hyper::upgrade::OnUpgrade) {
    let (Ok(client), Ok(app)) = tokio::join!(client, app) else {
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(client), &mut TokioIo::new(app)).await;
}
