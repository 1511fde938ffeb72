//! Bedrock transcription: a Converse call with an audio block and a text instruction.

use bytes::Bytes;
use serde_json::{Value, json};

use super::endpoint::converse_request;
use super::output_text;
use crate::http::{RequestBody, UpstreamRequest};
use crate::providers::error::TransformError;
use crate::providers::parts::json_object;
use crate::providers::provider::Deployment;
use crate::wire::body::Node;

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
    /// A number, or the string a proxy form field carries (LiteLLM forwards it as given).
    pub temperature: Option<Value>,
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
        Audio::Base64(encoded) => Node::Base64Text(encoded.clone()),
    };
    let instruction =
        transcription_instruction(request.language.as_deref(), request.prompt.as_deref());
    let mut inference = vec![("maxTokens".to_string(), Node::Value(json!(4096)))];
    if let Some(temperature) = &request.temperature {
        inference.push(("temperature".to_string(), Node::Value(temperature.clone())));
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
    converse_request(deployment, RequestBody::Document(body))
}

/// A Converse call whose JSON body the caller already built (benchmarks comparing builders).
#[cfg(feature = "bench")]
pub fn prebuilt_request(
    deployment: &Deployment,
    body: Bytes,
) -> Result<UpstreamRequest, TransformError> {
    converse_request(
        deployment,
        RequestBody::Json(crate::wire::body::JsonBody::from_raw_json(body)),
    )
}

/// Converse answer -> `{"text": ...}`: the concatenated text blocks.
pub fn parse_transcription(body: &Bytes) -> Result<Value, TransformError> {
    let parsed = json_object(body)?;
    Ok(json!({ "text": output_text(&parsed)? }))
}
