//! A streamed `/v1/messages` answer.
//!
//! - Anthropic: LiteLLM relays the provider's bytes as they arrive, unchanged, so
//!   [`AnthropicPassthrough`] forwards every read as is ([`StreamTransform::forwards_raw`]) and
//!   only watches the events go by.
//! - Bedrock Invoke: [`BedrockInvokeStream`] decodes the AWS event stream and writes each event
//!   as the SSE LiteLLM writes (`json.dumps` layout), with LiteLLM's usage rewrites.
//!
//! Both keep what LiteLLM's end-of-stream logging needs, in little memory: a transcript of the
//! stream with every run of one block's deltas merged into one delta (pings left out). LiteLLM's
//! own logging handler parses that transcript exactly as it would parse the whole stream, so
//! usage, cost and the logged response are LiteLLM's.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::providers::error::TransformError;
use crate::providers::provider::MessagesApi;
use crate::providers::stream::{Flow, Framing, StreamError, StreamTransform};
use crate::wire::eventstream::EXCEPTION_PREFIX;
use crate::wire::pyjson::python_json;
use crate::wire::sse::SseEvent;

/// LiteLLM's words for a Bedrock stream that ended without `message_stop` or an error event.
const INCOMPLETE_STREAM_MESSAGE: &str = "Provider stream ended before emitting a message_stop \
    event; the response is incomplete and any partial content (e.g. tool_use input JSON) may be \
    truncated.";

/// The string field each delta type carries (its pieces are concatenated when merged).
fn delta_text_field(kind: &str) -> Option<&'static str> {
    match kind {
        "text_delta" => Some("text"),
        "input_json_delta" => Some("partial_json"),
        "thinking_delta" => Some("thinking"),
        "signature_delta" => Some("signature"),
        _ => None,
    }
}

/// A run of deltas of one kind for one block, merged.
struct PendingDelta {
    index: Value,
    kind: String,
    field: &'static str,
    text: String,
}

/// The stream as LiteLLM's logging needs it: events in order, runs of deltas merged.
#[derive(Default)]
struct Transcript {
    text: String,
    pending: Option<PendingDelta>,
}

impl Transcript {
    fn add(&mut self, name: &str, data: &str) {
        if name == "ping" {
            return;
        }
        if name == "content_block_delta" && self.merge(data) {
            return;
        }
        self.flush();
        self.push(name, data);
    }

    fn finish(&mut self) -> Value {
        self.flush();
        Value::String(std::mem::take(&mut self.text))
    }

    fn flush(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let mut delta = Map::new();
        delta.insert("type".into(), Value::from(pending.kind));
        delta.insert(pending.field.into(), Value::from(pending.text));
        let mut event = Map::new();
        event.insert("type".into(), Value::from("content_block_delta"));
        event.insert("index".into(), pending.index);
        event.insert("delta".into(), Value::Object(delta));
        self.push("content_block_delta", &Value::Object(event).to_string());
    }

    fn push(&mut self, name: &str, data: &str) {
        self.text.push_str("event: ");
        self.text.push_str(name);
        self.text.push_str("\ndata: ");
        self.text.push_str(data);
        self.text.push_str("\n\n");
    }

    /// Adds a delta to the current run when it continues it; false when it does not merge.
    fn merge(&mut self, data: &str) -> bool {
        let Ok(Value::Object(event)) = serde_json::from_str::<Value>(data) else {
            return false;
        };
        let (Some(index), Some(delta)) = (event.get("index"), event.get("delta")) else {
            return false;
        };
        let Some(kind) = delta.get("type").and_then(Value::as_str) else {
            return false;
        };
        let Some(field) = delta_text_field(kind) else {
            return false;
        };
        let Some(piece) = delta.get(field).and_then(Value::as_str) else {
            return false;
        };
        if event.len() != 3 || delta.as_object().is_none_or(|d| d.len() != 2) {
            return false;
        }
        match &mut self.pending {
            Some(pending) if pending.index == *index && pending.kind == kind => {
                pending.text.push_str(piece);
            }
            _ => {
                self.flush();
                self.pending = Some(PendingDelta {
                    index: index.clone(),
                    kind: kind.to_string(),
                    field,
                    text: piece.to_string(),
                });
            }
        }
        true
    }
}

/// The transform of a `/v1/messages` stream from `api`.
pub fn transform(api: MessagesApi) -> Box<dyn StreamTransform> {
    match api {
        MessagesApi::Anthropic => Box::new(AnthropicPassthrough::new()),
        MessagesApi::BedrockInvoke => Box::new(BedrockInvokeStream::new()),
    }
}

/// Anthropic's bytes, relayed as they are.
#[derive(Default)]
pub struct AnthropicPassthrough {
    transcript: Transcript,
}

impl AnthropicPassthrough {
    pub fn new() -> Self {
        Self::default()
    }
}

