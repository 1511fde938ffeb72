//! The provider-neutral chat request, owned by Rust, and the admission rules for it.
//!
//! The binding layer extracts messages into these types without copying text or media; anything
//! it cannot represent here is declined before any I/O (see [`Decline`]).

use bytes::Bytes;
use serde_json::{Map, Value};

/// Why a request stays on LiteLLM's Python path. `code` is a bounded set (counted per code);
/// `detail` names the offending field for the debug log and never carries request content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decline {
    pub code: &'static str,
    pub detail: String,
}

impl Decline {
    pub fn new(code: &'static str, detail: impl Into<String>) -> Self {
        Decline {
            code,
            detail: detail.into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
}

impl Role {
    pub fn parse(role: &str) -> Option<Role> {
        match role {
            "system" => Some(Role::System),
            "developer" => Some(Role::Developer),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    /// System and developer messages are both instructions to the model.
    pub fn is_instruction(self) -> bool {
        matches!(self, Role::System | Role::Developer)
    }
}

/// An image reference exactly as the caller sent it (`url` is often a multi-MiB data URL).
#[derive(Clone, Debug)]
pub struct ImageUrl {
    pub url: Bytes,
    pub detail: Option<String>,
    pub format: Option<String>,
}

#[derive(Clone, Debug)]
pub enum ContentPart {
    Text(Bytes),
    Image(ImageUrl),
}

#[derive(Clone, Debug)]
pub enum Content {
    Text(Bytes),
    Parts(Vec<ContentPart>),
}

#[derive(Clone, Debug)]
pub struct Message {
    pub role: Role,
    pub content: Content,
}

/// A chat request after extraction: messages plus the optional OpenAI params the caller set
/// (None-valued params are already dropped, as LiteLLM does).
#[derive(Clone, Debug, Default)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub params: Map<String, Value>,
}

/// Params whose presence means "LiteLLM behaviour we do not reproduce"; each gets its own
/// decline code so an operator can see what keeps traffic off the fast path.
const NOTABLE_DECLINES: &[&str] = &[
    "stream",
    "response_format",
    "n",
    "top_k",
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "parallel_tool_calls",
    "logprobs",
    "top_logprobs",
    "reasoning_effort",
    "thinking",
    "audio",
    "modalities",
    "web_search_options",
    "mock_response",
    "fallbacks",
    "num_retries",
    "caching",
    "cache",
    "extra_body",
];

/// The OpenAI params each provider's transform translates exactly like LiteLLM.
fn allowed_params(provider: crate::providers::Provider) -> &'static [&'static str] {
    use crate::providers::Provider;
    match provider {
        Provider::OpenAi => &[
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "stop",
            "presence_penalty",
            "frequency_penalty",
            "seed",
            "user",
        ],
        Provider::Anthropic => &[
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "stop",
        ],
        Provider::Bedrock => &[
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "stop",
        ],
    }
}

/// Checks every param against the provider's allowlist. `Ok` means the Rust path can serve it.
pub fn admit_params(
    provider: crate::providers::Provider,
    params: &Map<String, Value>,
) -> Result<(), Decline> {
    let allowed = allowed_params(provider);
    for (name, value) in params {
        if name == "stream" && value == &Value::Bool(false) {
            continue;
        }
        if allowed.contains(&name.as_str()) {
            continue;
        }
        let code = NOTABLE_DECLINES
            .iter()
            .find(|notable| **notable == name)
            .copied()
            .unwrap_or("unsupported_param");
        return Err(Decline::new(code, format!("param {name:?}")));
    }
    Ok(())
}

/// Reads an optional numeric param. LiteLLM forwards other types unchanged (or coerces them per
/// provider), so anything but a JSON number declines rather than guessing.
pub fn number_param(params: &Map<String, Value>, name: &str) -> Result<Option<Value>, Decline> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(_)) => Ok(Some(v.clone())),
        Some(other) => Err(param_type_decline(name, other)),
    }
}

/// Reads an optional token limit. Only integers that fit in an i64 are served: LiteLLM truncates
/// floats for some providers and forwards them (and huge integers) verbatim for others.
pub fn integer_param(params: &Map<String, Value>, name: &str) -> Result<Option<i64>, Decline> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| param_type_decline(name, value)),
    }
}

/// `stop` as a list of non-null strings (a bare non-empty string becomes a one-element list).
/// LiteLLM drops, filters or crashes on the other shapes depending on the provider.
pub fn stop_param(params: &Map<String, Value>) -> Result<Option<Vec<String>>, Decline> {
    match params.get("stop") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(vec![s.clone()])),
        Some(value @ Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| param_type_decline("stop", value)),
        Some(other) => Err(param_type_decline("stop", other)),
    }
}

fn param_type_decline(name: &str, value: &Value) -> Decline {
    Decline::new(
        "param_type",
        format!("param {name:?} is {}", type_name(value)),
    )
}

