//! An OpenAI chat stream: `data:` events (JSON chunks, `[DONE]`) through LiteLLM's wrapper
//! rules ([`ChatChunks`]). The OpenAI SDK raises on an event with a truthy `error`.

use serde_json::Value;

use crate::providers::chunks::{ChatChunks, StreamOptions, is_truthy};
use crate::providers::error::TransformError;
use crate::providers::stream::{Flow, StreamError, StreamTransform};
use crate::wire::sse::SseEvent;

pub struct OpenAiStream {
    chunks: ChatChunks,
}

impl OpenAiStream {
    pub fn new(model: String, options: StreamOptions) -> Self {
        OpenAiStream {
            chunks: ChatChunks::new(model, options),
        }
    }
}

impl StreamTransform for OpenAiStream {
    fn event(&mut self, event: SseEvent, out: &mut Vec<Value>) -> Result<Flow, StreamError> {
        if event.data.starts_with(b"[DONE]") {
            return Ok(Flow::Done);
        }
        let chunk: Value = serde_json::from_slice(&event.data).map_err(|err| {
            TransformError::UnparsableResponse(format!("a stream event is not JSON ({err})"))
        })?;
        let Value::Object(chunk): Value = chunk else {
            return Err(TransformError::UnparsableResponse(
                "a stream event is not a JSON object".into(),
            )
            .into());
        };
        if let Some(error) = chunk.get("error").filter(|e| is_truthy(e)) {
            return Err(StreamError::Provider(error.clone()));
        }
        self.chunks.process(chunk, out)
    }

    fn finish(&mut self, out: &mut Vec<Value>) -> Result<Value, StreamError> {
        self.chunks.finish(out)
    }

    fn saw_finish(&self) -> bool {
        self.chunks.saw_finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(events: &[Value], options: StreamOptions) -> (Vec<Value>, Value) {
        let mut stream = OpenAiStream::new("gpt-4o-mini".into(), options);
        let mut out = Vec::new();
        for event in events {
            let data = serde_json::to_vec(event).unwrap();
            stream
                .event(SseEvent { event: None, data }, &mut out)
                .unwrap();
        }
        let summary = stream.finish(&mut out).unwrap();
        (out, summary)
    }

    fn chunk(delta: Value, finish: Value) -> Value {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "up",
               "system_fingerprint": "fp", "choices": [{"index": 0, "delta": delta,
               "logprobs": null, "finish_reason": finish}], "usage": null})
    }

    #[test]
    fn role_first_then_content_then_finish() {
        let (out, summary) = run(
            &[
                chunk(
                    json!({"role": "assistant", "content": "", "refusal": null}),
                    Value::Null,
                ),
                chunk(json!({"content": "Hel"}), Value::Null),
                chunk(json!({"content": ""}), Value::Null),
                chunk(json!({"content": "lo"}), Value::Null),
                chunk(json!({}), json!("stop")),
            ],
            StreamOptions::default(),
        );
        let deltas: Vec<&Value> = out.iter().map(|c| &c["choices"][0]["delta"]).collect();
        assert_eq!(out.len(), 4);
        assert_eq!(deltas[0], &json!({"content": "", "role": "assistant"}));
        assert_eq!(deltas[1], &json!({"content": "Hel"}));
        assert_eq!(out[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(out[0]["model"], "gpt-4o-mini");
        assert_eq!(summary["choices"][0]["delta"]["content"], "Hello");
        // No stream options: LiteLLM logs zero usage.
        assert_eq!(summary["usage"]["total_tokens"], 0);
    }

    #[test]
    fn finish_on_a_content_chunk_is_held_and_raw() {
        let (out, _) = run(
            &[chunk(json!({"content": "Hi"}), json!("weird_reason"))],
            StreamOptions::default(),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["choices"][0].get("finish_reason"), None);
        assert_eq!(out[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(out[1]["choices"][0]["finish_reason"], "weird_reason");
    }

    #[test]
    fn no_finish_at_all_becomes_stop() {
        let (out, _) = run(
            &[chunk(json!({"content": "Hi"}), Value::Null)],
            StreamOptions::default(),
        );
        assert_eq!(out.last().unwrap()["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn tool_call_deltas_are_normalized() {
        let (out, summary) = run(
            &[
                chunk(
                    json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                    "id": "call_1", "type": "function", "function": {"name": "get_w", "arguments": ""}}]}),
                    Value::Null,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": null, "function": {"arguments": "{\"a\""}}]}),
                    Value::Null,
                ),
                chunk(json!({}), json!("tool_calls")),
            ],
            StreamOptions::default(),
        );
        assert_eq!(
            serde_json::to_string(&out[1]["choices"][0]["delta"]).unwrap(),
            r#"{"tool_calls":[{"function":{"arguments":"{\"a\""},"type":"function","index":0}]}"#
        );
        assert_eq!(out[2]["choices"][0]["finish_reason"], "tool_calls");
        let call = &summary["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["function"]["arguments"], "{\"a\"");
        assert_eq!(call["id"], "call_1");
    }

    #[test]
    fn repetition_guard_fails_the_stream() {
        let mut stream = OpenAiStream::new(
            "m".into(),
            StreamOptions {
                repeat_limit: 5,
                ..StreamOptions::default()
            },
        );
        let mut out = Vec::new();
        let data = serde_json::to_vec(&chunk(json!({"content": "abc"}), Value::Null)).unwrap();
        let mut failed = false;
        for _ in 0..6 {
            let event = SseEvent {
                event: None,
                data: data.clone(),
            };
            if stream.event(event, &mut out).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn error_event_fails_the_stream() {
        let mut stream = OpenAiStream::new("m".into(), StreamOptions::default());
        let data = br#"{"error": {"message": "boom"}}"#.to_vec();
        let err = stream
            .event(SseEvent { event: None, data }, &mut Vec::new())
            .unwrap_err();
        assert!(matches!(err, StreamError::Provider(_)));
    }
}
