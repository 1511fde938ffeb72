//! Anthropic Messages: chat.completions -> /v1/messages and back.

pub mod endpoint;
pub mod stream;
pub mod tools;

use serde_json::{Map, Value, json};

use super::chunks::StreamOptions;
use super::error::{Refusal, TransformError};
use super::parts::{header, headers, insert_secret, post};
use super::provider::{
    AnswerShape, ChatProvider, ChatStream, Deployment, JsonSchemaForm, MessagesApi, StreamAsk,
};
use super::rules::{integer_param, native_body_decline, number_param, stop_param};
use super::turns::{BlockWriters, Turns};
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::{ChatRequest, Content, ContentPart, Decline, DeclineCode};
use crate::wire::body::Node;
use crate::wire::media::parse_data_url;

/// LiteLLM's fallback when the model map has no output limit (Anthropic requires `max_tokens`).
pub const DEFAULT_MAX_TOKENS: i64 = 4096;

/// Mapped like LiteLLM's `AnthropicConfig` (`stop` -> `stop_sequences`).
pub const PARAMS: &[&str] = &[
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
];

pub struct Anthropic;

impl ChatProvider for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn params(&self) -> &'static [&'static str] {
        PARAMS
    }

    fn build_request(
        &self,
        deployment: &Deployment,
        request: &ChatRequest,
    ) -> Result<UpstreamRequest, Refusal> {
        build_request(deployment, request)
    }

    fn parse_response(
        &self,
        deployment: &Deployment,
        body: Value,
    ) -> Result<Value, TransformError> {
        parse_response(deployment, body)
    }

    fn answer_shape(&self) -> AnswerShape {
        AnswerShape::Converted
    }

    /// `output_format` for models with native structured output, a forced tool for others.
    fn json_schema(&self) -> JsonSchemaForm {
        JsonSchemaForm::PerModel
    }

    fn chat_stream(&self, model: String, options: StreamOptions) -> Option<ChatStream> {
        Some(ChatStream {
            transform: Box::new(stream::AnthropicStream::new(model, options)),
            // LiteLLM never sends `stream_options` to Anthropic.
            asked_by: StreamAsk::Body {
                forward_options: false,
            },
        })
    }

    fn messages_api(&self) -> Option<MessagesApi> {
        Some(MessagesApi::Anthropic)
    }
}

const BLOCKS: BlockWriters = BlockWriters {
    content: content_blocks,
    tool_result: tools::tool_result_block,
    tool_uses: tools::tool_use_blocks,
};

fn build_request(
    deployment: &Deployment,
    request: &ChatRequest,
) -> Result<UpstreamRequest, Refusal> {
    let params = &request.params;
    if let Some(decline) = native_body_decline(&request.messages) {
        return Err(decline.into());
    }
    let tool_fields = tools::tool_fields(params, &request.messages)?;
    let structured = tool_fields.iter().any(|(name, _)| name == "output_format");
    let turns = Turns::new(&request.messages, &BLOCKS)?;

    // LiteLLM maps `max_completion_tokens` after `max_tokens`, so it wins when both are set.
    let max_tokens = integer_param(params, "max_completion_tokens")?
        .or(integer_param(params, "max_tokens")?)
        .or(deployment.default_max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    let mut fields: Vec<(String, Node)> =
        vec![("model".into(), Node::from(deployment.model.as_str()))];
    turns.push_into(&mut fields);
    fields.push(("max_tokens".into(), Node::Value(json!(max_tokens))));
    for name in ["temperature", "top_p"] {
        if let Some(value) = number_param(params, name)? {
            fields.push((name.into(), Node::Value(value)));
        }
    }
    if let Some(stop) = stop_param(params)? {
        fields.push(("stop_sequences".into(), Node::Value(json!(stop))));
    }
    fields.extend(tool_fields);

    let base = deployment
        .api_base
        .as_deref()
        .unwrap_or(endpoint::DEFAULT_API_BASE);
    let url = endpoint::messages_url(base.trim_end_matches('/'));
    let mut headers = headers(&[
        ("accept", "application/json"),
        ("content-type", "application/json"),
        ("anthropic-version", endpoint::API_VERSION),
    ])?;
    if let Some(key) = &deployment.api_key {
        insert_secret(&mut headers, "x-api-key", key)?;
    }
    if structured {
        let (name, value) = header("anthropic-beta", tools::STRUCTURED_OUTPUTS_BETA)?;
        headers.insert(name, value);
    }
    let body = RequestBody::Document(Node::Object(fields));
    Ok(post(url, headers, body, deployment.timeout))
}

fn text_block(text: &bytes::Bytes) -> Result<Node, TransformError> {
    Ok(Node::object([
        ("type", Node::from("text")),
        ("text", Node::Str(text.clone())),
    ]))
}

/// A message's content blocks (images only reach here from user turns: see
/// `native_body_decline`).
fn content_blocks(content: &Content) -> Result<Vec<Node>, Refusal> {
    let parts = match content {
        Content::Text(text) => return Ok(vec![text_block(text)?]),
        Content::Parts(parts) => parts,
        // Tool-calling turns are declined before (`native_body_decline`).
        Content::Absent => {
            return Err(Decline::new(DeclineCode::MessageWithoutContent, "no content").into());
        }
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            ContentPart::Text(text) => blocks.push(text_block(text)?),
            ContentPart::Image(image) => {
                // LiteLLM downloads http(s) images for Anthropic; that I/O stays in Python.
                if !image.url.starts_with(b"data:") {
                    return Err(
                        Decline::new(DeclineCode::ImageUrlRemote, "non-data image URL").into(),
                    );
                }
                let data_url = parse_data_url(&image.url)?;
                blocks.push(Node::object([
                    ("type", Node::from("image")),
                    (
                        "source",
                        Node::object([
                            ("type", Node::from("base64")),
                            ("media_type", Node::from(data_url.media_type)),
                            ("data", Node::Base64Text(data_url.data)),
                        ]),
                    ),
                ]));
            }
        }
    }
    Ok(blocks)
}

