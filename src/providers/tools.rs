//! Function tools as the transforms that convert them (Anthropic, Bedrock) read them: tool
//! definitions, `tool_choice`, an assistant turn's tool calls, and an answer's tool-use blocks
//! as LiteLLM's tool calls. Each provider writes its own blocks from these.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::model::{Content, ContentPart, Decline, DeclineCode, Message};
use crate::wire::pyjson::python_json;

/// The `function` of an OpenAI function tool (`{"type": "function", "function": {name,
/// description?, parameters?, strict?}}` and nothing else) whose name the provider takes as it
/// is; None for any other shape (LiteLLM renames or rewrites those).
pub fn function_tool(
    tool: &Value,
    valid_name: fn(&str) -> bool,
) -> Option<(&str, &Map<String, Value>)> {
    let object = tool.as_object()?;
    if object.len() != 2 || object.get("type").and_then(Value::as_str) != Some("function") {
        return None;
    }
    let function = object.get("function")?.as_object()?;
    if function
        .keys()
        .any(|key| !["name", "description", "parameters", "strict"].contains(&key.as_str()))
    {
        return None;
    }
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .filter(|name| valid_name(name))?;
    Some((name, function))
}

/// One assistant tool call as the Anthropic and Bedrock transforms read it: `arguments` parsed
/// the way LiteLLM parses them (empty means `{}`).
pub struct ToolCall<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub input: Value,
}

/// An assistant turn's `tool_calls`, with ids and names the provider takes as they are
/// (`valid_id`, `valid_name`): LiteLLM rewrites the others, repairs or empties arguments that
/// are not a JSON object and drops repeated ids; those calls decline.
pub fn tool_calls<'a>(
    calls: &'a Value,
    valid_id: fn(&str) -> bool,
    valid_name: fn(&str) -> bool,
) -> Result<Vec<ToolCall<'a>>, Decline> {
    let unusual = |why: &str| Decline::new(DeclineCode::MessageField, why.to_string());
    let calls = calls
        .as_array()
        .ok_or_else(|| unusual("tool_calls is not a list"))?;
    let mut parsed: Vec<ToolCall<'a>> = Vec::with_capacity(calls.len());
    for call in calls {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| valid_id(id))
            .ok_or_else(|| unusual("a tool call id LiteLLM rewrites"))?;
        if parsed.iter().any(|seen| seen.id == id) {
            return Err(unusual("a repeated tool call id"));
        }
        let function = call
            .get("function")
            .ok_or_else(|| unusual("a tool call without function"))?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| valid_name(name))
            .ok_or_else(|| unusual("a tool name LiteLLM rewrites"))?;
        let input = match function.get("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(Value::String(text)) if text.trim().is_empty() => Value::Object(Map::new()),
            Some(Value::String(text)) => serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| unusual("tool call arguments that are not a JSON object"))?,
            Some(_) => return Err(unusual("tool call arguments that are not a string")),
        };
        parsed.push(ToolCall { id, name, input });
    }
    Ok(parsed)
}

/// A tool-use block of an answer as LiteLLM's tool call: `index` is the block's position in the
/// answer's content, `arguments` Python's `json.dumps` of the input (Anthropic and Bedrock).
pub fn answer_tool_call(
    index: usize,
    id: Option<&Value>,
    name: Option<&Value>,
    input: Option<&Value>,
) -> Value {
    let empty = Value::Object(Map::new());
    let arguments = python_json(input.unwrap_or(&empty));
    serde_json::json!({
        "index": index,
        "function": {"arguments": arguments, "name": name},
        "id": id,
        "type": "function",
    })
}

/// An OpenAI `tool_choice` in a form both conversions read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChoice<'a> {
    Auto,
    None,
    Required,
    Function(&'a str),
}

/// `"auto"`, `"none"`, `"required"` (as a string or `{"type": ...}` alone), or a named
/// function whose name the provider takes as it is (`valid_name`); None for any other shape.
pub fn read_tool_choice(choice: &Value, valid_name: fn(&str) -> bool) -> Option<ToolChoice<'_>> {
    let kind = match choice {
        Value::String(kind) => kind.as_str(),
        Value::Object(object) => match object.get("type").and_then(Value::as_str) {
            Some("function") => {
                return object
                    .get("function")
                    .and_then(|function| function.get("name"))
                    .and_then(Value::as_str)
                    .filter(|name| valid_name(name))
                    .map(ToolChoice::Function);
            }
            Some(kind) if object.len() == 1 => kind,
            _ => return None,
        },
        _ => return None,
    };
    match kind {
        "auto" => Some(ToolChoice::Auto),
        "none" => Some(ToolChoice::None),
        "required" => Some(ToolChoice::Required),
        _ => None,
    }
}

/// A `tool` message's content, text only (LiteLLM moves images out of tool turns).
pub enum ToolResultText<'a> {
    Text(&'a Bytes),
    Parts(Vec<&'a Bytes>),
    Absent,
}

/// A `tool` message as both conversions read it: its `tool_call_id`, when the provider takes it
/// as it is (`valid_id`), and its text.
pub fn tool_result(
    message: &Message,
    valid_id: fn(&str) -> bool,
) -> Result<(&str, ToolResultText<'_>), Decline> {
    let id = message
        .tool_call_id
        .as_deref()
        .filter(|id| valid_id(id))
        .ok_or_else(|| {
            Decline::new(DeclineCode::MessageField, "a tool_call_id LiteLLM rewrites")
        })?;
    let text = match &message.content {
        Content::Text(text) => ToolResultText::Text(text),
        Content::Parts(parts) => ToolResultText::Parts(
            parts
                .iter()
                .map(|part| match part {
                    ContentPart::Text(text) => Ok(text),
                    ContentPart::Image(_) => Err(Decline::new(
                        DeclineCode::ContentPart,
                        "an image in a tool message",
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Content::Absent => ToolResultText::Absent,
    };
    Ok((id, text))
}
