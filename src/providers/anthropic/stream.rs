//! An Anthropic Messages stream, as LiteLLM 1.106.12's `ModelResponseIterator` parses it into
//! OpenAI-shaped chunks, then through LiteLLM's wrapper rules ([`ChatChunks`]).
//!
//! LiteLLM's parser: one `chatcmpl-<uuid4>` id for the whole stream (Anthropic's `msg_` id is
//! not used); `message_start` carries usage only; text and tool blocks become content and
//! tool-call deltas (tool indexes count tool blocks from 0); a tool block whose deltas joined to
//! nothing closes with arguments `{}`; `message_delta` carries the (mapped) finish reason and the
//! usage, merged over `message_start`'s, and ends the stream (LiteLLM stops reading there);
//! `ping` and `message_stop` produce nothing; an `error` event fails the stream.

use serde_json::{Map, Value, json};

use crate::providers::chunks::{
    ChatChunks, StreamOptions, ToolCallDeltas, fresh_id, map_finish_reason,
};
use crate::providers::error::TransformError;
use crate::providers::stream::{Flow, StreamError, StreamTransform};
use crate::wire::sse::SseEvent;

pub struct AnthropicStream {
    chunks: ChatChunks,
    id: String,
    /// Usage so far: `message_delta`'s fields over `message_start`'s (Anthropic's own names;
    /// Python converts it with LiteLLM's `calculate_usage`).
    usage: Map<String, Value>,
    tool_calls: ToolCallDeltas,
}

