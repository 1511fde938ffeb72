//! One provider call: sign (if AWS), send once, classify the answer. Nothing here retries.

use std::sync::Arc;

use http::HeaderMap;

use bytes::Bytes;
use serde_json::Value;

use crate::http::client::{OpenResponse, Transport, TransportError, UpstreamResponse};
use crate::http::sigv4::{self, SigningError};
use crate::http::{RequestBody, UpstreamRequest};
use crate::providers::embedding::EmbeddingAnswer;
use crate::providers::{Deployment, TransformError};
use crate::wire::body::JsonBody;

/// Request bodies with more text and media than this are laid out and hashed on the blocking
/// pool, answers larger than this parsed there: not on an I/O thread (and never on the caller's
/// event loop).
const INLINE_BODY_LIMIT: u64 = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Signing(#[from] SigningError),
    #[error(transparent)]
    Transform(#[from] TransformError),
    /// A non-2xx answer: final, mapped to LiteLLM's exception for that status in Python.
    #[error("provider returned HTTP {}", .0.status)]
    Status(Box<UpstreamResponse>),
}

/// Sends the request exactly once; a 2xx response is returned, anything else is `Status`.
/// A malformed text or media payload fails here, before any I/O.
pub async fn execute(
    transport: &Transport,
    request: UpstreamRequest,
) -> Result<UpstreamResponse, CallError> {
    Ok(open(transport, request).await?.read_to_end().await?)
}

/// Like [`execute`], but returns as soon as a 2xx status and its headers are in; the body is
/// left to read as it arrives (streams). A non-2xx answer is read whole and is `Status`.
pub async fn open(
    transport: &Transport,
    request: UpstreamRequest,
) -> Result<OpenResponse, CallError> {
    let UpstreamRequest {
        url,
        mut headers,
        body,
        timeout,
        sigv4: signing,
    } = request;
    let (body, digest) = lay_out(body, signing.is_some()).await?;
    if let (Some(plan), Some(digest)) = (signing, digest) {
        let signed = sigv4::sign(
            "POST",
            &url,
            &headers,
            &digest,
            &plan.region,
            plan.service,
            &plan.credentials,
            std::time::SystemTime::now(),
        )?;
        for (name, mut value) in signed {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }
    let response = transport.open(&url, headers, body, timeout).await?;
    if (200..300).contains(&response.status()) {
        Ok(response)
    } else {
        Err(CallError::Status(Box::new(response.read_to_end().await?)))
    }
}

/// The body as sent, plus its SHA-256 when it is to be signed: both O(body), so large bodies go
/// to the blocking pool.
async fn lay_out(
    body: RequestBody,
    with_digest: bool,
) -> Result<(JsonBody, Option<String>), CallError> {
    let inline = body.weight() <= INLINE_BODY_LIMIT;
    let work = move || -> Result<(JsonBody, Option<String>), CallError> {
        let json = body.lay_out().map_err(TransformError::from)?;
        let digest = with_digest.then(|| json.sha256_hex());
        Ok((json, digest))
    };
    if inline {
        return work();
    }
    tokio::task::spawn_blocking(work).await.map_err(|err| {
        CallError::Transport(TransportError::Setup(format!("body task failed: {err}")))
    })?
}

/// What a call's 2xx answers are parsed into.
#[derive(Clone, Debug)]
pub enum ResponseShape {
    /// An OpenAI `chat.completion` for this deployment.
    ChatCompletion(Arc<Deployment>),
    /// Another answer, parsed by the provider's function (e.g. a Bedrock transcription).
    Parsed(fn(&Bytes) -> Result<Value, TransformError>),
    /// An embedding response, from every answer of the call (Titan sends one request per input).
    Embedding(EmbeddingAnswer),
    /// The provider's bytes as they came (`/v1/messages`: the caller gets `json.loads` of them,
    /// as on LiteLLM's path).
    Raw,
}

impl ResponseShape {
    fn parse(&self, bodies: &[Bytes]) -> Result<Value, TransformError> {
        let single = || match bodies {
            [body] => Ok(body),
            _ => Err(TransformError::InvalidResponse(format!(
                "expected one answer, got {}",
                bodies.len()
            ))),
        };
        match self {
            ResponseShape::ChatCompletion(deployment) => {
                crate::providers::parse_response(deployment, single()?)
            }
            ResponseShape::Parsed(parse) => parse(single()?),
            ResponseShape::Embedding(answer) => answer.parse(bodies),
            ResponseShape::Raw => Ok(Value::Null),
        }
    }
}

/// A parsed provider answer in LiteLLM's shape, plus the provider's response headers.
#[derive(Debug)]
pub struct Completion {
    pub body: serde_json::Value,
    /// The answer's bytes, for [`ResponseShape::Raw`].
    pub raw: Option<Bytes>,
    pub headers: HeaderMap,
}

/// One call end to end: send each request once, in order (the first failure ends the call),
/// then parse the 2xx answers. Large answers are parsed on the blocking pool.
pub async fn run(
    transport: &Transport,
    requests: Vec<UpstreamRequest>,
    shape: &ResponseShape,
) -> Result<Completion, CallError> {
    let mut bodies = Vec::with_capacity(requests.len());
    let mut headers = HeaderMap::new();
    for request in requests {
        let response = execute(transport, request).await?;
        bodies.push(response.body);
        headers = response.headers;
    }
    if let ResponseShape::Raw = shape {
        let raw = bodies.pop().unwrap_or_default();
        return Ok(Completion {
            body: Value::Null,
            raw: Some(raw),
            headers,
        });
    }
    let size: usize = bodies.iter().map(Bytes::len).sum();
    let body = if size as u64 <= INLINE_BODY_LIMIT {
        shape.parse(&bodies)?
    } else {
        let shape = shape.clone();
        tokio::task::spawn_blocking(move || shape.parse(&bodies))
            .await
            .map_err(|err| {
                CallError::Transport(TransportError::Setup(format!("parse task failed: {err}")))
            })??
    };
    Ok(Completion {
        body,
        raw: None,
        headers,
    })
}
