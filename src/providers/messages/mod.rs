//! The Anthropic Messages API (`/v1/messages`): the caller's Messages body to Anthropic
//! (`POST {base}/v1/messages`) or to Bedrock Invoke (`POST {endpoint}/model/{id}/invoke`), with
//! the rewrites LiteLLM 1.106.12's `anthropic_messages` applies, and nothing else.
//!
//! The Python layer picks and orders the small top-level fields (it asks LiteLLM's own
//! functions how they treat the model's thinking and sampling params); this module walks the
//! large ones — `messages`, `system`, `tools` — where LiteLLM rewrites blocks:
//! - empty or whitespace-only text blocks and empty unsigned thinking blocks are dropped, and a
//!   message left without blocks with them;
//! - a block's `provider_specific_fields` is dropped;
//! - Bedrock: `system` always goes as a list of blocks, without billing-header blocks.
//!
//! Rewrites this module does not reproduce decline before any I/O: tool ids LiteLLM sanitizes,
//! block types it flattens or strips (server tools, advisor, web search results), reasoning
//! another provider encrypted, Bedrock's cache-control TTL rules and tool schema fix-ups.

pub mod stream;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::anthropic::endpoint::{DEFAULT_API_BASE, messages_url};
use super::bedrock::endpoint::{aws_request, endpoint};
use super::chunks::is_truthy;
use super::error::Refusal;
use super::parts::{header, insert_secret, post};
use super::provider::{Deployment, MessagesApi};
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::{Decline, DeclineCode};
use crate::wire::body::Node;

/// What LiteLLM puts into every Bedrock Invoke body for Claude.
pub const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";
/// LiteLLM's marker for reasoning another provider encrypted (only that provider can read it).
const ENCRYPTED_REASONING_PREFIX: &[u8] = b"litellm_encrypted_reasoning:";
/// Gemini's suffix on tool-call ids, which LiteLLM cuts off.
const THOUGHT_SIGNATURE_SEPARATOR: &[u8] = b"__thought__";
/// Claude Code's billing note in `system`, which LiteLLM drops for Bedrock.
const BILLING_HEADER_PREFIX: &[u8] = b"x-anthropic-billing-header:";

/// Block types LiteLLM forwards as given (others are rewritten, flattened or stripped).
const FORWARDED_BLOCKS: &[&str] = &[
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
];

