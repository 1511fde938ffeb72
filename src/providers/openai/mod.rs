//! OpenAI and OpenAI-compatible deployments: the chat body is forwarded with the upstream model
//! name; data URLs stay zero-copy string slices.

pub mod embedding;
pub mod endpoint;
pub mod stream;

use serde_json::{Map, Value, json};

use super::error::{Refusal, TransformError};
use super::provider::Deployment;
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::{
    ChatRequest, Content, ContentPart, Decline, DeclineCode, ImageUrl, Message, Role,
};
use crate::wire::body::Node;

pub fn build_request(
    deployment: &Deployment,
    request: &ChatRequest,
) -> Result<UpstreamRequest, Refusal> {
    if let Some(decline) = tool_params_decline(&request.params) {
        return Err(decline.into());
    }

    let messages = request
        .messages
        .iter()
        .map(message_node)
        .collect::<Result<Vec<_>, Refusal>>()?;
    let mut fields = vec![
        ("model".to_string(), Node::from(deployment.model.as_str())),
        ("messages".to_string(), Node::Array(messages)),
    ];
    // `stream: false` is LiteLLM's default and never sent.
    fields.extend(
        request
            .params
            .iter()
            .filter(|(name, _)| name.as_str() != "stream")
            .map(|(name, value)| (name.clone(), Node::Value(value.clone()))),
    );

    Ok(endpoint::upstream_request(
        deployment,
        "chat/completions",
        RequestBody::Document(Node::Object(fields)),
    )?)
}

fn message_node(message: &Message) -> Result<Node, Refusal> {
    // LiteLLM maps `developer` to `system` for every non-o-series model.
    let role = match message.role {
        Role::Developer => Role::System,
        role => role,
    };
    if role == Role::Tool {
        if let Content::Parts(parts) = &message.content {
            if parts
                .iter()
                .any(|part| matches!(part, ContentPart::Image(_)))
            {
                // LiteLLM moves images out of tool messages into a user turn.
                return Err(
                    Decline::new(DeclineCode::ContentPart, "image in a tool message").into(),
                );
            }
        }
    }
    let mut fields = vec![("role".to_string(), Node::from(role.as_str()))];
    // A turn without content is sent without the key, as LiteLLM drops `None` values.
    if !matches!(message.content, Content::Absent) {
        fields.push(("content".to_string(), content_node(&message.content)?));
    }
    if let Some(calls) = &message.tool_calls {
        fields.push(("tool_calls".to_string(), Node::Value(calls.clone())));
    }
    if let Some(id) = &message.tool_call_id {
        fields.push(("tool_call_id".to_string(), Node::from(id.as_str())));
    }
    Ok(Node::Object(fields))
}

/// Tools, `tool_choice`, `parallel_tool_calls` and `response_format` in the shapes LiteLLM
/// forwards unchanged to an OpenAI-compatible upstream. LiteLLM rewrites tool schemas with a
/// `pattern` or a top-level combinator, strips `cache_control`, and drops `tool_choice` without
/// tools: those requests stay on its path.
fn tool_params_decline(params: &Map<String, Value>) -> Option<Decline> {
    let tools = params.get("tools").filter(|tools| !tools.is_null());
    if let Some(tools) = tools {
        let well_formed = tools
            .as_array()
            .is_some_and(|tools| !tools.is_empty() && tools.iter().all(is_plain_function_tool));
        if !well_formed {
            return Some(Decline::new(
                DeclineCode::Tools,
                "tools LiteLLM rewrites (or an unusual tools shape)",
            ));
        }
    }
    if params
        .get("tool_choice")
        .is_some_and(|choice| !choice.is_null())
        && tools.is_none()
    {
        return Some(Decline::new(
            DeclineCode::ToolChoice,
            "tool_choice without tools",
        ));
    }
    match params.get("parallel_tool_calls") {
        None | Some(Value::Null | Value::Bool(_)) => {}
        Some(_) => return Some(Decline::new(DeclineCode::ParallelToolCalls, "not a bool")),
    }
    match params.get("response_format") {
        None | Some(Value::Null) => None,
        Some(format) if is_plain_response_format(format) => None,
        Some(_) => Some(Decline::new(
            DeclineCode::ResponseFormat,
            "an unusual response_format shape",
        )),
    }
}

/// `{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}`
/// whose schema LiteLLM leaves as it is.
fn is_plain_function_tool(tool: &Value) -> bool {
    const FUNCTION_KEYS: [&str; 4] = ["name", "description", "parameters", "strict"];
    const COMBINATORS: [&str; 6] = ["oneOf", "anyOf", "allOf", "enum", "const", "not"];
    let Some(tool) = tool.as_object() else {
        return false;
    };
    let Some(function) = tool.get("function").and_then(Value::as_object) else {
        return false;
    };
    tool.len() == 2
        && tool.get("type") == Some(&Value::from("function"))
        && function.get("name").is_some_and(Value::is_string)
        && function
            .keys()
            .all(|key| FUNCTION_KEYS.contains(&key.as_str()))
        && match function.get("parameters") {
            None => true,
            Some(Value::Object(schema)) => {
                !COMBINATORS.iter().any(|key| schema.contains_key(*key))
                    && !has_key(&function["parameters"], &["pattern", "cache_control"])
            }
            Some(_) => false,
        }
}