impl AnthropicStream {
    pub fn new(model: String, options: StreamOptions) -> Self {
        AnthropicStream {
            chunks: ChatChunks::new(model, options),
            id: fresh_id(),
            usage: Map::new(),
            tool_calls: ToolCallDeltas::default(),
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>, usage: bool) -> Map<String, Value> {
        let mut chunk = Map::new();
        chunk.insert("id".into(), Value::from(self.id.as_str()));
        chunk.insert(
            "choices".into(),
            json!([{"index": 0, "delta": delta, "finish_reason": finish}]),
        );
        if usage && !self.usage.is_empty() {
            chunk.insert("usage".into(), Value::Object(self.usage.clone()));
        }
        chunk
    }

    fn merge_usage(&mut self, usage: Option<&Value>) -> bool {
        let Some(Value::Object(usage)) = usage else {
            return false;
        };
        for (key, value) in usage {
            self.usage.insert(key.clone(), value.clone());
        }
        true
    }
}

fn thinking_delta(block: Value, reasoning: &str) -> Value {
    json!({
        "reasoning_content": reasoning,
        "thinking_blocks": [block.clone()],
        "provider_specific_fields": {"thinking_blocks": [block]},
        "content": "",
    })
}

impl StreamTransform for AnthropicStream {
    fn event(&mut self, event: SseEvent, out: &mut Vec<Value>) -> Result<Flow, StreamError> {
        let parsed: Value = serde_json::from_slice(&event.data).map_err(|err| {
            TransformError::UnparsableResponse(format!("a stream event is not JSON ({err})"))
        })?;
        let kind = parsed.get("type").and_then(Value::as_str).unwrap_or("");
        let chunk = match kind {
            "message_start" => {
                self.merge_usage(parsed.pointer("/message/usage"));
                self.chunk(json!({"content": ""}), None, true)
            }
            "content_block_start" => {
                let block = parsed.get("content_block").cloned().unwrap_or(Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        self.tool_calls.other_block();
                        let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                        self.chunk(json!({"content": text}), None, false)
                    }
                    Some("tool_use" | "server_tool_use") => {
                        let delta = self.tool_calls.start(block.get("id"), block.get("name"));
                        self.chunk(delta, None, false)
                    }
                    _ => {
                        self.tool_calls.other_block();
                        return Ok(Flow::More);
                    }
                }
            }
            "content_block_delta" => {
                let delta = parsed.get("delta").cloned().unwrap_or(Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        self.chunk(json!({"content": text}), None, false)
                    }
                    Some("input_json_delta") if self.tool_calls.is_open() => {
                        let piece = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        let delta = self.tool_calls.arguments(piece);
                        self.chunk(delta, None, false)
                    }
                    Some("thinking_delta") => {
                        let text = delta.get("thinking").and_then(Value::as_str).unwrap_or("");
                        let block = json!({"type": "thinking", "thinking": text});
                        self.chunk(thinking_delta(block, text), None, false)
                    }
                    Some("signature_delta") => {
                        let signature = delta.get("signature").cloned().unwrap_or(Value::Null);
                        let block =
                            json!({"type": "thinking", "thinking": "", "signature": signature});
                        self.chunk(thinking_delta(block, ""), None, false)
                    }
                    _ => return Ok(Flow::More),
                }
            }
            "content_block_stop" => match self.tool_calls.close() {
                Some(delta) => self.chunk(delta, None, false),
                None => return Ok(Flow::More),
            },
            "message_delta" => {
                let reason = parsed
                    .pointer("/delta/stop_reason")
                    .and_then(Value::as_str)
                    .unwrap_or("stop");
                let finish = map_finish_reason(reason);
                let usage = self.merge_usage(parsed.get("usage"));
                let chunk = self.chunk(json!({}), Some(finish), usage);
                self.chunks.process(chunk, out)?;
                // LiteLLM stops reading at the first event after the finish reason.
                return Ok(Flow::Done);
            }
            "error" => return Err(StreamError::Provider(parsed)),
            _ => return Ok(Flow::More), // ping, message_stop
        };
        self.chunks.process(chunk, out)
    }

    fn finish(&mut self, out: &mut Vec<Value>) -> Result<Value, StreamError> {
        let mut answer = self.chunks.finish(out)?;
        // The usage in Anthropic's names; Python converts it as LiteLLM's parser does.
        if let Some(object) = answer.as_object_mut() {
            let usage = if self.usage.is_empty() {
                Value::Null
            } else {
                Value::Object(self.usage.clone())
            };
            object.insert("usage".into(), usage);
        }
        Ok(answer)
    }

    fn saw_finish(&self) -> bool {
        self.chunks.saw_finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[Value]) -> (Vec<Value>, Value) {
        let mut stream = AnthropicStream::new("claude".into(), StreamOptions::default());
        let mut out = Vec::new();
        for event in events {
            let data = serde_json::to_vec(event).unwrap();
            if stream
                .event(SseEvent { event: None, data }, &mut out)
                .unwrap()
                == Flow::Done
            {
                break;
            }
        }
        let answer = stream.finish(&mut out).unwrap();
        (out, answer)
    }

    #[test]
    fn text_stream() {
        let (out, answer) = run(&[
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 11, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ignored"}}),
        ]);
        assert_eq!(out.len(), 3);
        assert_eq!(
            out[0]["choices"][0]["delta"],
            json!({"content": "Hel", "role": "assistant"})
        );
        assert_eq!(out[2]["choices"][0]["finish_reason"], "stop");
        assert!(out[0]["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(out[0]["id"], out[2]["id"]);
        assert_eq!(answer["choices"][0]["delta"]["content"], "Hello");
        assert_eq!(
            answer["usage"],
            json!({"input_tokens": 11, "output_tokens": 7})
        );
    }

    #[test]
    fn tool_use_stream() {
        let (out, answer) = run(&[
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}}),
            json!({"type": "content_block_stop", "index": 0}),
        ]);
        let deltas: Vec<String> = out
            .iter()
            .map(|c| serde_json::to_string(&c["choices"][0]["delta"]).unwrap())
            .collect();
        assert_eq!(
            deltas[0],
            r#"{"content":"","role":"assistant","tool_calls":[{"id":"toolu_1","function":{"arguments":"","name":"get_weather"},"type":"function","index":0}]}"#
        );
        assert_eq!(
            deltas[2],
            r#"{"content":"","tool_calls":[{"function":{"arguments":"{}"},"type":"function","index":0}]}"#
        );
        // No message_delta: LiteLLM closes with `stop`, tool calls or not.
        assert_eq!(out[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(
            answer["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
    }

    #[test]
    fn error_event_fails_the_stream() {
        let mut stream = AnthropicStream::new("claude".into(), StreamOptions::default());
        let data =
            br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
        let event = SseEvent {
            event: Some("error".into()),
            data: data.to_vec(),
        };
        let err = stream.event(event, &mut Vec::new()).unwrap_err();
        assert!(matches!(err, StreamError::Provider(_)));
    }
}
