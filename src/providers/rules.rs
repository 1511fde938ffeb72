//! Admission rules shared by the chat transforms: param allowlists and types, and the message
//! shapes LiteLLM rewrites for providers whose body the fast path builds itself.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::model::{Content, ContentPart, Decline, DeclineCode, Message, Role};

/// Params whose presence means "LiteLLM behaviour we do not reproduce"; each declines under its
/// own code (the param's name) so an operator can see what keeps traffic off the fast path.
const NOTABLE_DECLINES: &[DeclineCode] = &[
    DeclineCode::Stream,
    DeclineCode::ResponseFormat,
    DeclineCode::N,
    DeclineCode::TopK,
    DeclineCode::Tools,
    DeclineCode::ToolChoice,
    DeclineCode::Functions,
    DeclineCode::FunctionCall,
    DeclineCode::ParallelToolCalls,
    DeclineCode::Logprobs,
    DeclineCode::TopLogprobs,
    DeclineCode::ReasoningEffort,
    DeclineCode::Thinking,
    DeclineCode::Audio,
    DeclineCode::Modalities,
    DeclineCode::WebSearchOptions,
    DeclineCode::MockResponse,
    DeclineCode::Fallbacks,
    DeclineCode::NumRetries,
    DeclineCode::Caching,
    DeclineCode::Cache,
    DeclineCode::ExtraBody,
];

/// Checks every param against a provider's allowlist. `Ok` means the Rust path can serve it.
pub fn admit_params(allowed: &[&str], params: &Map<String, Value>) -> Result<(), Decline> {
    for (name, value) in params {
        if name == "stream" && value == &Value::Bool(false) {
            continue;
        }
        if allowed.contains(&name.as_str()) {
            continue;
        }
        let code = DeclineCode::parse(name)
            .filter(|code| NOTABLE_DECLINES.contains(code))
            .unwrap_or(DeclineCode::UnsupportedParam);
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
        DeclineCode::ParamType,
        format!("param {name:?} is {}", type_name(value)),
    )
}

/// Text LiteLLM rewrites before sending to Anthropic or Bedrock: empty or whitespace-only text
/// (sanitised, dropped or merged away) and trailing whitespace in a final assistant turn
/// (trimmed). Such requests decline so LiteLLM's own rules apply.
fn blank_text_decline(messages: &[Message]) -> Option<Decline> {
    let is_blank = |text: &[u8]| {
        std::str::from_utf8(text).is_ok_and(|text| text.chars().all(is_python_whitespace))
    };
    let texts = |content: &Content| -> Vec<Bytes> {
        match content {
            Content::Absent => vec![],
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
                DeclineCode::BlankText,
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
    trailing_space.then(|| {
        Decline::new(
            DeclineCode::BlankText,
            "final assistant message ends with whitespace",
        )
    })
}

/// Python's `str.isspace()` (what LiteLLM's `strip()` calls whitespace): Unicode White_Space
/// plus the ASCII separators U+001C..U+001F.
fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Message shapes the Anthropic and Bedrock transforms leave to LiteLLM (conversations it
/// rejects or rewrites, blank text, images outside user turns). Tool turns they map themselves.
pub fn native_body_decline(messages: &[Message]) -> Option<Decline> {
    conversation_decline(messages)
        .or_else(|| blank_text_decline(messages))
        .or_else(|| image_role_decline(messages))
}

/// LiteLLM strips images from assistant turns (Anthropic; its async Bedrock path fails on them)
/// and turns system images into odd blocks or drops them.
fn image_role_decline(messages: &[Message]) -> Option<Decline> {
    messages.iter().find_map(|message| {
        let has_image = matches!(&message.content, Content::Parts(parts)
            if parts.iter().any(|part| matches!(part, ContentPart::Image(_))));
        match message.role {
            _ if !has_image => None,
            Role::User => None,
            Role::Tool => Some(Decline::new(
                DeclineCode::ContentPart,
                "image in a tool message",
            )),
            Role::Assistant => Some(Decline::new(
                DeclineCode::AssistantImage,
                "image in an assistant message",
            )),
            Role::System | Role::Developer => Some(Decline::new(
                DeclineCode::SystemImage,
                "image in a system message",
            )),
        }
    })
}

/// Anthropic and Bedrock need a conversation: LiteLLM refuses system-only requests itself.
fn conversation_decline(messages: &[Message]) -> Option<Decline> {
    messages
        .iter()
        .all(|message| message.role.is_instruction())
        .then(|| Decline::new(DeclineCode::SystemOnly, "no user or assistant message"))
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
    use serde_json::json;

    fn allowed(provider: &str) -> &'static [&'static str] {
        crate::providers::registry::find(provider).unwrap().params
    }

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
        assert_eq!(admit_params(allowed("anthropic"), &p), Ok(()));
    }

    #[test]
    fn notable_params_decline_with_their_own_code() {
        // Bedrock's allowlist holds none of them but the tool params it maps itself.
        let mapped = [
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "response_format",
        ];
        for &code in NOTABLE_DECLINES {
            if mapped.contains(&code.as_str()) {
                continue;
            }
            let p = params(json!({ code.as_str(): true }));
            let decline = admit_params(allowed("bedrock"), &p).unwrap_err();
            assert_eq!(decline.code, code);
        }
    }

    #[test]
    fn unknown_params_decline_with_a_bounded_code() {
        let p = params(json!({"frobnicate": 1}));
        let decline = admit_params(allowed("bedrock"), &p).unwrap_err();
        assert_eq!(decline.code, DeclineCode::UnsupportedParam);
        assert!(decline.detail.contains("frobnicate"));
    }

    #[test]
    fn provider_specific_params_are_not_shared() {
        let p = params(json!({"seed": 1}));
        assert!(admit_params(allowed("openai"), &p).is_ok());
        assert!(admit_params(allowed("anthropic"), &p).is_err());
    }

    #[test]
    fn typed_param_readers_decline_other_types() {
        let p = params(json!({"temperature": "hot", "max_tokens": 1.5, "stop": [1]}));
        assert_eq!(
            number_param(&p, "temperature").unwrap_err().code,
            DeclineCode::ParamType
        );
        assert_eq!(
            integer_param(&p, "max_tokens").unwrap_err().code,
            DeclineCode::ParamType
        );
        assert_eq!(stop_param(&p).unwrap_err().code, DeclineCode::ParamType);
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
        Message::new(role, Content::Text(Bytes::from_static(text.as_bytes())))
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
            assert_eq!(
                blank_text_decline(&messages).unwrap().code,
                DeclineCode::BlankText
            );
        }
    }

    #[test]
    fn images_outside_user_turns_decline() {
        let image = |role| {
            Message::new(
                role,
                Content::Parts(vec![ContentPart::Image(crate::model::ImageUrl {
                    url: Bytes::from_static(b"data:image/png;base64,AAAA"),
                    detail: None,
                    format: None,
                })]),
            )
        };
        let user = [message(Role::User, "a"), image(Role::User)];
        assert_eq!(native_body_decline(&user), None);
        for (role, code) in [
            (Role::Assistant, DeclineCode::AssistantImage),
            (Role::System, DeclineCode::SystemImage),
            (Role::Developer, DeclineCode::SystemImage),
        ] {
            let messages = [message(Role::User, "a"), image(role)];
            assert_eq!(native_body_decline(&messages).unwrap().code, code);
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
