//! Provider transforms: chat request -> upstream HTTP request, upstream response -> chat.completion.
//!
//! Each provider module mirrors what LiteLLM 1.106.12's Python path sends and returns; the
//! differential tests in `tests/` hold them to it.

pub mod anthropic;
pub mod bedrock;
pub mod chunks;
pub mod embedding;
pub mod messages;
pub mod openai;
pub mod rules;
pub mod stream;

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::http::UpstreamRequest;
use crate::http::sigv4::AwsCredentials;
use crate::model::{ChatRequest, Decline};
use crate::wire::body::BodyError;
use crate::wire::media::MediaError;

/// One provider's chat transform: its own folder, one line in [`REGISTRY`].
pub trait ChatProvider: Sync {
    /// LiteLLM's name for the provider (the model prefix, `custom_llm_provider`).
    fn name(&self) -> &'static str;
    /// The OpenAI params the transform translates exactly like LiteLLM; others decline.
    fn params(&self) -> &'static [&'static str];
    /// Chat request -> upstream request, or why not (declined or malformed), before any I/O.
    fn build_request(
        &self,
        deployment: &Deployment,
        request: &ChatRequest,
    ) -> Result<UpstreamRequest, Refusal>;
    /// A 2xx answer (a JSON object) -> an OpenAI `chat.completion` object as LiteLLM builds it.
    fn parse_response(&self, deployment: &Deployment, body: Value)
    -> Result<Value, TransformError>;
}

/// Implements [`ChatProvider`] for a provider module's unit struct from the module's `PARAMS`,
/// `build_request` and `parse_response`.
macro_rules! chat_provider {
    ($provider:ident, $name:literal) => {
        impl $crate::providers::ChatProvider for $provider {
            fn name(&self) -> &'static str {
                $name
            }

            fn params(&self) -> &'static [&'static str] {
                PARAMS
            }

            fn build_request(
                &self,
                deployment: &$crate::providers::Deployment,
                request: &$crate::model::ChatRequest,
            ) -> Result<$crate::http::UpstreamRequest, $crate::providers::Refusal> {
                build_request(deployment, request)
            }

            fn parse_response(
                &self,
                deployment: &$crate::providers::Deployment,
                body: serde_json::Value,
            ) -> Result<serde_json::Value, $crate::providers::TransformError> {
                parse_response(deployment, body)
            }
        }
    };
}
pub(crate) use chat_provider;

/// Every provider the fast path serves.
pub static REGISTRY: &[&dyn ChatProvider] =
    &[&openai::OpenAi, &anthropic::Anthropic, &bedrock::Bedrock];

