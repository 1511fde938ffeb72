//! A chat request body, as the lane takes it: a strict subset of what the fast path serves.
//! Anything outside it (media, odd types, LiteLLM's own options) goes to the proxy.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::lane::gate::NotForLane;
use crate::model::{ChatRequest, Content, Message, Role};

/// Params the lane passes on as given; LiteLLM forwards each unchanged to every provider the
/// lane serves (the provider transform still judges them).
const PARAMS: &[&str] = &[
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
];

/// Tool calling and structured output: JSON the provider transforms judge (the proxy passes
/// them on as parsed).
const JSON_PARAMS: &[&str] = &[
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
];

/// LiteLLM trims `stop` to this many sequences (`validate_openai_optional_params`).
const MAX_STOP_SEQUENCES: usize = 4;

/// The parts of a body the lane reads.
#[derive(Debug)]
pub struct LaneRequest {
    pub model: String,
    pub chat: ChatRequest,
    /// `stream: true`: the stream's options.
    pub stream: Option<StreamRequest>,
}

/// What a `stream: true` request asked for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StreamRequest {
    /// `stream_options` was given (as `{}` or `{"include_usage": <bool>}`).
    pub options_given: bool,
    /// `stream_options.include_usage` is `true`.
    pub include_usage: bool,
    /// `include_usage` was given (as `true` or `false`).
    pub explicit_usage: bool,
}

pub fn parse(body: &[u8]) -> Result<LaneRequest, NotForLane> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return Err(NotForLane("not a JSON object"));
    };
    let mut model = None;
    let mut messages = None;
    let mut params = Map::new();
    let mut streamed = false;
    let mut stream_options = None;
    for (name, value) in fields {
        match name.as_str() {
            "model" => model = value.as_str().map(str::to_string),
            "messages" => messages = Some(chat_messages(&value)?),
            "stream" if value == Value::Bool(false) || value.is_null() => {}
            "stream" if value == Value::Bool(true) => streamed = true,
            "stream_options" => stream_options = Some(value),
            _ if PARAMS.contains(&name.as_str()) => {
                if value.is_null() {
                    // LiteLLM drops None-valued params.
                    continue;
                }
                params.insert(name, param(value)?);
            }
            _ if JSON_PARAMS.contains(&name.as_str()) => {
                if !value.is_null() {
                    params.insert(name, value);
                }
            }
            _ => return Err(NotForLane("a field the lane does not take")),
        }
    }
    let model = model.ok_or(NotForLane("model is not a string"))?;
    let messages = messages.ok_or(NotForLane("no messages"))?;
    let stream = match (streamed, stream_options) {
        (false, None | Some(Value::Null)) => None,
        (false, Some(_)) => return Err(NotForLane("stream_options without a stream")),
        (true, options) => Some(stream_request(options)?),
    };
    Ok(LaneRequest {
        model,
        chat: ChatRequest { messages, params },
        stream,
    })
}

/// `stream_options` the fast path serves: absent, null, `{}` or `{"include_usage": <bool>}`.
fn stream_request(options: Option<Value>) -> Result<StreamRequest, NotForLane> {
    let fields = match options {
        None | Some(Value::Null) => return Ok(StreamRequest::default()),
        Some(Value::Object(fields)) => fields,
        Some(_) => return Err(NotForLane("stream_options is not an object")),
    };
    let include_usage = match fields.get("include_usage") {
        None => false,
        Some(Value::Bool(include)) => *include,
        Some(_) => return Err(NotForLane("include_usage is not a boolean")),
    };
    if fields.len() > usize::from(fields.contains_key("include_usage")) {
        return Err(NotForLane("stream_options other than include_usage"));
    }
    Ok(StreamRequest {
        options_given: true,
        include_usage,
        explicit_usage: fields.contains_key("include_usage"),
    })
}

fn param(value: Value) -> Result<Value, NotForLane> {
    match value {
        Value::Number(_) | Value::String(_) => Ok(value),
        Value::Array(items)
            if items.len() <= MAX_STOP_SEQUENCES && items.iter().all(Value::is_string) =>
        {
            Ok(Value::Array(items))
        }
        _ => Err(NotForLane("a param of a type the lane does not take")),
    }
}

/// Text conversations with tool calls: `{"role": "system"|"user"|"assistant", "content":
/// "<text>"}`, an assistant turn's `tool_calls` (then `content` may be null or absent), and
/// `{"role": "tool", "tool_call_id": "<id>", "content": "<text>"}`.
fn chat_messages(value: &Value) -> Result<Vec<Message>, NotForLane> {
    let items = value
        .as_array()
        .filter(|items| !items.is_empty())
        .ok_or(NotForLane("messages is not a non-empty list"))?;
    items.iter().map(chat_message).collect()
}