/// A `/v1/messages` request, as the Python layer hands it over.
#[derive(Debug)]
pub struct MessagesRequest {
    /// The top-level body fields in LiteLLM's order: `messages`, `max_tokens`, then the params
    /// LiteLLM keeps (Anthropic's body also has `model` and `stream`, added here).
    pub fields: Vec<(String, Node)>,
    pub stream: bool,
    /// Headers LiteLLM sends besides the credential: `anthropic-version`, `anthropic-beta` and
    /// the caller's extra headers, already merged the way LiteLLM merges them.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// A request ready to send.
#[derive(Debug)]
pub struct PreparedMessages {
    pub upstream: UpstreamRequest,
    /// Where it goes (what its answer's bytes are).
    pub api: MessagesApi,
    /// Blocks or messages were dropped from `messages` (LiteLLM logs what it sent).
    pub rewrote_messages: bool,
}

/// Admission and transform, before any I/O: the upstream request, or why not.
pub fn prepare(
    deployment: &Deployment,
    request: MessagesRequest,
) -> Result<PreparedMessages, Refusal> {
    let Some(api) = deployment.provider.messages_api else {
        let detail = format!("/v1/messages on {}", deployment.provider.name);
        return Err(Decline::new(DeclineCode::Provider, detail).into());
    };
    let bedrock = api == MessagesApi::BedrockInvoke;
    let mut fields = Vec::with_capacity(request.fields.len() + 3);
    let mut rewrote_messages = false;
    for (name, node) in request.fields {
        let node = match name.as_str() {
            "messages" => {
                let (node, rewrote) = messages(node, bedrock)?;
                rewrote_messages = rewrote;
                node
            }
            "system" if bedrock => match bedrock_system(node)? {
                Some(node) => node,
                None => continue,
            },
            "system" => {
                check_cache_control_tree(&node, bedrock)?;
                node
            }
            "tools" => tools(node, bedrock)?,
            _ => node,
        };
        fields.push((name, node));
    }
    let mut upstream = if bedrock {
        fields.push((
            "anthropic_version".into(),
            Node::Value(json!(BEDROCK_ANTHROPIC_VERSION)),
        ));
        bedrock_request(deployment, fields, request.stream)?
    } else {
        anthropic_request(deployment, fields, request.stream)?
    };
    for (name, value) in request.headers {
        upstream.headers.insert(name, value);
    }
    deployment.add_extra_headers(&mut upstream.headers);
    Ok(PreparedMessages {
        upstream,
        api,
        rewrote_messages,
    })
}

fn anthropic_request(
    deployment: &Deployment,
    mut fields: Vec<(String, Node)>,
    stream: bool,
) -> Result<UpstreamRequest, Refusal> {
    // LiteLLM's order: messages, max_tokens, model, then the optional params with `stream`
    // among them (always sent: `false` unless streaming).
    let at = fields.len().min(2);
    fields.insert(at, ("model".into(), Node::from(deployment.model.as_str())));
    let stream_at = fields
        .iter()
        .position(|(name, _)| {
            !matches!(
                name.as_str(),
                "messages" | "max_tokens" | "model" | "metadata" | "stop_sequences"
            )
        })
        .unwrap_or(fields.len());
    fields.insert(
        stream_at,
        ("stream".into(), Node::Value(Value::Bool(stream))),
    );
    let base = deployment.api_base.as_deref().unwrap_or(DEFAULT_API_BASE);
    // No slash trimming here, unlike LiteLLM's chat route.
    let url = messages_url(base);
    let mut headers = HeaderMap::new();
    if let Some(key) = &deployment.api_key {
        insert_secret(&mut headers, "x-api-key", key)?;
    }
    let (name, value) = header("content-type", "application/json")?;
    headers.insert(name, value);
    let body = RequestBody::Document(Node::Object(fields));
    Ok(post(url, headers, body, deployment.timeout))
}

fn bedrock_request(
    deployment: &Deployment,
    fields: Vec<(String, Node)>,
    stream: bool,
) -> Result<UpstreamRequest, Refusal> {
    let aws = deployment.aws()?;
    // LiteLLM puts a plain model id into the Invoke path as is (ARNs are declined in Python).
    let action = if stream {
        "invoke-with-response-stream"
    } else {
        "invoke"
    };
    let url = format!("{}/model/{}/{action}", endpoint(aws), deployment.model);
    Ok(aws_request(
        deployment,
        url,
        RequestBody::Document(Node::Object(fields)),
    )?)
}

fn declined(code: DeclineCode, detail: impl Into<String>) -> Refusal {
    Refusal::Declined(Decline::new(code, detail))
}

fn field<'a>(pairs: &'a [(String, Node)], key: &str) -> Option<&'a Node> {
    pairs
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, node)| node)
}

fn str_bytes(node: Option<&Node>) -> Option<&[u8]> {
    match node {
        Some(Node::Str(bytes)) => Some(bytes),
        Some(Node::Value(Value::String(text))) => Some(text.as_bytes()),
        _ => None,
    }
}

/// Python's `str.strip()` whitespace: Unicode White_Space plus the four separators
/// U+001C..U+001F.
fn is_python_blank(bytes: &[u8]) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(text) => text
            .chars()
            .all(|c| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)),
        // Not UTF-8: laying out the body fails it later, with a clear error.
        Err(_) => false,
    }
}

