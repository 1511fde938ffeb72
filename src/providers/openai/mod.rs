//! OpenAI and OpenAI-compatible deployments: the chat body is forwarded with the upstream model
//! name; data URLs stay zero-copy string slices.

pub mod embedding;

use http::HeaderMap;
use serde_json::{Value, json};

use super::{Deployment, Refusal, TransformError, header, insert_secret};
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::{ChatRequest, Content, ContentPart, ImageUrl, Role};
use crate::wire::body::Node;

pub(crate) const DEFAULT_API_BASE: &str = "https://api.openai.com/v1";

/// Forwarded as given, like LiteLLM's OpenAI handler does for non-o-series models.
pub const PARAMS: &[&str] = &[
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "user",
];

pub struct OpenAi;

super::chat_provider!(OpenAi, "openai");

fn build_request(
    deployment: &Deployment,
    request: &ChatRequest,
) -> Result<UpstreamRequest, Refusal> {
    let base = deployment.api_base.as_deref().unwrap_or(DEFAULT_API_BASE);
    let url = format!("{}/chat/completions", base.trim_end_matches('/'));

    let messages = request
        .messages
        .iter()
        .map(|message| {
            // LiteLLM maps `developer` to `system` for every non-o-series model.
            let role = match message.role {
                Role::Developer => Role::System,
                role => role,
            };
            Ok(Node::object([
                ("role", Node::from(role.as_str())),
                ("content", content_node(&message.content)?),
            ]))
        })
        .collect::<Result<Vec<_>, TransformError>>()?;
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

    let mut headers = HeaderMap::new();
    let (name, value) = header("content-type", "application/json")?;
    headers.insert(name, value);
    if let Some(key) = &deployment.api_key {
        insert_secret(&mut headers, "authorization", &format!("Bearer {key}"))?;
    }
    Ok(UpstreamRequest {
        url,
        headers,
        body: RequestBody::Document(Node::Object(fields)),
        timeout: deployment.timeout,
        sigv4: None,
    })
}

fn content_node(content: &Content) -> Result<Node, TransformError> {
    match content {
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
fn parse_response(_deployment: &Deployment, body: Value) -> Result<Value, TransformError> {
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
