//! A Bedrock `converse-stream` answer, as LiteLLM 1.106.12's `AWSEventStreamDecoder` parses it
//! into OpenAI-shaped chunks, then through LiteLLM's wrapper rules ([`ChatChunks`]).
//!
//! LiteLLM's parser: one `chatcmpl-<uuid4>` id for the whole stream; only Converse payloads
//! count (those with `contentBlockIndex`, `stopReason`, `metrics` or `trace`: `messageStart`
//! produces nothing); `start.toolUse` opens a tool call (indexes count tool blocks from 0),
//! `delta.text` / `delta.toolUse.input` are content / argument deltas, a tool block whose
//! deltas were all empty closes with arguments `{}`, `messageStop` carries the finish reason,
//! `metadata` the usage (after the finish chunk: recorded, never shown); every chunk carries
//! an empty top-level `provider_specific_fields`. An exception message fails the stream.

use serde_json::{Map, Value, json};

use crate::providers::chunks::{
    ChatChunks, StreamOptions, ToolCallDeltas, fresh_id, map_finish_reason,
};
use crate::providers::error::TransformError;
use crate::providers::stream::{Flow, Framing, StreamError, StreamTransform};
use crate::wire::eventstream::EXCEPTION_PREFIX;
use crate::wire::sse::SseEvent;

/// Keys that make a payload a Converse stream event for LiteLLM.
const CONVERSE_KEYS: &[&str] = &["contentBlockIndex", "stopReason", "metrics", "trace"];

pub struct BedrockStream {
    chunks: ChatChunks,
    id: String,
    tool_calls: ToolCallDeltas,
    /// Bedrock's `usage` object (Python converts it with LiteLLM's `transform_usage`).
    usage: Option<Value>,
}

impl BedrockStream {
    pub fn new(model: String, options: StreamOptions) -> Self {
        BedrockStream {
            chunks: ChatChunks::new(model, options),
            id: fresh_id(),
            tool_calls: ToolCallDeltas::default(),
            usage: None,
        }
    }

    fn chunk(
        &self,
        delta: Value,
        finish: Option<&str>,
        usage: Option<&Value>,
        trace: Option<&Value>,
    ) -> Map<String, Value> {
        let mut chunk = Map::new();
        chunk.insert("id".into(), Value::from(self.id.as_str()));
        chunk.insert(
            "choices".into(),
            json!([{"index": 0, "delta": delta, "finish_reason": finish}]),
        );
        if let Some(usage) = usage {
            chunk.insert("usage".into(), usage.clone());
        }
        let fields = match trace {
            Some(trace) => json!({"trace": trace}),
            None => json!({}),
        };
        chunk.insert("provider_specific_fields".into(), fields);
        chunk
    }
}

impl StreamTransform for BedrockStream {
    fn event(&mut self, event: SseEvent, out: &mut Vec<Value>) -> Result<Flow, StreamError> {
        let name = event.event.as_deref().unwrap_or("");
        let exception = name
            .strip_prefix(EXCEPTION_PREFIX)
            .or_else(|| name.ends_with("Exception").then_some(name));
        if let Some(kind) = exception {
            return Err(StreamError::Provider(json!({
                "exception_type": kind,
                "payload": String::from_utf8_lossy(&event.data),
            })));
        }
        let payload: Value = serde_json::from_slice(&event.data).map_err(|err| {
            TransformError::UnparsableResponse(format!("a stream event is not JSON ({err})"))
        })?;
        let Some(object) = payload.as_object() else {
            return Ok(Flow::More);
        };
        if !CONVERSE_KEYS.iter().any(|key| object.contains_key(*key)) {
            return Ok(Flow::More); // messageStart and the like
        }
        let trace = object.get("trace").filter(|t| !t.is_null());
        let chunk = if let Some(start) = object.get("start") {
            match start.get("toolUse") {
                Some(tool) => {
                    let delta = self
                        .tool_calls
                        .start(tool.get("toolUseId"), tool.get("name"));
                    self.chunk(delta, None, None, trace)
                }
                None => self.chunk(json!({"content": ""}), None, None, trace),
            }
        } else if let Some(delta) = object.get("delta") {
            if let Some(text) = delta.get("text").and_then(Value::as_str) {
                self.chunk(json!({"content": text}), None, None, trace)
            } else if let Some(tool) = delta.get("toolUse") {
                let piece = tool.get("input").and_then(Value::as_str).unwrap_or("");
                let delta = self.tool_calls.arguments(piece);
                self.chunk(delta, None, None, trace)
            } else {
                self.chunk(json!({"content": ""}), None, None, trace)
            }
        } else if object.contains_key("stopReason") {
            let reason = object
                .get("stopReason")
                .and_then(Value::as_str)
                .unwrap_or("stop");
            let finish = map_finish_reason(reason);
            self.chunk(json!({"content": ""}), Some(finish), None, trace)
        } else if object.contains_key("contentBlockIndex") {
            let delta = self.tool_calls.close();
            self.chunk(delta.unwrap_or(json!({"content": ""})), None, None, trace)
        } else if let Some(usage) = object.get("usage") {
            self.usage = Some(usage.clone());
            self.chunk(json!({}), None, Some(usage), trace)
        } else {
            return Ok(Flow::More);
        };
        self.chunks.process(chunk, out)
    }

    fn finish(&mut self, out: &mut Vec<Value>) -> Result<Value, StreamError> {
        let mut answer = self.chunks.finish(out)?;
        if let Some(object) = answer.as_object_mut() {
            object.insert("usage".into(), self.usage.clone().unwrap_or(Value::Null));
            // LiteLLM's assembled answer has no chunk-level provider fields.
            object.remove("provider_specific_fields");
        }
        Ok(answer)
    }

    fn saw_finish(&self) -> bool {
        self.chunks.saw_finish()
    }

    fn framing(&self) -> Framing {
        Framing::AwsEventStream
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, payload: Value) -> SseEvent {
        SseEvent {
            event: Some(name.into()),
            data: serde_json::to_vec(&payload).unwrap(),
        }
    }

    #[test]
    fn text_then_stop_then_usage() {
        let mut stream = BedrockStream::new("m".into(), StreamOptions::default());
        let mut out = Vec::new();
        for ev in [
            event("messageStart", json!({"role": "assistant"})),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
            ),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "lo"}}),
            ),
            event("contentBlockStop", json!({"contentBlockIndex": 0})),
            event("messageStop", json!({"stopReason": "end_turn"})),
            event(
                "metadata",
                json!({"usage": {"inputTokens": 11, "outputTokens": 3, "totalTokens": 14}, "metrics": {"latencyMs": 5}}),
            ),
        ] {
            assert_eq!(stream.event(ev, &mut out).unwrap(), Flow::More);
        }
        let answer = stream.finish(&mut out).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(
            out[0]["choices"][0]["delta"],
            json!({"content": "Hel", "role": "assistant"})
        );
        assert_eq!(out[0]["provider_specific_fields"], json!({}));
        assert_eq!(out[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(answer["usage"]["inputTokens"], 11);
    }

    #[test]
    fn exception_message_fails_the_stream() {
        let mut stream = BedrockStream::new("m".into(), StreamOptions::default());
        let ev = SseEvent {
            event: Some("exception:throttlingException".into()),
            data: br#"{"message":"slow"}"#.to_vec(),
        };
        let Err(StreamError::Provider(error)) = stream.event(ev, &mut Vec::new()) else {
            panic!("expected a provider error");
        };
        assert_eq!(error["exception_type"], "throttlingException");
    }
}
