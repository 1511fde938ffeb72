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

/// Reads an optional numeric param, rejecting wrong types with a message naming the param.
pub fn number_param(params: &Map<String, Value>, name: &str) -> Result<Option<Value>, String> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(_)) => Ok(Some(v.clone())),
        Some(other) => Err(format!("{name} must be a number, got {}", type_name(other))),
    }
}

/// Reads an optional integer param (token limits).
pub fn integer_param(params: &Map<String, Value>, name: &str) -> Result<Option<i64>, String> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| format!("{name} must be an integer")),
        Some(other) => Err(format!(
            "{name} must be an integer, got {}",
            type_name(other)
        )),
    }
}

/// `stop` as a list of strings (a bare string becomes a one-element list).
pub fn stop_param(params: &Map<String, Value>) -> Result<Option<Vec<String>>, String> {
    match params.get("stop") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!(
                    "stop must be a string or a list of strings, found {}",
                    type_name(other)
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(format!(
            "stop must be a string or a list of strings, got {}",
            type_name(other)
        )),
    }
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
    fn typed_param_readers_reject_wrong_types() {
        let p = params(json!({"temperature": "hot", "max_tokens": 1.5, "stop": [1]}));
        assert!(number_param(&p, "temperature").is_err());
        assert!(integer_param(&p, "max_tokens").is_err());
        assert!(stop_param(&p).is_err());
        let ok = params(json!({"max_tokens": 8.0, "stop": "END"}));
        assert_eq!(integer_param(&ok, "max_tokens"), Ok(Some(8)));
        assert_eq!(stop_param(&ok), Ok(Some(vec!["END".to_string()])));
    }
}
