//! Bedrock Converse: chat.completions -> `POST {endpoint}/model/{id}/converse`, SigV4-signed.

use bytes::Bytes;
use http::HeaderMap;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value, json};

use super::{
    AwsSettings, Deployment, Prepared, SigV4, TransformError, UpstreamRequest, header,
    parse_data_url,
};
use crate::body::{JsonBody, Node};
use crate::chat::{
    ChatRequest, Content, ContentPart, Decline, Role, integer_param, number_param, stop_param,
};

/// Characters kept as-is in the model id path segment (Python's `quote(model_id, safe="")`).
const MODEL_ID_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

pub fn endpoint(aws: &AwsSettings) -> String {
    match &aws.endpoint {
        Some(endpoint) => endpoint.trim_end_matches('/').to_string(),
        None => format!("https://bedrock-runtime.{}.amazonaws.com", aws.region),
    }
}

pub fn converse_url(aws: &AwsSettings, model_id: &str) -> String {
    format!(
        "{}/model/{}/converse",
        endpoint(aws),
        utf8_percent_encode(model_id, MODEL_ID_KEEP)
    )
}

/// Headers and signing plan shared by every Converse call (chat and transcription).
pub fn converse_request(
    deployment: &Deployment,
    body: JsonBody,
) -> Result<UpstreamRequest, TransformError> {
    let aws = deployment.aws.as_ref().ok_or_else(|| {
        TransformError::InvalidRequest("bedrock deployment without AWS settings".into())
    })?;
    let mut headers = HeaderMap::new();
    let (name, value) = header("content-type", "application/json")?;
    headers.insert(name, value);
    Ok(UpstreamRequest {
        url: converse_url(aws, &deployment.model),
        headers,
        body,
        timeout: deployment.timeout,
        sigv4: Some(SigV4 {
            credentials: aws.credentials.clone(),
            region: aws.region.clone(),
            service: "bedrock",
        }),
    })
}

pub fn build_request(
    deployment: &Deployment,
    request: &ChatRequest,
) -> Result<Prepared, TransformError> {
    let invalid = TransformError::InvalidRequest;
    let params = &request.params;

    let mut system = Vec::new();
    let mut turns: Vec<(Role, Vec<Node>)> = Vec::new();
    for message in &request.messages {
        if message.role.is_instruction() {
            for block in content_blocks(&message.content)? {
                match block {
                    Block::Text(node) => system.push(node),
                    Block::Image(_) => {
                        return Ok(Err(Decline::new(
                            "system_image",
                            "image in a system message",
                        )));
                    }
                }
            }
            continue;
        }
        let blocks = content_blocks(&message.content)?
            .into_iter()
            .map(Block::into_node)
            .collect::<Vec<_>>();
        // Converse needs alternating roles; LiteLLM merges consecutive same-role turns.
        match turns.last_mut() {
            Some((role, existing)) if *role == message.role => existing.extend(blocks),
            _ => turns.push((message.role, blocks)),
        }
    }

    let mut inference = Vec::new();
    let max_tokens = match integer_param(params, "max_tokens").map_err(invalid)? {
        Some(limit) => Some(limit),
        None => integer_param(params, "max_completion_tokens").map_err(invalid)?,
    };
    if let Some(limit) = max_tokens {
        inference.push(("maxTokens".to_string(), Node::Value(json!(limit))));
    }
    if let Some(value) = number_param(params, "temperature").map_err(invalid)? {
        inference.push(("temperature".to_string(), Node::Value(value)));
    }
    if let Some(value) = number_param(params, "top_p").map_err(invalid)? {
        inference.push(("topP".to_string(), Node::Value(value)));
    }
    if let Some(stop) = stop_param(params).map_err(invalid)? {
        inference.push(("stopSequences".to_string(), Node::Value(json!(stop))));
    }

    let mut fields: Vec<(String, Node)> = vec![(
        "messages".into(),
        Node::Array(
            turns
                .into_iter()
                .map(|(role, blocks)| {
                    Node::object([
                        ("role", Node::from(role.as_str())),
                        ("content", Node::Array(blocks)),
                    ])
                })
                .collect(),
        ),
    )];
    if !system.is_empty() {
        fields.push(("system".into(), Node::Array(system)));
    }
    fields.push(("inferenceConfig".into(), Node::Object(inference)));
    converse_request(deployment, JsonBody::from_node(&Node::Object(fields))).map(Ok)
}

enum Block {
    Text(Node),
    Image(Node),
}

impl Block {
    fn into_node(self) -> Node {
        match self {
            Block::Text(node) | Block::Image(node) => node,
        }
    }
}

fn text_block(text: &bytes::Bytes) -> Result<Node, TransformError> {
    Ok(Node::object([("text", Node::str_utf8(text.clone())?)]))
}

fn content_blocks(content: &Content) -> Result<Vec<Block>, TransformError> {
    let parts = match content {
        Content::Text(text) => return Ok(vec![Block::Text(text_block(text)?)]),
        Content::Parts(parts) => parts,
    };
    parts
        .iter()
        .map(|part| match part {
            ContentPart::Text(text) => Ok(Block::Text(text_block(text)?)),
            ContentPart::Image(image) => {
                let data_url = parse_data_url(&image.url)?;
                let format = image_format(&data_url.media_type)?;
                Ok(Block::Image(Node::object([(
                    "image",
                    Node::object([
                        ("format", Node::from(format)),
                        (
                            "source",
                            Node::object([("bytes", Node::str_utf8(data_url.data)?)]),
                        ),
                    ]),
                )])))
            }
        })
        .collect()
}