/// Text LiteLLM rewrites before sending to Anthropic or Bedrock: empty or whitespace-only text
/// (sanitised, dropped or merged away) and trailing whitespace in a final assistant turn
/// (trimmed). Such requests decline so LiteLLM's own rules apply.
pub fn blank_text_decline(messages: &[Message]) -> Option<Decline> {
    let is_blank = |text: &[u8]| {
        std::str::from_utf8(text).is_ok_and(|text| text.chars().all(is_python_whitespace))
    };
    let texts = |content: &Content| -> Vec<Bytes> {
        match content {
            Content::Text(text) => vec![text.clone()],
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|part| match part {
                    ContentPart::Text(text) => Some(text.clone()),
                    ContentPart::Image(_) => None,
                })
                .collect(),
        }
    };
    for (index, message) in messages.iter().enumerate() {
        if texts(&message.content).iter().any(|text| is_blank(text)) {
            return Some(Decline::new(
                "blank_text",
                format!("messages[{index}] has empty or whitespace-only text"),
            ));
        }
    }
    let last = messages.last()?;
    let trailing_space = last.role == Role::Assistant
        && texts(&last.content)
            .last()
            .and_then(|text| {
                std::str::from_utf8(text)
                    .ok()
                    .and_then(|text| text.chars().next_back())
            })
            .is_some_and(is_python_whitespace);
    trailing_space
        .then(|| Decline::new("blank_text", "final assistant message ends with whitespace"))
}

/// Python's `str.isspace()` (what LiteLLM's `strip()` calls whitespace): Unicode White_Space
/// plus the ASCII separators U+001C..U+001F.
fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Anthropic and Bedrock need a conversation: LiteLLM refuses system-only requests itself.
pub fn conversation_decline(messages: &[Message]) -> Option<Decline> {
    messages
        .iter()
        .all(|message| message.role.is_instruction())
        .then(|| Decline::new("system_only", "no user or assistant message"))
}

pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Provider;
    use serde_json::json;

    fn params(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn allowlisted_params_are_admitted() {
        let p =
            params(json!({"temperature": 0.2, "max_tokens": 10, "stop": ["x"], "stream": false}));
        assert_eq!(admit_params(Provider::Anthropic, &p), Ok(()));
    }

    #[test]
    fn notable_params_decline_with_their_own_code() {
        for &name in NOTABLE_DECLINES {
            let p = params(json!({ name: true }));
            let decline = admit_params(Provider::OpenAi, &p).unwrap_err();
            assert_eq!(decline.code, name);
        }
    }

    #[test]
    fn unknown_params_decline_with_a_bounded_code() {
        let p = params(json!({"frobnicate": 1}));
        let decline = admit_params(Provider::Bedrock, &p).unwrap_err();
        assert_eq!(decline.code, "unsupported_param");
        assert!(decline.detail.contains("frobnicate"));
    }

    #[test]
    fn provider_specific_params_are_not_shared() {
        let p = params(json!({"seed": 1}));
        assert!(admit_params(Provider::OpenAi, &p).is_ok());
        assert!(admit_params(Provider::Anthropic, &p).is_err());
    }

    #[test]
    fn typed_param_readers_decline_other_types() {
        let p = params(json!({"temperature": "hot", "max_tokens": 1.5, "stop": [1]}));
        assert_eq!(
            number_param(&p, "temperature").unwrap_err().code,
            "param_type"
        );
        assert_eq!(
            integer_param(&p, "max_tokens").unwrap_err().code,
            "param_type"
        );
        assert_eq!(stop_param(&p).unwrap_err().code, "param_type");
        for odd in [json!(8.0), json!(true), json!(u64::MAX)] {
            let p = params(json!({ "max_tokens": odd }));
            assert!(integer_param(&p, "max_tokens").is_err(), "{odd}");
        }
        for odd in [json!(""), json!([null]), json!(5), json!({})] {
            let p = params(json!({ "stop": odd }));
            assert!(stop_param(&p).is_err(), "{odd}");
        }
        let ok = params(json!({"max_tokens": 8, "stop": "END"}));
        assert_eq!(integer_param(&ok, "max_tokens"), Ok(Some(8)));
        assert_eq!(stop_param(&ok), Ok(Some(vec!["END".to_string()])));
    }

    fn message(role: Role, text: &'static str) -> Message {
        Message {
            role,
            content: Content::Text(Bytes::from_static(text.as_bytes())),
        }
    }

    #[test]
    fn blank_text_and_trailing_assistant_whitespace_decline() {
        let ok = [message(Role::User, "a "), message(Role::Assistant, "b")];
        assert_eq!(blank_text_decline(&ok), None);
        for messages in [
            vec![message(Role::User, "")],
            vec![message(Role::System, " \n"), message(Role::User, "a")],
            vec![message(Role::User, "a"), message(Role::Assistant, "b ")],
        ] {
            assert_eq!(blank_text_decline(&messages).unwrap().code, "blank_text");
        }
    }

    #[test]
    fn system_only_requests_decline() {
        assert!(conversation_decline(&[message(Role::System, "s")]).is_some());
        assert!(
            conversation_decline(&[message(Role::System, "s"), message(Role::User, "u")]).is_none()
        );
    }
}
