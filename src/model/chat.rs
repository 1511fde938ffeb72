//! The provider-neutral chat request, owned by Rust.
//!
//! The binding layer extracts messages into these types without copying text or media; anything
//! it cannot represent here is declined before any I/O.

use bytes::Bytes;
use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    /// A tool's result (`tool_call_id` says which call it answers).
    Tool,
}

impl Role {
    pub fn parse(role: &str) -> Option<Role> {
        match role {
            "system" => Some(Role::System),
            "developer" => Some(Role::Developer),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
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
    /// No content (`null` or absent): only an assistant turn that calls tools has none.
    Absent,
}

#[derive(Clone, Debug)]
pub struct Message {
    pub role: Role,
    pub content: Content,
    /// An assistant turn's tool calls, as the caller sent them (`[{"id", "type": "function",
    /// "function": {"name", "arguments"}}]`, checked at extraction).
    pub tool_calls: Option<Value>,
    /// A tool message's answer to this call id.
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: Role, content: Content) -> Message {
        Message {
            role,
            content,
            tool_calls: None,
            tool_call_id: None,
        }
    }

    /// Whether the message takes part in tool calling (a tool result, or a turn calling tools).
    pub fn is_tool_exchange(&self) -> bool {
        self.role == Role::Tool || self.tool_calls.is_some()
    }
}

/// A chat request after extraction: messages plus the optional OpenAI params the caller set
/// (None-valued params are already dropped, as LiteLLM does).
#[derive(Clone, Debug, Default)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub params: Map<String, Value>,
}