/// A provider of the registry, by LiteLLM's name.
#[derive(Clone, Copy)]
pub struct Provider(&'static dyn ChatProvider);

impl Provider {
    pub fn parse(name: &str) -> Option<Provider> {
        REGISTRY
            .iter()
            .find(|provider| provider.name() == name)
            .map(|provider| Provider(*provider))
    }

    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    fn transform(self) -> &'static dyn ChatProvider {
        self.0
    }
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for Provider {
    fn eq(&self, other: &Provider) -> bool {
        self.as_str() == other.as_str()
    }
}

/// How Bedrock requests authenticate. `Debug` never shows the secret.
#[derive(Clone)]
pub enum AwsAuth {
    /// Static AWS credentials: every request is SigV4-signed.
    SigV4(AwsCredentials),
    /// A Bedrock API key (`api_key` in LiteLLM): `Authorization: Bearer`, no signature.
    Bearer(String),
}

impl std::fmt::Debug for AwsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AwsAuth::SigV4(credentials) => f.debug_tuple("SigV4").field(credentials).finish(),
            AwsAuth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

/// AWS settings of a Bedrock deployment, already resolved (precedence applied in Python).
#[derive(Clone, Debug)]
pub struct AwsSettings {
    pub auth: AwsAuth,
    pub region: String,
    /// `aws_bedrock_runtime_endpoint` / `api_base`; default `https://bedrock-runtime.{region}.amazonaws.com`.
    pub endpoint: Option<String>,
}

/// One deployment's resolved settings: everything a call needs besides the request itself.
#[derive(Clone, Debug)]
pub struct Deployment {
    pub provider: Provider,
    /// Upstream model id, without the LiteLLM provider prefix.
    pub model: String,
    pub api_base: Option<String>,
    pub api_key: Option<String>,
    pub aws: Option<AwsSettings>,
    pub extra_headers: Vec<(HeaderName, HeaderValue)>,
    pub timeout: Duration,
    /// Anthropic: `max_tokens` when the caller sets none (LiteLLM takes it from its model map).
    pub default_max_tokens: Option<i64>,
}

/// Failures of the transforms. Request-side errors happen before any I/O and are the caller's
/// fault (HTTP 400); `InvalidResponse` is the provider's (its answer is final).
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    Media(#[from] MediaError),
    #[error("invalid header {0}")]
    InvalidHeader(String),
    /// The 2xx body is not a JSON object at all.
    #[error("provider returned an unparsable response: {0}")]
    UnparsableResponse(String),
    /// A JSON object without the fields LiteLLM needs (it fails the call on these too).
    #[error("provider returned an invalid response: {0}")]
    InvalidResponse(String),
}

/// The admission outcome when a request is not ready to send (`Ok(UpstreamRequest)` is Ready):
/// it stays on LiteLLM's Python path, or it is malformed (HTTP 400). Decided before any I/O.
#[derive(Debug)]
pub enum Refusal {
    Declined(Decline),
    Invalid(TransformError),
}

impl From<Decline> for Refusal {
    fn from(decline: Decline) -> Self {
        Refusal::Declined(decline)
    }
}

impl From<TransformError> for Refusal {
    fn from(err: TransformError) -> Self {
        Refusal::Invalid(err)
    }
}

impl From<BodyError> for Refusal {
    fn from(err: BodyError) -> Self {
        Refusal::Invalid(err.into())
    }
}

impl From<MediaError> for Refusal {
    fn from(err: MediaError) -> Self {
        Refusal::Invalid(err.into())
    }
}

/// Admission plus the transform, before any I/O: Ready (the upstream request), Declined or
/// Invalid. Reads structure only; text and media are checked when the body is laid out.
pub fn prepare(deployment: &Deployment, request: &ChatRequest) -> Result<UpstreamRequest, Refusal> {
    let transform = deployment.provider.transform();
    rules::admit_params(transform.params(), &request.params)?;
    let mut upstream = transform.build_request(deployment, request)?;
    append_extra_headers(&mut upstream.headers, &deployment.extra_headers);
    Ok(upstream)
}

/// Admission and transform for a streamed chat request: the upstream request (the chat body
/// plus `stream: true` and the caller's `stream_options`) and the transform of its events.
pub fn prepare_stream(
    deployment: &Deployment,
    request: &ChatRequest,
    stream_options: Option<Value>,
    options: chunks::StreamOptions,
) -> Result<(UpstreamRequest, Box<dyn stream::StreamTransform>), Refusal> {
    let model = deployment.model.clone();
    let (transform, forwards_stream_options): (Box<dyn stream::StreamTransform>, bool) =
        match deployment.provider.as_str() {
            "openai" => (
                Box::new(openai::stream::OpenAiStream::new(model, options)),
                true,
            ),
            // LiteLLM never sends `stream_options` to Anthropic.
            "anthropic" => (
                Box::new(anthropic::stream::AnthropicStream::new(model, options)),
                false,
            ),
            "bedrock" => (
                Box::new(bedrock::stream::BedrockStream::new(model, options)),
                false,
            ),
            other => {
                return Err(Decline::new(
                    crate::model::DeclineCode::Stream,
                    format!("streaming from {other}"),
                )
                .into());
            }
        };
    if request
        .params
        .get("response_format")
        .and_then(|format| format.get("type"))
        .is_some_and(|kind| kind == "json_schema")
        && deployment.provider.as_str() != "openai"
    {
        // LiteLLM fakes the stream (one forced tool call, replayed as chunks).
        return Err(
            Decline::new(crate::model::DeclineCode::Stream, "json_schema in a stream").into(),
        );
    }
    for name in ["n", "logprobs", "top_logprobs"] {
        if request.params.get(name).is_some_and(|v| !v.is_null()) {
            return Err(Decline::new(
                crate::model::DeclineCode::Stream,
                format!("param {name:?} in a stream"),
            )
            .into());
        }
    }
    let mut upstream = prepare(deployment, request)?;
    if deployment.provider.as_str() == "bedrock" {
        // Same body as `converse`; LiteLLM never puts `stream` into it.
        upstream.url.push_str("-stream");
        return Ok((upstream, transform));
    }
    let crate::http::RequestBody::Document(crate::wire::body::Node::Object(fields)) =
        &mut upstream.body
    else {
        return Err(TransformError::InvalidRequest("unexpected chat body".into()).into());
    };
    fields.push((
        "stream".into(),
        crate::wire::body::Node::Value(Value::Bool(true)),
    ));
    if let Some(stream_options) = stream_options.filter(|_| forwards_stream_options) {
        fields.push((
            "stream_options".into(),
            crate::wire::body::Node::Value(stream_options),
        ));
    }
    Ok((upstream, transform))
}

/// Converts a 2xx upstream body into an OpenAI `chat.completion` object.
pub fn parse_response(deployment: &Deployment, body: &Bytes) -> Result<Value, TransformError> {
    let parsed = json_object(body)?;
    deployment
        .provider
        .transform()
        .parse_response(deployment, parsed)
}

/// A 2xx body as a JSON object, or `UnparsableResponse`.
pub fn json_object(body: &Bytes) -> Result<Value, TransformError> {
    let parsed: Value = serde_json::from_slice(body)
        .map_err(|err| TransformError::UnparsableResponse(format!("not JSON ({err})")))?;
    if !parsed.is_object() {
        return Err(TransformError::UnparsableResponse(
            "expected a JSON object".into(),
        ));
    }
    Ok(parsed)
}

pub(crate) fn append_extra_headers(headers: &mut HeaderMap, extra: &[(HeaderName, HeaderValue)]) {
    for (name, value) in extra {
        headers.insert(name.clone(), value.clone());
    }
}

/// Inserts a credential header, marked sensitive so it never shows in `Debug` output or logs.
pub(crate) fn insert_secret(
    headers: &mut HeaderMap,
    name: &'static str,
    value: &str,
) -> Result<(), TransformError> {
    let (name, mut value) = header(name, value)?;
    value.set_sensitive(true);
    headers.insert(name, value);
    Ok(())
}

pub(crate) fn header(
    name: &'static str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), TransformError> {
    let value = HeaderValue::from_str(value)
        .map_err(|_| TransformError::InvalidHeader(name.to_string()))?;
    Ok((HeaderName::from_static(name), value))
}
