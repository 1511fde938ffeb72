//! Admission plus the transform, before any I/O, for every call the fast path makes to a
//! provider, and the parse of its answer: each question goes to the deployment's provider.

use bytes::Bytes;
use serde_json::Value;

use super::chunks::StreamOptions;
use super::embedding::EmbeddingCall;
use super::error::{Refusal, TransformError};
use super::parts::json_object;
use super::provider::{Deployment, StreamAsk};
use super::rules::admit_params;
use super::stream::StreamTransform;
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::{ChatRequest, Decline, DeclineCode, EmbeddingRequest};
use crate::wire::body::Node;

/// Ready (the upstream request), Declined or Invalid. Reads structure only; text and media are
/// checked when the body is laid out.
pub fn prepare(deployment: &Deployment, request: &ChatRequest) -> Result<UpstreamRequest, Refusal> {
    let provider = deployment.provider;
    admit_params(provider.params, &request.params)?;
    let mut upstream = (provider.build_request)(deployment, request)?;
    deployment.add_extra_headers(&mut upstream.headers);
    Ok(upstream)
}

/// A streamed chat request: the upstream request (the chat request asking for a stream, with
/// the caller's `stream_options` where LiteLLM forwards them) and the transform of its events.
pub fn prepare_stream(
    deployment: &Deployment,
    request: &ChatRequest,
    stream_options: Option<Value>,
    options: StreamOptions,
) -> Result<(UpstreamRequest, Box<dyn StreamTransform>), Refusal> {
    let provider = deployment.provider;
    let declined = |detail: String| Refusal::from(Decline::new(DeclineCode::Stream, detail));
    let Some(stream) = &provider.chat_stream else {
        return Err(declined(format!("streaming from {}", provider.name)));
    };
    if provider.json_schema_per_model(&request.params) {
        return Err(declined("json_schema in a stream".into()));
    }
    for name in ["n", "logprobs", "top_logprobs"] {
        if request.params.get(name).is_some_and(|v| !v.is_null()) {
            return Err(declined(format!("param {name:?} in a stream")));
        }
    }
    let mut upstream = prepare(deployment, request)?;
    match stream.asked_by {
        StreamAsk::UrlSuffix(suffix) => upstream.url.push_str(suffix),
        StreamAsk::Body { forward_options } => {
            let RequestBody::Document(Node::Object(fields)) = &mut upstream.body else {
                return Err(TransformError::InvalidRequest("unexpected chat body".into()).into());
            };
            fields.push(("stream".into(), Node::Value(Value::Bool(true))));
            if let Some(stream_options) = stream_options.filter(|_| forward_options) {
                fields.push(("stream_options".into(), Node::Value(stream_options)));
            }
        }
    }
    Ok((
        upstream,
        (stream.transform)(deployment.model.clone(), options),
    ))
}

/// Converts a 2xx upstream body into an OpenAI `chat.completion` object.
pub fn parse_response(deployment: &Deployment, body: &Bytes) -> Result<Value, TransformError> {
    let parsed = json_object(body)?;
    (deployment.provider.parse_response)(deployment, parsed)
}

/// An embeddings call: its upstream requests and how to read the answers.
pub fn prepare_embedding(
    deployment: &Deployment,
    request: &EmbeddingRequest,
) -> Result<EmbeddingCall, Refusal> {
    let Some(embeddings) = deployment.provider.embeddings else {
        let detail = format!("embeddings for provider {:?}", deployment.provider.name);
        return Err(Decline::new(DeclineCode::Provider, detail).into());
    };
    let mut call = embeddings(deployment, request)?;
    for upstream in &mut call.requests {
        deployment.add_extra_headers(&mut upstream.headers);
    }
    Ok(call)
}
