//! One provider call: sign (if AWS), send once, classify the answer. Nothing here retries.

use std::sync::Arc;

use http::HeaderMap;

use crate::providers::{Deployment, TransformError, UpstreamRequest};
use crate::signing::{self, SigningError};
use crate::transport::{Transport, TransportError, UpstreamResponse};

/// Bodies larger than this are hashed on the blocking pool, not on an I/O thread.
const INLINE_HASH_LIMIT: u64 = 256 * 1024;

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
pub async fn execute(
    transport: &Transport,
    mut request: UpstreamRequest,
) -> Result<UpstreamResponse, CallError> {
    if let Some(plan) = request.sigv4.take() {
        let digest = body_digest(&request).await?;
        let signed = signing::sign(
            "POST",
            &request.url,
            &request.headers,
            &digest,
            &plan.region,
            plan.service,
            &plan.credentials,
            std::time::SystemTime::now(),
        )?;
        for (name, mut value) in signed {
            value.set_sensitive(true);
            request.headers.insert(name, value);
        }
    }
    let response = transport.send(request).await?;
    if (200..300).contains(&response.status) {
        Ok(response)
    } else {
        Err(CallError::Status(Box::new(response)))
    }
}

async fn body_digest(request: &UpstreamRequest) -> Result<String, CallError> {
    if request.body.content_length() <= INLINE_HASH_LIMIT {
        return Ok(request.body.sha256_hex());
    }
    let body = request.body.clone();
    tokio::task::spawn_blocking(move || body.sha256_hex())
        .await
        .map_err(|err| {
            CallError::Transport(TransportError::Setup(format!("hashing task failed: {err}")))
        })
}

/// What a 2xx answer is parsed into.
#[derive(Clone, Debug)]
pub enum ResponseShape {
    /// An OpenAI `chat.completion` for this deployment.
    ChatCompletion(Arc<Deployment>),
    /// A transcription (`{"text": ...}`) from a Converse answer.
    Transcription,
}

/// A parsed provider answer in LiteLLM's shape, plus the provider's response headers.
#[derive(Debug)]
pub struct Completion {
    pub body: serde_json::Value,
    pub headers: HeaderMap,
}

/// One call end to end: send once, then parse the 2xx answer.
pub async fn run(
    transport: &Transport,
    request: UpstreamRequest,
    shape: &ResponseShape,
) -> Result<Completion, CallError> {
    let response = execute(transport, request).await?;
    let body = match shape {
        ResponseShape::ChatCompletion(deployment) => {
            crate::providers::parse_response(deployment, &response.body)?
        }
        ResponseShape::Transcription => {
            crate::providers::bedrock::parse_transcription(&response.body)?
        }
    };
    Ok(Completion {
        body,
        headers: response.headers,
    })
}
