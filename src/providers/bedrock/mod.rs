//! Bedrock Converse: chat.completions -> `POST {endpoint}/model/{id}/converse`, SigV4-signed.

pub mod embedding;
pub mod endpoint;
pub mod stream;
pub mod tools;
pub mod transcription;

use serde_json::{Map, Value, json};

use super::error::{Refusal, TransformError};
use super::provider::Deployment;
use super::rules::{integer_param, number_param, stop_param};
use super::turns::{BlockWriters, Turns};
use super::usage::{TokenCounts, converted_usage};
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::{ChatRequest, Decline, DeclineCode};
use crate::wire::body::Node;

pub fn build_request(
    deployment: &Deployment,
    request: &ChatRequest,
) -> Result<UpstreamRequest, Refusal> {
    let params = &request.params;
    // Images only reach the blocks from user turns (see `native_body_decline`).
    let (tool_config, turns) = Turns::checked(&request.messages, &BLOCKS, || {
        tools::tool_config(params, &request.messages)
    })?;

    let mut inference = Vec::new();
    // LiteLLM maps `max_completion_tokens` after `max_tokens`, so it wins when both are set.
    let max_tokens =
        integer_param(params, "max_completion_tokens")?.or(integer_param(params, "max_tokens")?);
    if let Some(limit) = max_tokens {
        inference.push(("maxTokens".to_string(), Node::Value(json!(limit))));
    }
    if let Some(value) = number_param(params, "temperature")? {
        inference.push(("temperature".to_string(), Node::Value(value)));
    }
    if let Some(value) = number_param(params, "top_p")? {
        inference.push(("topP".to_string(), Node::Value(value)));
    }
    if let Some(stop) = stop_param(params)? {
        inference.push(("stopSequences".to_string(), Node::Value(json!(stop))));
    }

    let mut fields = Vec::new();
    turns.push_into(&mut fields);
    fields.push(("inferenceConfig".into(), Node::Object(inference)));
    if let Some(config) = tool_config {
        fields.push(("toolConfig".into(), config));
    }
    Ok(endpoint::converse_request(
        deployment,
        RequestBody::Document(Node::Object(fields)),
    )?)
}

/// How this provider writes a turn's blocks.
const BLOCKS: BlockWriters = BlockWriters {
    text: |text| Node::object([("text", Node::Str(text.clone()))]),
    image: |image| {
        let format = image_format(&image.media_type)?;
        Ok(Node::object([(
            "image",
            Node::object([
                ("format", Node::from(format)),
                (
                    "source",
                    Node::object([("bytes", Node::Base64Text(image.data))]),
                ),
            ]),
        )]))
    },
    tool_result: tools::tool_result_block,
    tool_uses: tools::tool_use_blocks,
};

/// Bedrock's image format from the data URL's media type; LiteLLM ignores media type parameters
/// (`image/png;charset=utf-8`). Documents, videos and other types follow LiteLLM's own rules.
fn image_format(media_type: &str) -> Result<&'static str, Decline> {
    let essence = media_type.split(';').next().unwrap_or_default();
    match essence {
        "image/png" => Ok("png"),
        "image/jpeg" => Ok("jpeg"),
        "image/gif" => Ok("gif"),
        "image/webp" => Ok("webp"),
        _ => Err(Decline::new(
            DeclineCode::ImageType,
            "media type other than image/png, jpeg, gif or webp",
        )),
    }
}

pub fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens") | Some("length") => "length",
        Some("tool_use") => "tool_calls",
        Some("guardrail_intervened") | Some("content_filtered") | Some("refusal") => {
            "content_filter"
        }
        _ => "stop",
    }
}

/// Concatenated text of `output.message.content[*].text` (a block's `text`, when present, must
/// be a string: LiteLLM fails the call otherwise).
pub fn output_text(body: &Value) -> Result<String, TransformError> {
    let invalid = |why: &str| TransformError::InvalidResponse(why.to_string());
    let blocks = body
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("missing 'output.message.content'"))?;
    let mut text = String::new();
    for block in blocks {
        match block.get("text") {
            None => {}
            Some(Value::String(part)) => text.push_str(part),
            Some(_) => return Err(invalid("a content block's 'text' is not a string")),
        }
    }
    Ok(text)
}

pub fn parse_response(deployment: &Deployment, body: Value) -> Result<Value, TransformError> {
    let invalid = |why: &str| TransformError::InvalidResponse(why.to_string());
    let text = output_text(&body)?;
    // LiteLLM reads both unconditionally: without them the call fails (no zero-cost answers).
    let usage = body
        .get("usage")
        .filter(|usage| usage.is_object())
        .ok_or_else(|| invalid("missing 'usage'"))?;
    let stop_reason = body
        .get("stopReason")
        .ok_or_else(|| invalid("missing 'stopReason'"))?;
    let blocks = body
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let (text, tool_calls, finish) = tools::json_mode_answer(
        text,
        tools::answer_tool_calls(blocks),
        finish_reason(stop_reason.as_str()),
    );
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), json!(text));
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    Ok(json!({
        "object": "chat.completion",
        "model": deployment.model,
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": convert_usage(usage),
    }))
}

/// Converse usage -> OpenAI usage.
pub fn convert_usage(usage: &Value) -> Value {
    let count = |key: &str| usage.get(key).and_then(Value::as_i64).unwrap_or(0);
    converted_usage(TokenCounts {
        input: count("inputTokens"),
        output: count("outputTokens"),
        cache_read: count("cacheReadInputTokens"),
        cache_write: count("cacheWriteInputTokens"),
        // LiteLLM reports Bedrock's own total, which excludes cache tokens.
        total: usage.get("totalTokens").and_then(Value::as_i64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_follow_litellm() {
        assert_eq!(finish_reason(Some("end_turn")), "stop");
        assert_eq!(finish_reason(Some("max_tokens")), "length");
        assert_eq!(
            finish_reason(Some("guardrail_intervened")),
            "content_filter"
        );
        assert_eq!(finish_reason(Some("tool_use")), "tool_calls");
    }
}