pub fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

fn parse_response(deployment: &Deployment, body: Value) -> Result<Value, TransformError> {
    let invalid = |why: &str| TransformError::InvalidResponse(why.to_string());
    let Value::Object(body) = body else {
        return Err(invalid("expected a JSON object"));
    };
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("missing 'content'"))?;
    let tool_calls = tools::answer_tool_calls(blocks);
    let mut text = String::new();
    let mut saw_text = false;
    for block in blocks {
        if block.get("type").and_then(Value::as_str) == Some("text") {
            saw_text = true;
            let part = block
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("a text block without a string 'text'"))?;
            text.push_str(part);
        }
    }
    // LiteLLM reads both unconditionally: without them the call fails (no zero-cost answers).
    let usage = body
        .get("usage")
        .filter(|usage| usage.is_object())
        .ok_or_else(|| invalid("missing 'usage'"))?;
    let stop_reason = body
        .get("stop_reason")
        .ok_or_else(|| invalid("missing 'stop_reason'"))?;
    let finish = finish_reason(stop_reason.as_str());
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        // LiteLLM: the joined text, but no empty text next to tool calls.
        if saw_text && (!text.is_empty() || tool_calls.is_empty()) {
            json!(text)
        } else {
            Value::Null
        },
    );
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    message.insert(
        "provider_specific_fields".into(),
        json!({"citations": null, "thinking_blocks": null}),
    );
    // LiteLLM keeps its own `chatcmpl-` id rather than Anthropic's `msg_` id.
    Ok(json!({
        "object": "chat.completion",
        "model": body.get("model").and_then(Value::as_str).unwrap_or(&deployment.model),
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": convert_usage(usage),
    }))
}

/// Anthropic usage -> OpenAI usage: cached and cache-creation input counts as prompt tokens.
pub fn convert_usage(usage: &Value) -> Value {
    let count = |key: &str| usage.get(key).and_then(Value::as_i64).unwrap_or(0);
    let input = count("input_tokens");
    let output = count("output_tokens");
    let cache_read = count("cache_read_input_tokens");
    let cache_creation = count("cache_creation_input_tokens");
    let prompt = input + cache_read + cache_creation;
    // Text fields LiteLLM copies from Anthropic's usage when they are strings.
    let text = |key: &str| usage.get(key).filter(|value| value.is_string()).cloned();
    let mut prompt_details = json!({
        "audio_tokens": null,
        "image_tokens": null,
        "video_tokens": null,
        "cache_write_tokens": cache_creation,
        "cached_tokens": cache_read,
        "text_tokens": input,
        "cache_creation_tokens": cache_creation,
    });
    // The cache writes by TTL (`_resolve_cache_creation_token_details`); they price differently.
    if let Some(split) = usage.get("cache_creation").and_then(Value::as_object) {
        let tokens = |key: &str| split.get(key).cloned().unwrap_or(Value::Null);
        prompt_details["cache_creation_token_details"] = json!({
            "ephemeral_5m_input_tokens": tokens("ephemeral_5m_input_tokens"),
            "ephemeral_1h_input_tokens": tokens("ephemeral_1h_input_tokens"),
        });
    }
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "completion_tokens_details": {"reasoning_tokens": 0, "text_tokens": output},
        "prompt_tokens_details": prompt_details,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "iterations": null,
        "inference_geo": text("inference_geo"),
        "speed": text("speed"),
        "service_tier": usage.get("service_tier").cloned().unwrap_or(Value::Null),
    })
}