/// LiteLLM's `_is_empty_text_block` / `is_empty_unsigned_thinking_block`.
fn is_dropped_block(block: &[(String, Node)]) -> bool {
    match str_bytes(field(block, "type")) {
        Some(b"text") => str_bytes(field(block, "text")).is_none_or(is_python_blank),
        Some(b"thinking") => {
            let empty = str_bytes(field(block, "thinking")).is_none_or(is_python_blank);
            let signed = match field(block, "signature") {
                Some(Node::Str(bytes)) => !bytes.is_empty(),
                Some(Node::Value(value)) => is_truthy(value),
                Some(_) => true,
                None => false,
            };
            empty && !signed
        }
        _ => false,
    }
}

fn valid_tool_id(id: &[u8]) -> bool {
    !id.is_empty()
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
        && !id
            .windows(THOUGHT_SIGNATURE_SEPARATOR.len())
            .any(|w| w == THOUGHT_SIGNATURE_SEPARATOR)
}

/// The messages as LiteLLM sends them, and whether that differs from what the caller sent.
fn messages(node: Node, bedrock: bool) -> Result<(Node, bool), Refusal> {
    let Node::Array(items) = node else {
        return Err(declined(
            DeclineCode::MalformedMessage,
            "messages is not a list",
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    let mut rewrote = false;
    for (index, item) in items.into_iter().enumerate() {
        let Node::Object(mut message) = item else {
            return Err(declined(
                DeclineCode::MalformedMessage,
                format!("messages[{index}] is not an object"),
            ));
        };
        match str_bytes(field(&message, "role")) {
            Some(b"user" | b"assistant") => {}
            // Bedrock: LiteLLM hoists or converts system turns per model.
            Some(b"system") if !bedrock => {}
            _ => {
                return Err(declined(
                    DeclineCode::MessageRole,
                    format!("messages[{index}] role"),
                ));
            }
        }
        let Some(position) = message.iter().position(|(name, _)| name == "content") else {
            return Err(declined(
                DeclineCode::MessageWithoutContent,
                format!("messages[{index}] has no content"),
            ));
        };
        let content = std::mem::replace(&mut message[position].1, Node::Value(Value::Null));
        match content {
            Node::Str(_) | Node::Value(Value::String(_)) => message[position].1 = content,
            Node::Array(blocks) => {
                let before = blocks.len();
                let (kept, stripped) = content_blocks(blocks, index, bedrock)?;
                rewrote |= stripped;
                if kept.is_empty() && before > 0 {
                    // LiteLLM omits a message whose blocks were all dropped.
                    continue;
                }
                message[position].1 = Node::Array(kept);
            }
            _ => {
                return Err(declined(
                    DeclineCode::MalformedMessage,
                    format!("messages[{index}].content is neither text nor a list"),
                ));
            }
        }
        out.push(Node::Object(message));
    }
    Ok((Node::Array(out), rewrote))
}

/// The blocks LiteLLM keeps, and whether it dropped or trimmed any.
fn content_blocks(
    blocks: Vec<Node>,
    index: usize,
    bedrock: bool,
) -> Result<(Vec<Node>, bool), Refusal> {
    let mut kept = Vec::with_capacity(blocks.len());
    let mut rewrote = false;
    for block in blocks {
        let Node::Object(mut block) = block else {
            return Err(declined(
                DeclineCode::MalformedMessage,
                format!("a block of messages[{index}] is not an object"),
            ));
        };
        let kind = str_bytes(field(&block, "type")).unwrap_or_default();
        if !FORWARDED_BLOCKS.iter().any(|name| name.as_bytes() == kind) {
            return Err(declined(
                DeclineCode::MessagesBlock,
                format!(
                    "a {:?} block in messages[{index}]",
                    String::from_utf8_lossy(kind)
                ),
            ));
        }
        let id_key = match kind {
            b"tool_use" => Some("id"),
            b"tool_result" => Some("tool_use_id"),
            _ => None,
        };
        if let Some(key) = id_key
            && !str_bytes(field(&block, key)).is_some_and(valid_tool_id)
        {
            return Err(declined(
                DeclineCode::MessagesBlock,
                format!("a tool id LiteLLM rewrites in messages[{index}]"),
            ));
        }
        let reasoning_key = match kind {
            b"thinking" => Some("signature"),
            b"redacted_thinking" => Some("data"),
            _ => None,
        };
        if let Some(key) = reasoning_key
            && str_bytes(field(&block, key))
                .is_some_and(|value| value.starts_with(ENCRYPTED_REASONING_PREFIX))
        {
            return Err(declined(
                DeclineCode::MessagesBlock,
                format!("another provider's encrypted reasoning in messages[{index}]"),
            ));
        }
        if is_dropped_block(&block) {
            rewrote = true;
            continue;
        }
        let fields = block.len();
        block.retain(|(name, _)| name != "provider_specific_fields");
        rewrote |= block.len() != fields;
        let block = Node::Object(block);
        check_cache_control_tree(&block, bedrock)?;
        kept.push(block);
    }
    Ok((kept, rewrote))
}

/// Bedrock keeps `cache_control: {type}` and rewrites every other form (TTL per model, scope
/// removed); Anthropic forwards all of them.
fn check_cache_control_tree(node: &Node, bedrock: bool) -> Result<(), Refusal> {
    if !bedrock {
        return Ok(());
    }
    match node {
        Node::Object(pairs) => {
            for (name, value) in pairs {
                if name == "cache_control" {
                    let plain = match value {
                        Node::Object(inner) => inner.iter().all(|(key, _)| key == "type"),
                        Node::Value(Value::Object(inner)) => inner.keys().all(|key| key == "type"),
                        _ => false,
                    };
                    if !plain {
                        return Err(declined(
                            DeclineCode::MessagesBlock,
                            "a cache_control Bedrock rewrites",
                        ));
                    }
                } else {
                    check_cache_control_tree(value, bedrock)?;
                }
            }
            Ok(())
        }
        Node::Array(items) => items
            .iter()
            .try_for_each(|item| check_cache_control_tree(item, bedrock)),
        Node::Value(value) => check_cache_control_value(value),
        _ => Ok(()),
    }
}

fn check_cache_control_value(value: &Value) -> Result<(), Refusal> {
    match value {
        Value::Object(map) => {
            for (name, inner) in map {
                if name == "cache_control" {
                    if !inner
                        .as_object()
                        .is_some_and(|inner| inner.keys().all(|key| key == "type"))
                    {
                        return Err(declined(
                            DeclineCode::MessagesBlock,
                            "a cache_control Bedrock rewrites",
                        ));
                    }
                } else {
                    check_cache_control_value(inner)?;
                }
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(check_cache_control_value),
        _ => Ok(()),
    }
}

/// LiteLLM's Bedrock `system`: always a list of blocks, billing-header notes dropped, the
/// field left out when nothing remains.
fn bedrock_system(node: Node) -> Result<Option<Node>, Refusal> {
    let blocks = match node {
        Node::Str(text) => vec![text_block(Node::Str(text))],
        Node::Value(Value::String(text)) => vec![text_block(Node::Value(Value::String(text)))],
        Node::Array(blocks) => blocks,
        _ => {
            return Err(declined(
                DeclineCode::MessagesParam,
                "system is neither text nor a list",
            ));
        }
    };
    let mut kept = Vec::with_capacity(blocks.len());
    for block in blocks {
        let Node::Object(pairs) = &block else {
            return Err(declined(
                DeclineCode::MessagesParam,
                "a system block is not an object",
            ));
        };
        if str_bytes(field(pairs, "type")) == Some(b"text")
            && str_bytes(field(pairs, "text"))
                .is_some_and(|text| text.starts_with(BILLING_HEADER_PREFIX))
        {
            continue;
        }
        check_cache_control_tree(&block, true)?;
        kept.push(block);
    }
    Ok((!kept.is_empty()).then_some(Node::Array(kept)))
}

fn text_block(text: Node) -> Node {
    Node::object([("type", Node::from("text")), ("text", text)])
}

/// Custom tools go as given; server tools (web search, computer use, tool search, advisor,
/// MCP) come with betas and rewrites LiteLLM adds per model.
fn tools(node: Node, bedrock: bool) -> Result<Node, Refusal> {
    let Node::Array(items) = &node else {
        return Err(declined(DeclineCode::MessagesTool, "tools is not a list"));
    };
    for (index, tool) in items.iter().enumerate() {
        let Node::Object(pairs) = tool else {
            return Err(declined(
                DeclineCode::MessagesTool,
                format!("tools[{index}] is not an object"),
            ));
        };
        match field(pairs, "type") {
            None => {}
            Some(kind) if str_bytes(Some(kind)) == Some(b"custom") => {}
            Some(_) => {
                return Err(declined(
                    DeclineCode::MessagesTool,
                    format!("tools[{index}] is a server tool"),
                ));
            }
        }
        if pairs.iter().any(|(name, _)| {
            matches!(
                name.as_str(),
                "eager_input_streaming" | "custom" | "defer_loading"
            )
        }) {
            return Err(declined(
                DeclineCode::MessagesTool,
                format!("tools[{index}] has a field LiteLLM rewrites"),
            ));
        }
        if bedrock {
            let named = str_bytes(field(pairs, "name")).is_some_and(|name| !is_python_blank(name));
            let schema = field(pairs, "input_schema").map(Node::to_value);
            if !named || schema.as_ref().is_some_and(has_custom_schema_type) {
                return Err(declined(
                    DeclineCode::MessagesTool,
                    format!("tools[{index}] needs LiteLLM's Bedrock fix-ups"),
                ));
            }
        }
        check_cache_control_tree(tool, bedrock)?;
    }
    Ok(node)
}

/// Whether a schema has `type: "custom"` anywhere LiteLLM's Bedrock normalizer looks.
fn has_custom_schema_type(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.get("type").and_then(Value::as_str) == Some("custom")
                || map.values().any(has_custom_schema_type)
        }
        Value::Array(items) => items.iter().any(has_custom_schema_type),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Node {
        Node::from(s)
    }

    #[test]
    fn blank_text_and_unsigned_empty_thinking_are_dropped() {
        let blocks = vec![
            Node::object([("type", text("text")), ("text", text(" \n\u{1c}"))]),
            Node::object([("type", text("thinking")), ("thinking", text(""))]),
            Node::object([
                ("type", text("thinking")),
                ("thinking", text("")),
                ("signature", text("sig")),
            ]),
            Node::object([("type", text("text")), ("text", text("hi"))]),
        ];
        let (kept, rewrote) = content_blocks(blocks, 0, false).unwrap();
        assert_eq!(kept.len(), 2);
        assert!(rewrote);
    }

    #[test]
    fn tool_ids_litellm_rewrites_decline() {
        assert!(valid_tool_id(b"toolu_01-A"));
        assert!(!valid_tool_id(b"call.abc:1"));
        assert!(!valid_tool_id(b""));
        assert!(!valid_tool_id(b"abc__thought__sig"));
    }

    #[test]
    fn bedrock_system_becomes_blocks_without_billing_notes() {
        let system = bedrock_system(text("be nice")).unwrap().unwrap();
        assert_eq!(
            system.to_value(),
            json!([{"type": "text", "text": "be nice"}])
        );
        let only_billing = Node::Array(vec![Node::object([
            ("type", text("text")),
            ("text", text("x-anthropic-billing-header: cc_version=1")),
        ])]);
        assert!(bedrock_system(only_billing).unwrap().is_none());
    }

    #[test]
    fn bedrock_cache_control_beyond_type_declines() {
        let block = Node::Value(json!({"type": "text", "text": "a",
            "cache_control": {"type": "ephemeral", "ttl": "1h"}}));
        assert!(check_cache_control_tree(&block, true).is_err());
        assert!(check_cache_control_tree(&block, false).is_ok());
    }
}