impl StreamTransform for AnthropicPassthrough {
    fn event(&mut self, event: SseEvent, _out: &mut Vec<Value>) -> Result<Flow, StreamError> {
        let name = event.event.as_deref().unwrap_or("message");
        self.transcript
            .add(name, &String::from_utf8_lossy(&event.data));
        // LiteLLM relays to the end of the body, whatever comes after `message_stop`.
        Ok(Flow::More)
    }

    fn finish(&mut self, _out: &mut Vec<Value>) -> Result<Value, StreamError> {
        Ok(self.transcript.finish())
    }

    fn saw_finish(&self) -> bool {
        false
    }

    fn forwards_raw(&self) -> bool {
        true
    }
}

/// Bedrock Invoke's event stream as LiteLLM's `AmazonAnthropicClaudeMessagesStreamDecoder`
/// and `bedrock_sse_wrapper` turn it into Anthropic SSE:
/// - each `chunk` event's base64 `bytes` is an Anthropic event; `amazon-bedrock-invocationMetrics`
///   becomes `usage` (the event's own usage winning, key by key);
/// - `message_delta` is held until the next event: at `message_stop` it takes that event's cache
///   counts and `input_tokens`, and cache counts it still lacks come from `message_start`;
/// - every event is written as `event: {type}\ndata: {json.dumps(event)}\n\n`;
/// - a stream that ends without `message_stop` or an error event gets LiteLLM's error event;
/// - an exception frame fails the stream after the events before it.
#[derive(Default)]
pub struct BedrockInvokeStream {
    transcript: Transcript,
    held_delta: Option<Map<String, Value>>,
    start_usage: Option<Map<String, Value>>,
    saw_terminal: bool,
}

const CACHE_FIELDS: [&str; 2] = ["cache_creation_input_tokens", "cache_read_input_tokens"];

impl BedrockInvokeStream {
    pub fn new() -> Self {
        Self::default()
    }

    fn emit(&mut self, event: Map<String, Value>, out: &mut Vec<Value>) {
        let kind = match event.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            Some(other) => python_json(other),
            None => "message".to_string(),
        };
        if kind == "message_stop" || kind == "error" {
            self.saw_terminal = true;
        }
        let event = Value::Object(event);
        self.transcript.add(&kind, &python_json(&event));
        out.push(event);
    }

    fn merge_start_cache(&self, usage: &mut Map<String, Value>) {
        let Some(start) = &self.start_usage else {
            return;
        };
        for field in CACHE_FIELDS.iter().chain(["cache_creation"].iter()) {
            if !usage.contains_key(*field)
                && let Some(value) = start.get(*field).filter(|v| !v.is_null())
            {
                usage.insert((*field).to_string(), value.clone());
            }
        }
    }

    fn release_delta(&mut self, out: &mut Vec<Value>) {
        if let Some(delta) = self.held_delta.take() {
            self.emit(delta, out);
        }
    }

    fn chunk(&mut self, mut event: Map<String, Value>, out: &mut Vec<Value>) {
        if let Some(Value::Object(metrics)) = event.remove("amazon-bedrock-invocationMetrics")
            && !metrics.is_empty()
        {
            let mut usage = Map::new();
            for (key, metric) in [
                ("input_tokens", "inputTokenCount"),
                ("output_tokens", "outputTokenCount"),
                ("cache_read_input_tokens", "cacheReadInputTokenCount"),
                ("cache_creation_input_tokens", "cacheWriteInputTokenCount"),
            ] {
                if let Some(value) = metrics.get(metric) {
                    usage.insert(key.into(), value.clone());
                }
            }
            if let Some(Value::Object(own)) = event.get("usage") {
                for (key, value) in own {
                    usage.insert(key.clone(), value.clone());
                }
            }
            event.insert("usage".into(), Value::Object(usage));
        }
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(Value::Object(usage)) =
                    event.get("message").and_then(|m| m.get("usage"))
                {
                    self.start_usage = Some(usage.clone());
                }
                self.release_delta(out);
                self.emit(event, out);
            }
            Some("message_delta") => self.held_delta = Some(event),
            Some("message_stop") if self.held_delta.is_some() => {
                let mut delta = self.held_delta.take().unwrap_or_default();
                let stop_usage = event.get("usage").and_then(Value::as_object);
                let mut usage = delta
                    .get("usage")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                if let Some(stop_usage) = stop_usage {
                    for field in CACHE_FIELDS {
                        if let Some(value) = stop_usage.get(field) {
                            usage.insert(field.into(), value.clone());
                        }
                    }
                    if let Some(input) = stop_usage.get("input_tokens").filter(|v| !v.is_null()) {
                        let input = if input.is_i64() || input.is_u64() {
                            input.clone()
                        } else {
                            json!(0)
                        };
                        usage.insert("input_tokens".into(), input);
                    }
                }
                self.merge_start_cache(&mut usage);
                if !usage.is_empty() {
                    delta.insert("usage".into(), Value::Object(usage));
                }
                self.emit(delta, out);
                self.emit(event, out);
            }
            _ => {
                self.release_delta(out);
                self.emit(event, out);
            }
        }
    }
}