fn is_plain_response_format(format: &Value) -> bool {
    let Some(format) = format.as_object() else {
        return false;
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text" | "json_object") => format.len() == 1,
        Some("json_schema") => {
            format.len() == 2 && format.get("json_schema").is_some_and(Value::is_object)
        }
        _ => false,
    }
}

/// Whether any object inside `value` has one of `keys`.
fn has_key(value: &Value, keys: &[&str]) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(key, inner)| keys.contains(&key.as_str()) || has_key(inner, keys)),
        Value::Array(items) => items.iter().any(|item| has_key(item, keys)),
        _ => false,
    }
}

fn content_node(content: &Content) -> Result<Node, TransformError> {
    match content {
        Content::Absent => Ok(Node::Value(Value::Null)),
        Content::Text(text) => Ok(Node::Str(text.clone())),
        Content::Parts(parts) => parts
            .iter()
            .map(|part| match part {
                ContentPart::Text(text) => Ok(Node::object([
                    ("type", Node::from("text")),
                    ("text", Node::Str(text.clone())),
                ])),
                ContentPart::Image(image) => Ok(Node::object([
                    ("type", Node::from("image_url")),
                    ("image_url", image_url_node(image)?),
                ])),
            })
            .collect::<Result<Vec<_>, TransformError>>()
            .map(Node::Array),
    }
}

/// LiteLLM always sends the object form, even when the caller sent a bare URL string.
fn image_url_node(image: &ImageUrl) -> Result<Node, TransformError> {
    let url = Node::Str(image.url.clone());
    let mut fields = vec![("url".to_string(), url)];
    if let Some(detail) = &image.detail {
        fields.push(("detail".to_string(), Node::from(detail.as_str())));
    }
    if let Some(format) = &image.format {
        fields.push(("format".to_string(), Node::from(format.as_str())));
    }
    Ok(Node::Object(fields))
}

/// OpenAI already answers in the chat.completion shape; LiteLLM keeps every field and adds its
/// `provider_specific_fields` (the message's `refusal` moves there).
pub fn parse_response(_deployment: &Deployment, body: Value) -> Result<Value, TransformError> {
    let invalid = || TransformError::InvalidResponse("missing 'choices' in chat completion".into());
    let Value::Object(mut body) = body else {
        return Err(invalid());
    };
    let choices = body
        .get_mut("choices")
        .and_then(Value::as_array_mut)
        .ok_or_else(invalid)?;
    for choice in choices {
        let Value::Object(choice) = choice else {
            return Err(invalid());
        };
        match choice.get_mut("message") {
            Some(Value::Object(message)) => {
                let refusal = message.remove("refusal").unwrap_or(Value::Null);
                message
                    .entry("provider_specific_fields")
                    .or_insert_with(|| json!({"refusal": refusal}));
            }
            // LiteLLM's response conversion rejects a choice whose message is not an object.
            Some(_) => {
                return Err(TransformError::InvalidResponse(
                    "a choice's 'message' is not an object".into(),
                ));
            }
            None => {}
        }
        choice
            .entry("provider_specific_fields")
            .or_insert_with(|| json!({}));
    }
    match body.get_mut("usage") {
        Some(Value::Object(usage)) => fill_usage_details(usage),
        // LiteLLM reports zero usage when the provider sends none.
        None | Some(Value::Null) => {
            body.insert(
                "usage".into(),
                json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}),
            );
        }
        Some(_) => {
            return Err(TransformError::InvalidResponse(
                "'usage' is not an object".into(),
            ));
        }
    }
    body.entry("moderation").or_insert(Value::Null);
    body.entry("service_tier").or_insert(Value::Null);
    Ok(Value::Object(body))
}

/// The OpenAI SDK's usage detail models carry every field, null when absent; LiteLLM keeps them.
fn fill_usage_details(usage: &mut serde_json::Map<String, Value>) {
    const DETAIL_FIELDS: [(&str, &[&str]); 2] = [
        (
            "completion_tokens_details",
            &[
                "accepted_prediction_tokens",
                "audio_tokens",
                "reasoning_tokens",
                "rejected_prediction_tokens",
            ],
        ),
        ("prompt_tokens_details", &["audio_tokens", "cached_tokens"]),
    ];
    for (key, fields) in DETAIL_FIELDS {
        if let Some(Value::Object(details)) = usage.get_mut(key) {
            for field in fields {
                details.entry(*field).or_insert(Value::Null);
            }
        }
    }
}
