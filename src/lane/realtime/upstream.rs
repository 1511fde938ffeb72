//! Dialing a provider's realtime WebSocket as LiteLLM's OpenAI handler does (the deployment's
//! URL, `Authorization: Bearer <key>`, GA protocol), reading the provider's first event.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use http::HeaderValue;
use http::header::AUTHORIZATION;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::events::event_type;

/// How long a dial may take to connect and upgrade (the `websockets` client's `open_timeout`).
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a dial may wait for the provider's `session.created` after the upgrade.
const FIRST_EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Either side's byte stream (plain TCP, TLS, or the client's upgraded connection).
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub(super) type Socket = WebSocketStream<Box<dyn Io>>;

/// Why a dial gave no session. Its text names no URL, header or key.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("the deployment's realtime URL is not a ws:// or wss:// URL with a host")]
    Url,
    #[error("connecting failed: {0}")]
    Connect(std::io::Error),
    #[error("the TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("the WebSocket handshake failed: {0}")]
    Handshake(String),
    #[error("timed out")]
    Timeout,
    #[error("the provider's first event was not session.created")]
    NotASession,
}

/// One provider session, upgraded, with its `session.created` read.
pub(super) struct Dialed {
    pub socket: Socket,
    pub first_event: Utf8Bytes,
}

/// The relay's frame limits: LiteLLM's provider connections take any size
/// (`REALTIME_WEBSOCKET_MAX_MESSAGE_SIZE_BYTES` unset); the message and frame limits here are
/// those of uvicorn's `ws_max_size` for the client side.
pub(super) fn config(max_message: Option<usize>) -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(max_message)
        .max_frame_size(max_message)
        // Each read zero-fills up to this much of its buffer first: tungstenite's 128 KiB
        // default was 6% of the relay's CPU for 6 KiB frames.
        .read_buffer_size(READ_BUFFER)
}

/// Reads of a few frames at a time; larger messages grow the buffer as they need.
const READ_BUFFER: usize = 16 * 1024;

pub(super) async fn dial(url: &str, authorization: &str) -> Result<Dialed, DialError> {
    let mut request = url.into_client_request().map_err(|_| DialError::Url)?;
    let credential = HeaderValue::from_str(authorization).map_err(|_| DialError::Url)?;
    request.headers_mut().insert(AUTHORIZATION, credential);
    let uri = request.uri().clone();
    let secure = match uri.scheme_str() {
        Some("wss") => true,
        Some("ws") => false,
        _ => return Err(DialError::Url),
    };
    let host = uri.host().ok_or(DialError::Url)?.to_string();
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let opened = tokio::time::timeout(OPEN_TIMEOUT, async {
        let tcp = TcpStream::connect((host.trim_matches(['[', ']']), port))
            .await
            .map_err(DialError::Connect)?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = if secure {
            let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']))
                .map_err(|_| DialError::Url)?
                .to_owned();
            let tls = tokio_rustls::TlsConnector::from(tls_config()?)
                .connect(name, tcp)
                .await
                .map_err(DialError::Tls)?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        tokio_tungstenite::client_async_with_config(request, io, Some(config(None)))
            .await
            .map_err(|err| DialError::Handshake(describe(&err)))
    })
    .await
    .map_err(|_| DialError::Timeout)??;
    let (mut socket, _response) = opened;
    let first = tokio::time::timeout(FIRST_EVENT_TIMEOUT, socket.next())
        .await
        .map_err(|_| DialError::Timeout)?;
    let first_event = match first {
        Some(Ok(Message::Text(text))) => text,
        Some(Ok(Message::Binary(bytes))) => {
            Utf8Bytes::try_from(bytes).map_err(|_| DialError::NotASession)?
        }
        _ => return Err(DialError::NotASession),
    };
    if event_type(&first_event).as_deref() != Some("session.created") {
        return Err(DialError::NotASession);
    }
    Ok(Dialed {
        socket,
        first_event,
    })
}

/// The handshake error's kind and status, never its URL or headers.
fn describe(err: &tokio_tungstenite::tungstenite::Error) -> String {
    use tokio_tungstenite::tungstenite::Error;
    match err {
        Error::Http(response) => format!("HTTP {}", response.status().as_u16()),
        Error::Io(io) => io.kind().to_string(),
        _ => "protocol error".to_string(),
    }
}

/// The system's roots, as reqwest verifies the fast path's HTTPS calls.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, DialError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            use rustls_platform_verifier::ConfigVerifierExt;
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut config =
                rustls::ClientConfig::with_platform_verifier().map_err(|err| err.to_string())?;
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(|err| DialError::Tls(std::io::Error::other(err)))
}