impl StreamTransform for BedrockInvokeStream {
    fn event(&mut self, event: SseEvent, out: &mut Vec<Value>) -> Result<Flow, StreamError> {
        let name = event.event.as_deref().unwrap_or_default();
        if let Some(kind) = name.strip_prefix(EXCEPTION_PREFIX) {
            return Err(StreamError::Provider(json!({
                "exception_type": kind,
                "payload": String::from_utf8_lossy(&event.data),
            })));
        }
        let invalid =
            |why: &str| StreamError::Transform(TransformError::InvalidResponse(why.into()));
        let payload: Value = serde_json::from_slice(&event.data)
            .map_err(|_| invalid("an event-stream payload that is not JSON"))?;
        let decoded = if name == "chunk" {
            let bytes = payload
                .get("bytes")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("a chunk event without bytes"))?;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(bytes)
                .map_err(|_| invalid("a chunk event whose bytes are not base64"))?;
            serde_json::from_slice(&raw).map_err(|_| invalid("a chunk that is not JSON"))?
        } else {
            payload
        };
        let Value::Object(event) = decoded else {
            return Err(invalid("a chunk that is not a JSON object"));
        };
        self.chunk(event, out);
        Ok(Flow::More)
    }

    fn finish(&mut self, out: &mut Vec<Value>) -> Result<Value, StreamError> {
        if let Some(mut delta) = self.held_delta.take() {
            let mut usage = delta
                .get("usage")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            self.merge_start_cache(&mut usage);
            if !usage.is_empty() {
                delta.insert("usage".into(), Value::Object(usage));
            }
            self.emit(delta, out);
        }
        if !self.saw_terminal {
            let mut error = Map::new();
            error.insert("type".into(), json!("error"));
            error.insert(
                "error".into(),
                json!({"type": "api_error", "message": INCOMPLETE_STREAM_MESSAGE}),
            );
            self.emit(error, out);
        }
        Ok(self.transcript.finish())
    }

    fn saw_finish(&self) -> bool {
        false
    }

    fn framing(&self) -> Framing {
        Framing::AwsEventStream
    }
}

/// One event as LiteLLM's `_convert_chunk_to_sse_format` writes it.
pub fn sse_frame(event: &Value, out: &mut Vec<u8>) {
    let kind = match event.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(other) => python_json(other),
        None => "message".to_string(),
    };
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(python_json(event).as_bytes());
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: Some(name.into()),
            data: data.as_bytes().to_vec(),
        }
    }

    #[test]
    fn deltas_of_a_block_merge_and_pings_drop() {
        let mut stream = AnthropicPassthrough::new();
        let mut out = Vec::new();
        for (name, data) in [
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"m"}}"#,
            ),
            ("ping", r#"{"type": "ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"He"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"llo"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":": 1}"}}"#,
            ),
        ] {
            stream.event(event(name, data), &mut out).unwrap();
        }
        let transcript = stream.finish(&mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(
            transcript.as_str().unwrap(),
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n\
             event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n\
             event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
             event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": 1}\"}}\n\n"
        );
    }

    fn chunk(event: Value) -> SseEvent {
        let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
        SseEvent {
            event: Some("chunk".into()),
            data: json!({ "bytes": bytes }).to_string().into_bytes(),
        }
    }

    #[test]
    fn bedrock_usage_moves_onto_message_delta_like_litellm() {
        let mut stream = BedrockInvokeStream::new();
        let mut out = Vec::new();
        for event in [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 8}}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
            json!({"type": "message_stop", "amazon-bedrock-invocationMetrics": {
                "inputTokenCount": 8, "outputTokenCount": 3, "cacheReadInputTokenCount": 50}}),
        ] {
            stream.event(chunk(event), &mut out).unwrap();
        }
        stream.finish(&mut out).unwrap();
        assert_eq!(out.len(), 3, "no error event after message_stop");
        assert_eq!(
            out[1]["usage"],
            json!({"output_tokens": 3, "cache_read_input_tokens": 50, "input_tokens": 8})
        );
        let mut frame = Vec::new();
        sse_frame(&out[2], &mut frame);
        assert_eq!(
            String::from_utf8(frame).unwrap(),
            "event: message_stop\ndata: {\"type\": \"message_stop\", \"usage\": {\"input_tokens\": 8, \"output_tokens\": 3, \"cache_read_input_tokens\": 50}}\n\n"
        );
    }

    #[test]
    fn a_bedrock_stream_cut_short_ends_with_litellms_error_event() {
        let mut stream = BedrockInvokeStream::new();
        let mut out = Vec::new();
        stream
            .event(
                chunk(json!({"type": "message_start", "message": {}})),
                &mut out,
            )
            .unwrap();
        stream.finish(&mut out).unwrap();
        assert_eq!(out.last().unwrap()["type"], "error");
        let exception = SseEvent {
            event: Some(format!("{EXCEPTION_PREFIX}throttlingException")),
            data: b"{}".to_vec(),
        };
        assert!(matches!(
            BedrockInvokeStream::new().event(exception, &mut out),
            Err(StreamError::Provider(_))
        ));
    }
}
