//! Bedrock Converse: chat.completions -> `POST {endpoint}/model/{id}/converse`, SigV4-signed.

pub mod embedding;
pub mod endpoint;
pub mod stream;
pub mod tools;
pub mod transcription;

use serde_json::{Map, Value, json};

use super::chunks::StreamOptions;
use super::embedding::EmbeddingCall;
use super::error::{Refusal, TransformError};
use super::provider::{
    AnswerShape, ChatProvider, ChatStream, Credentials, Deployment, JsonSchemaForm, MessagesApi,
    StreamAsk,
};
use super::rules::{integer_param, native_body_decline, number_param, stop_param};
use super::turns::{BlockWriters, Turns};
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::{ChatRequest, Content, ContentPart, Decline, DeclineCode, EmbeddingRequest};
use crate::wire::body::Node;
use crate::wire::media::parse_data_url;

/// Mapped into `inferenceConfig` and `toolConfig` like LiteLLM's `AmazonConverseConfig`.
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

pub struct Bedrock;

impl ChatProvider for Bedrock {
    fn name(&self) -> &'static str {
        "bedrock"
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

    /// A native output format for some models, LiteLLM's forced `json_tool_call` for others.
    fn json_schema(&self) -> JsonSchemaForm {
        JsonSchemaForm::PerModel
    }

    fn credentials(&self) -> Credentials {
        Credentials::Aws
    }

    fn chat_stream(&self, model: String, options: StreamOptions) -> Option<ChatStream> {
        Some(ChatStream {
            transform: Box::new(stream::BedrockStream::new(model, options)),
            // The `converse` body to `converse-stream`; LiteLLM never puts `stream` into it.
            asked_by: StreamAsk::UrlSuffix("-stream"),
        })
    }

    fn embeddings(
        &self,
        deployment: &Deployment,
        request: &EmbeddingRequest,
    ) -> Result<EmbeddingCall, Refusal> {
        embedding::build(deployment, request)
    }

    fn messages_api(&self) -> Option<MessagesApi> {
        Some(MessagesApi::BedrockInvoke)
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
    let tool_config = tools::tool_config(params, &request.messages)?;
    // Images only reach the blocks from user turns (see `native_body_decline`).
    let turns = Turns::new(&request.messages, &BLOCKS)?;

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

fn text_block(text: &bytes::Bytes) -> Result<Node, TransformError> {
    Ok(Node::object([("text", Node::Str(text.clone()))]))
}

fn content_blocks(content: &Content) -> Result<Vec<Node>, Refusal> {
    let parts = match content {
        Content::Text(text) => return Ok(vec![text_block(text)?]),
        Content::Parts(parts) => parts,
        // Tool-calling turns are declined before (`native_body_decline`).
        Content::Absent => {
            return Err(Decline::new(DeclineCode::MessageWithoutContent, "no content").into());
        }
    };
    parts
        .iter()
        .map(|part| match part {
            ContentPart::Text(text) => Ok(text_block(text)?),
            ContentPart::Image(image) => {
                // LiteLLM downloads http(s) images for Bedrock; that I/O stays in Python.
                if !image.url.starts_with(b"data:") {
                    return Err(
                        Decline::new(DeclineCode::ImageUrlRemote, "non-data image URL").into(),
                    );
                }
                let data_url = parse_data_url(&image.url)?;
                let format = image_format(&data_url.media_type)?;
                Ok(Node::object([(
                    "image",
                    Node::object([
                        ("format", Node::from(format)),
                        (
                            "source",
                            Node::object([("bytes", Node::Base64Text(data_url.data))]),
                        ),
                    ]),
                )]))
            }
        })
        .collect()
}

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

fn parse_response(deployment: &Deployment, body: Value) -> Result<Value, TransformError> {
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

/// Converse usage -> OpenAI usage: cache reads and writes count as prompt tokens.
pub fn convert_usage(usage: &Value) -> Value {
    let count = |key: &str| usage.get(key).and_then(Value::as_i64).unwrap_or(0);
    let input = count("inputTokens");
    let output = count("outputTokens");
    let cache_read = count("cacheReadInputTokens");
    let cache_write = count("cacheWriteInputTokens");
    let prompt = input + cache_read + cache_write;
    // LiteLLM reports Bedrock's own total, which excludes cache tokens.
    let total = usage
        .get("totalTokens")
        .and_then(Value::as_i64)
        .unwrap_or(prompt + output);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": total,
        "completion_tokens_details": {"reasoning_tokens": 0, "text_tokens": output},
        "prompt_tokens_details": {
            "audio_tokens": null,
            "image_tokens": null,
            "video_tokens": null,
            "cache_write_tokens": cache_write,
            "cached_tokens": cache_read,
            "text_tokens": input,
            "cache_creation_tokens": cache_write,
        },
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
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