fn image_format(media_type: &str) -> Result<&'static str, TransformError> {
    match media_type {
        "image/png" => Ok("png"),
        "image/jpeg" | "image/jpg" => Ok("jpeg"),
        "image/gif" => Ok("gif"),
        "image/webp" => Ok("webp"),
        other => Err(TransformError::InvalidRequest(format!(
            "unsupported image type {other:?} for Bedrock (png, jpeg, gif, webp)"
        ))),
    }
}

/// Audio for a transcription: raw bytes (encoded while sending) or existing base64 text.
#[derive(Clone, Debug)]
pub enum Audio {
    Raw(Bytes),
    Base64(Bytes),
}

/// The formats Bedrock's Converse audio block accepts.
pub const AUDIO_FORMATS: [&str; 4] = ["wav", "mp3", "flac", "ogg"];

/// What a transcription asks the model for.
#[derive(Clone, Debug)]
pub struct TranscriptionRequest {
    pub audio: Audio,
    pub format: String,
    pub language: Option<String>,
    pub prompt: Option<String>,
    pub temperature: Option<f64>,
}

/// LiteLLM's instruction text, plus the language when given.
pub fn transcription_instruction(language: Option<&str>, prompt: Option<&str>) -> String {
    let mut text = String::from("Transcribe the audio.");
    if let Some(language) = language.filter(|l| !l.is_empty()) {
        text.push_str(&format!(" The spoken language is {language}."));
    }
    text.push_str(" Respond with only the transcript.");
    if let Some(prompt) = prompt.filter(|p| !p.is_empty()) {
        text.push_str(&format!(" Additional context: {prompt}"));
    }
    text
}

/// Converse with an audio block and a text instruction. No `system` block: Voxtral rejects a
/// system message next to audio.
pub fn build_transcription(
    deployment: &Deployment,
    request: &TranscriptionRequest,
) -> Result<UpstreamRequest, TransformError> {
    if !AUDIO_FORMATS.contains(&request.format.as_str()) {
        return Err(TransformError::InvalidRequest(format!(
            "unsupported Bedrock audio format {:?} (wav, mp3, flac, ogg)",
            request.format
        )));
    }
    let audio_bytes = match &request.audio {
        Audio::Raw(raw) => Node::Base64(raw.clone()),
        Audio::Base64(encoded) => {
            super::check_base64(encoded)?;
            Node::str_utf8(encoded.clone())?
        }
    };
    let instruction =
        transcription_instruction(request.language.as_deref(), request.prompt.as_deref());
    let mut inference = vec![("maxTokens".to_string(), Node::Value(json!(4096)))];
    if let Some(temperature) = request.temperature {
        inference.push(("temperature".to_string(), Node::Value(json!(temperature))));
    }
    let body = Node::object([
        (
            "messages",
            Node::Array(vec![Node::object([
                ("role", Node::from("user")),
                (
                    "content",
                    Node::Array(vec![
                        Node::object([(
                            "audio",
                            Node::object([
                                ("format", Node::from(request.format.as_str())),
                                ("source", Node::object([("bytes", audio_bytes)])),
                            ]),
                        )]),
                        Node::object([("text", Node::from(instruction))]),
                    ]),
                ),
            ])]),
        ),
        ("inferenceConfig", Node::Object(inference)),
    ]);
    converse_request(deployment, JsonBody::from_node(&body))
}

/// A Converse call whose JSON body the caller already built (tools and benchmarks).
pub fn prebuilt_request(
    deployment: &Deployment,
    body: Bytes,
) -> Result<UpstreamRequest, TransformError> {
    converse_request(deployment, JsonBody::from_raw_json(body))
}

/// Converse answer -> `{"text": ...}`: the concatenated text blocks.
pub fn parse_transcription(body: &Bytes) -> Result<Value, TransformError> {
    let parsed: Value = serde_json::from_slice(body)
        .map_err(|err| TransformError::InvalidResponse(format!("not JSON ({err})")))?;
    Ok(json!({ "text": output_text(&parsed)? }))
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

/// Concatenated text of `output.message.content[*].text`.
pub fn output_text(body: &Value) -> Result<String, TransformError> {
    let blocks = body
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            TransformError::InvalidResponse("missing 'output.message.content'".into())
        })?;
    Ok(blocks
        .iter()
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect())
}

pub fn parse_response(deployment: &Deployment, body: Value) -> Result<Value, TransformError> {
    let text = output_text(&body)?;
    let finish = finish_reason(body.get("stopReason").and_then(Value::as_str));
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), json!(text));
    Ok(json!({
        "object": "chat.completion",
        "model": deployment.model,
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": convert_usage(body.get("usage").unwrap_or(&Value::Null)),
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
    use crate::signing::AwsCredentials;

    #[test]
    fn model_id_is_encoded_like_python_quote() {
        let aws = AwsSettings {
            credentials: AwsCredentials {
                access_key_id: "AKID".into(),
                secret_access_key: "secret".into(),
                session_token: None,
            },
            region: "us-west-2".into(),
            endpoint: None,
        };
        assert_eq!(
            converse_url(&aws, "anthropic.claude-3-5-sonnet-20240620-v1:0"),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
        );
    }

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