fn chat_message(item: &Value) -> Result<Message, NotForLane> {
    let fields = item
        .as_object()
        .ok_or(NotForLane("a message that is not an object"))?;
    let role = match fields.get("role").and_then(Value::as_str) {
        Some("system") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        _ => return Err(NotForLane("a message role the lane does not take")),
    };
    let tool_calls = match (role, fields.get("tool_calls")) {
        (_, None) => None,
        (Role::Assistant, Some(calls)) if well_formed_tool_calls(calls) => Some(calls.clone()),
        _ => return Err(NotForLane("tool_calls the lane does not take")),
    };
    let tool_call_id = match (role, fields.get("tool_call_id")) {
        (Role::Tool, Some(Value::String(id))) => Some(id.clone()),
        (_, None) if role != Role::Tool => None,
        _ => return Err(NotForLane("a tool_call_id the lane does not take")),
    };
    let known = ["role", "content", "tool_calls", "tool_call_id"];
    if fields.keys().any(|name| !known.contains(&name.as_str())) {
        return Err(NotForLane("a message field the lane does not take"));
    }
    let content = match fields.get("content") {
        Some(Value::String(text)) if !text.is_empty() => {
            Content::Text(Bytes::copy_from_slice(text.as_bytes()))
        }
        None | Some(Value::Null) if tool_calls.is_some() => Content::Absent,
        _ => return Err(NotForLane("message content that is not text")),
    };
    Ok(Message {
        role,
        content,
        tool_calls,
        tool_call_id,
    })
}

/// A non-empty list of `{"id", "type": "function", "function": {"name", "arguments"}}`, all
/// strings and nothing else (the shape the fast path takes as is).
fn well_formed_tool_calls(calls: &Value) -> bool {
    let strings = |value: &Value, keys: &[&str]| {
        value.as_object().is_some_and(|fields| {
            fields.len() == keys.len()
                && keys
                    .iter()
                    .all(|key| fields.get(*key).is_some_and(Value::is_string))
        })
    };
    calls.as_array().is_some_and(|calls| {
        !calls.is_empty()
            && calls.iter().all(|call| {
                call.as_object().is_some_and(|fields| fields.len() == 3)
                    && call.get("id").is_some_and(Value::is_string)
                    && call.get("type") == Some(&Value::from("function"))
                    && call
                        .get("function")
                        .is_some_and(|function| strings(function, &["name", "arguments"]))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_plain_text_chat() {
        let body = br#"{"model":"m","messages":[{"role":"system","content":"be brief"},
            {"role":"user","content":"hi"}],"temperature":0.2,"max_tokens":5,"stop":["x"],
            "stream":false,"seed":null}"#;
        let request = parse(body).unwrap();
        assert_eq!(request.model, "m");
        assert_eq!(request.chat.messages.len(), 2);
        assert_eq!(request.chat.params.len(), 3);
        assert_eq!(request.stream, None);
    }

    #[test]
    fn takes_tool_exchanges_and_tool_params() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"weather?"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
                "function":{"name":"weather","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"sunny"}],
            "tools":[{"type":"function","function":{"name":"weather","parameters":{}}}],
            "tool_choice":"auto","parallel_tool_calls":false,
            "response_format":{"type":"json_object"}}"#;
        let request = parse(body).unwrap();
        assert_eq!(request.chat.messages.len(), 3);
        assert!(request.chat.messages[1].tool_calls.is_some());
        assert_eq!(request.chat.messages[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(request.chat.params.len(), 4);
    }

    #[test]
    fn takes_streams_with_their_usage_option() {
        let stream = |tail: &str| {
            let body = format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"stream":true{tail}}}"#
            );
            parse(body.as_bytes()).unwrap().stream.unwrap()
        };
        assert_eq!(stream(""), StreamRequest::default());
        assert_eq!(
            stream(r#","stream_options":null"#),
            StreamRequest::default()
        );
        assert_eq!(
            stream(r#","stream_options":{"include_usage":true}"#),
            StreamRequest {
                options_given: true,
                include_usage: true,
                explicit_usage: true
            }
        );
        assert_eq!(
            stream(r#","stream_options":{}"#),
            StreamRequest {
                options_given: true,
                include_usage: false,
                explicit_usage: false
            }
        );
    }

    #[test]
    fn leaves_everything_else_to_the_proxy() {
        for body in [
            &br#"not json"#[..],
            br#"[1]"#,
            br#"{"model":"m"}"#,
            br#"{"model":1,"messages":[{"role":"user","content":"hi"}]}"#,
            br#"{"model":"m","messages":[]}"#,
            br#"{"model":"m","messages":[{"role":"tool","content":"x"}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x","tool_call_id":"a"}]}"#,
            br#"{"model":"m","messages":[{"role":"assistant","content":null}]}"#,
            br#"{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f"}}]}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":[]}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":""}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x","name":"a"}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":1}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{}}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,
                "stream_options":{"include_usage":1}}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,
                "stream_options":{"include_usage":true,"x":1}}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{}}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"user":"u"}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":true}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]}"#,
        ] {
            assert!(parse(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }
}
