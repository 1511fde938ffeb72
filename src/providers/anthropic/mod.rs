//! Anthropic Messages: chat.completions -> /v1/messages and back.

pub mod endpoint;
pub mod stream;
pub mod tools;

use serde_json::{Map, Value, json};

use super::error::{Refusal, TransformError};
use super::parts::{header, headers, insert_secret, post};
use super::provider::Deployment;
use super::rules::{integer_param, number_param, stop_param};
use super::turns::{BlockWriters, Turns};
use super::usage::{TokenCounts, converted_usage};
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::ChatRequest;
use crate::wire::body::Node;

/// LiteLLM's fallback when the model map has no output limit (Anthropic requires `max_tokens`).
pub const DEFAULT_MAX_TOKENS: i64 = 4096;

pub fn build_request(
    deployment: &Deployment,
    request: &ChatRequest,
) -> Result<UpstreamRequest, Refusal> {
    let params = &request.params;
    let (tool_fields, turns) = Turns::checked(&request.messages, &BLOCKS, || {
        tools::tool_fields(params, &request.messages)
    })?;
    let structured = tool_fields.iter().any(|(name, _)| name == "output_format");

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

/// How this provider writes a turn's blocks.
const BLOCKS: BlockWriters = BlockWriters {
    text: |text| {
        Node::object([
            ("type", Node::from("text")),
            ("text", Node::Str(text.clone())),
        ])
    },
    image: |image| {
        Ok(Node::object([
            ("type", Node::from("image")),
            (
                "source",
                Node::object([
                    ("type", Node::from("base64")),
                    ("media_type", Node::from(image.media_type)),
                    ("data", Node::Base64Text(image.data)),
                ]),
            ),
        ]))
    },
    tool_result: tools::tool_result_block,
    tool_uses: tools::tool_use_blocks,
};

pub fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

pub fn parse_response(deployment: &Deployment, body: Value) -> Result<Value, TransformError> {
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
    let mut out = converted_usage(TokenCounts {
        input: count("input_tokens"),
        output: count("output_tokens"),
        cache_read: count("cache_read_input_tokens"),
        cache_write: count("cache_creation_input_tokens"),
        total: None,
    });
    // The cache writes by TTL (`_resolve_cache_creation_token_details`); they price differently.
    if let Some(split) = usage.get("cache_creation").and_then(Value::as_object) {
        let tokens = |key: &str| split.get(key).cloned().unwrap_or(Value::Null);
        out["prompt_tokens_details"]["cache_creation_token_details"] = json!({
            "ephemeral_5m_input_tokens": tokens("ephemeral_5m_input_tokens"),
            "ephemeral_1h_input_tokens": tokens("ephemeral_1h_input_tokens"),
        });
    }
    // Text fields LiteLLM copies from Anthropic's usage when they are strings.
    let text = |key: &str| {
        usage
            .get(key)
            .filter(|value| value.is_string())
            .cloned()
            .unwrap_or(Value::Null)
    };
    out["iterations"] = Value::Null;
    out["inference_geo"] = text("inference_geo");
    out["speed"] = text("speed");
    out["service_tier"] = usage.get("service_tier").cloned().unwrap_or(Value::Null);
    out
}
