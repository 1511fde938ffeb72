//! The HTTP client: one shared reqwest pool, no automatic retries, no redirects, bodies streamed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;

use crate::wire::body::JsonBody;

/// LiteLLM's httpx default connect timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an idle pooled connection is kept (reqwest's default drops it after 90 s, so a
/// quiet spell of two minutes paid a new connect and TLS handshake). The upstream may close
/// it sooner; the warmer (`warm.rs`) dials again then.
const POOL_IDLE: Duration = Duration::from_secs(600);
/// TCP keepalive probes on idle connections, so a peer or a middlebox that vanished is noticed
/// and NAT entries stay open.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// HTTP/2 pings on idle connections, answered within the timeout or the connection is closed.
const H2_PING_EVERY: Duration = Duration::from_secs(20);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);
/// A warming answer's body is read up to this and dropped (past it the connection closes).
const WARM_BODY_MAX: usize = 64 * 1024;
/// A warming request that takes longer is dropped (with its connection): an upstream that
/// stalls it must not hold the warmer for the calls' own, often long, timeout.
const WARM_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("request timed out after {0:.1?}")]
    Timeout(Duration),
    #[error("connection to the provider failed: {0}")]
    Connect(String),
    #[error("the provider closed the connection: {0}")]
    Disconnected(String),
    #[error("invalid provider URL: {0}")]
    InvalidUrl(String),
    #[error("HTTP client setup failed: {0}")]
    Setup(String),
}

/// What came back from the provider, whatever the status.
#[derive(Debug)]
pub struct UpstreamResponse {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Distinct timeouts kept with their own client; deployments rarely use more than a few.
const MAX_CLIENTS: usize = 64;

/// HTTP clients keyed by the deployment timeout. LiteLLM's `timeout` bounds each wait for the
/// provider (connect, every read), not the whole exchange, so a slow but steady answer
/// succeeds; reqwest's per-read timeout is a client setting, hence one client per value.
pub struct Transport {
    clients: Mutex<HashMap<Duration, reqwest::Client>>,
}

impl Transport {
    pub fn new() -> Result<Transport, TransportError> {
        // Several crates may link rustls; installing our provider is idempotent per process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Transport {
            clients: Mutex::new(HashMap::new()),
        })
    }

    fn client(&self, read_timeout: Duration) -> Result<reqwest::Client, TransportError> {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(client) = clients.get(&read_timeout) {
            return Ok(client.clone());
        }
        if clients.len() >= MAX_CLIENTS {
            // Idle pooled connections of the dropped clients close on their own.
            clients.clear();
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT.min(read_timeout))
            .read_timeout(read_timeout)
            .pool_idle_timeout(POOL_IDLE)
            .tcp_nodelay(true)
            .tcp_keepalive(TCP_KEEPALIVE)
            .http2_keep_alive_interval(H2_PING_EVERY)
            .http2_keep_alive_timeout(H2_PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            // The router owns retries; a redirect must never carry credentials elsewhere.
            .retry(reqwest::retry::never())
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(|err| TransportError::Setup(describe(&err)))?;
        clients.insert(read_timeout, client.clone());
        Ok(client)
    }

    /// Sends one request and reads the whole response. Exactly one attempt; `timeout` bounds
    /// the connect and each read.
    pub async fn send(
        &self,
        url: &str,
        headers: HeaderMap,
        body: JsonBody,
        timeout: Duration,
    ) -> Result<UpstreamResponse, TransportError> {
        self.open(url, headers, body, timeout)
            .await?
            .read_to_end()
            .await
    }

    /// Sends one request and returns once the status and headers are in; the body is read
    /// piece by piece from the returned [`OpenResponse`] (streams).
    pub async fn open(
        &self,
        url: &str,
        headers: HeaderMap,
        body: JsonBody,
        timeout: Duration,
    ) -> Result<OpenResponse, TransportError> {
        let url =
            reqwest::Url::parse(url).map_err(|err| TransportError::InvalidUrl(err.to_string()))?;
        let response = self
            .client(timeout)?
            .post(url)
            .headers(headers)
            .body(reqwest::Body::wrap(body.into_http_body()))
            .send()
            .await
            .map_err(|err| classify(err, timeout))?;
        Ok(OpenResponse { response, timeout })
    }

    /// One warming request (`warm.rs`): `OPTIONS` to the origin with no credentials, no
    /// deployment headers and no body, through the client the deployment's calls use, so the
    /// connection it leaves in the pool is theirs. Ok(true) when it went over HTTP/2.
    pub async fn warm(
        &self,
        origin: reqwest::Url,
        timeout: Duration,
    ) -> Result<bool, TransportError> {
        let bound = WARM_TIMEOUT.min(timeout);
        tokio::time::timeout(bound, self.warm_unbounded(origin, timeout))
            .await
            .unwrap_or(Err(TransportError::Timeout(bound)))
    }

    async fn warm_unbounded(
        &self,
        origin: reqwest::Url,
        timeout: Duration,
    ) -> Result<bool, TransportError> {
        let mut response = self
            .client(timeout)?
            .request(reqwest::Method::OPTIONS, origin)
            .send()
            .await
            .map_err(|err| classify(err, timeout))?;
        let http2 = response.version() == reqwest::Version::HTTP_2;
        let mut read = 0;
        // Read to the end so an HTTP/1.1 connection goes back to the pool.
        while let Some(piece) = response
            .chunk()
            .await
            .map_err(|err| body_error(&err, timeout))?
        {
            read += piece.len();
            if read > WARM_BODY_MAX {
                break;
            }
        }
        Ok(http2)
    }
}

/// A response whose status and headers arrived; dropping it closes the connection mid-body.
pub struct OpenResponse {
    response: reqwest::Response,
    timeout: Duration,
}

impl OpenResponse {
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    pub fn headers(&self) -> &HeaderMap {
        self.response.headers()
    }

    /// The next piece of the body as it arrives, `None` at its end. Each wait is bounded by
    /// the timeout (a stalled stream fails instead of hanging).
    pub async fn next_piece(&mut self) -> Result<Option<Bytes>, TransportError> {
        let timeout = self.timeout;
        self.response
            .chunk()
            .await
            .map_err(|err| body_error(&err, timeout))
    }

    pub async fn read_to_end(self) -> Result<UpstreamResponse, TransportError> {
        let status = self.status();
        let headers = self.headers().clone();
        let timeout = self.timeout;
        let body = self
            .response
            .bytes()
            .await
            .map_err(|err| body_error(&err, timeout))?;
        Ok(UpstreamResponse {
            status,
            headers,
            body,
        })
    }
}

fn body_error(err: &reqwest::Error, timeout: Duration) -> TransportError {
    if err.is_timeout() {
        TransportError::Timeout(timeout)
    } else {
        TransportError::Disconnected(describe(err))
    }
}

fn classify(err: reqwest::Error, timeout: Duration) -> TransportError {
    if err.is_timeout() {
        TransportError::Timeout(timeout)
    } else if err.is_connect() {
        TransportError::Connect(describe(&err))
    } else {
        TransportError::Disconnected(describe(&err))
    }
}

/// The innermost cause ("connection refused"), without the URL (it may carry credentials).
fn describe(err: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = err;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let text = cause.to_string();
    if text.contains("http://") || text.contains("https://") {
        "request failed".to_string()
    } else {
        text
    }
}
