//! What a provider is to the fast path: the questions every part of it asks a provider (its
//! transforms, streams, `json_schema`, embeddings, `/v1/messages`, the lane's answer shape,
//! credentials), and the deployment a call goes to.
//!
//! Each provider's transforms live in its own folder; its answers are its entry of
//! `registry::REGISTRY`, and nothing else names a provider.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::chunks::StreamOptions;
use super::embedding::EmbeddingCall;
use super::error::{Refusal, TransformError};
use super::stream::StreamTransform;
use crate::http::UpstreamRequest;
use crate::http::sigv4::AwsCredentials;
use crate::model::{ChatRequest, EmbeddingRequest};

/// One provider: LiteLLM's name for it, its chat transform, and its answers to the questions
/// the rest of the fast path asks a provider. Each is one entry of `registry::REGISTRY`.
pub struct ChatProvider {
    /// LiteLLM's name for the provider (the model prefix, `custom_llm_provider`).
    pub name: &'static str,
    /// The OpenAI params the transform translates exactly like LiteLLM; others decline.
    pub params: &'static [&'static str],
    /// Chat request -> upstream request, or why not (declined or malformed), before any I/O.
    pub build_request: fn(&Deployment, &ChatRequest) -> Result<UpstreamRequest, Refusal>,
    /// A 2xx answer (a JSON object) -> an OpenAI `chat.completion` object as LiteLLM builds it.
    pub parse_response: fn(&Deployment, Value) -> Result<Value, TransformError>,
    /// The shape of its `chat.completion`s, for the lane writing the proxy's body.
    pub answer_shape: AnswerShape,
    /// How LiteLLM sends it `response_format: json_schema`.
    pub json_schema: JsonSchemaForm,
    /// How its deployments authenticate.
    pub credentials: Credentials,
    /// Its chat streams; None: they stay on LiteLLM's path.
    pub chat_stream: Option<ChatStream>,
    /// Its embeddings calls; None: they stay on LiteLLM's path.
    pub embeddings: Option<BuildEmbeddings>,
    /// Where its `/v1/messages` calls go; None: they stay on LiteLLM's path.
    pub messages_api: Option<MessagesApi>,
}

/// Embeddings request -> the upstream requests and how to read their answers, or why not.
pub type BuildEmbeddings = fn(&Deployment, &EmbeddingRequest) -> Result<EmbeddingCall, Refusal>;

/// What a provider's `chat.completion` is, for the lane writing the proxy's body for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerShape {
    /// The provider's own `chat.completion` (its id and time), as the OpenAI SDK reads it.
    OpenAi,
    /// One LiteLLM converted from the provider's format (LiteLLM makes up its id and time).
    Converted,
}

/// How LiteLLM sends `response_format: json_schema` to a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonSchemaForm {
    /// As given, for every model.
    AsGiven,
    /// In a form that depends on the model (a native output format, or a forced tool call whose
    /// stream LiteLLM fakes): the Python layer decides it per call; the lane and streams leave
    /// it to LiteLLM.
    PerModel,
}

/// How a provider's deployments authenticate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// `api_key`, in the provider's own header.
    ApiKey,
    /// AWS: SigV4 with static credentials, or a Bedrock API key (`api_key`) as a bearer token;
    /// the deployment carries [`AwsSettings`].
    Aws,
}

/// How a provider streams chat answers: the transform of its events (for the model), and how
/// the request asks for a stream.
pub struct ChatStream {
    pub transform: fn(model: String, options: StreamOptions) -> Box<dyn StreamTransform>,
    pub asked_by: StreamAsk,
}

/// How a request asks a provider for a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamAsk {
    /// `"stream": true` in the body, and the caller's `stream_options` when `forward_options`.
    Body { forward_options: bool },
    /// The same body, to the URL with this suffix.
    UrlSuffix(&'static str),
}

/// Where a provider's `/v1/messages` calls go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessagesApi {
    /// Anthropic's own `/v1/messages`: the answer's bytes go to the caller as they are.
    Anthropic,
    /// Bedrock Invoke with Claude's Messages body: its stream's events are written as LiteLLM
    /// writes them.
    BedrockInvoke,
}

/// A provider of the registry (see `registry::find`).
#[derive(Clone, Copy)]
pub struct Provider(&'static ChatProvider);

impl Provider {
    pub const fn new(provider: &'static ChatProvider) -> Provider {
        Provider(provider)
    }

    /// Whether LiteLLM's form of these params depends on the model: a `json_schema`
    /// `response_format` for a provider that shapes it per model.
    pub fn json_schema_per_model(self, params: &Map<String, Value>) -> bool {
        let json_schema = params
            .get("response_format")
            .and_then(|format| format.get("type"))
            .is_some_and(|kind| kind == "json_schema");
        json_schema && self.json_schema == JsonSchemaForm::PerModel
    }
}

impl std::ops::Deref for Provider {
    type Target = ChatProvider;

    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Provider {
    fn eq(&self, other: &Provider) -> bool {
        self.name == other.name
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

impl Deployment {
    /// The deployment's `extra_headers`, over the request's own.
    pub fn add_extra_headers(&self, headers: &mut HeaderMap) {
        for (name, value) in &self.extra_headers {
            headers.insert(name.clone(), value.clone());
        }
    }

    /// Its AWS settings, which every AWS-hosted call needs.
    pub fn aws(&self) -> Result<&AwsSettings, TransformError> {
        self.aws.as_ref().ok_or_else(|| {
            let detail = format!("{} deployment without AWS settings", self.provider.name);
            TransformError::InvalidRequest(detail)
        })
    }
}
