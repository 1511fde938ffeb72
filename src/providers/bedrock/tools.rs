//! Function tools on Bedrock Converse, as LiteLLM 1.106.12 maps them (`_bedrock_tools_pt`,
//! `AmazonConverseConfig.map_openai_params`, `_bedrock_converse_messages_pt`,
//! `_transform_response`).
//!
//! Served: function tools whose names Bedrock accepts as they are (LiteLLM renames the others
//! through a process-wide cache), schemas LiteLLM only trims, `tool_choice` `auto`/`required`/
//! named, assistant `tool_calls` whose arguments are a JSON object (or empty), tool results as
//! text, `response_format` `text`/`json_object` (LiteLLM sends nothing for them) and
//! `json_schema` as LiteLLM's forced `json_tool_call` tool (the Python layer admits it only for
//! models without native structured output that take a forced tool choice), its answer turned
//! back into content. Declined: `tool_choice: "none"` (LiteLLM raises), `parallel_tool_calls`
//! (sent or dropped by model flags), a tool history without tools (LiteLLM rewrites the blocks
//! as text).

use serde_json::{Map, Value, json};

use crate::model::{Decline, DeclineCode, Message};
use crate::providers::tools::{
    ToolChoice, ToolResultText, answer_tool_call, function_tool, read_tool_choice, tool_calls,
    tool_result,
};
use crate::wire::body::Node;
use crate::wire::pyjson::python_json;

fn decline(code: DeclineCode, why: &str) -> Decline {
    Decline::new(code, why.to_string())
}

/// Names LiteLLM's `make_valid_bedrock_tool_name` leaves as they are.
fn is_valid_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// LiteLLM's tool for `response_format: json_schema` (`RESPONSE_FORMAT_TOOL_NAME`).
pub const JSON_TOOL: &str = "json_tool_call";

/// Tool-call ids LiteLLM sends unchanged.
fn is_valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}

fn tool_spec(tool: &Value) -> Result<Value, Decline> {
    let unusual = || decline(DeclineCode::Tools, "a tool LiteLLM rewrites for Bedrock");
    let (name, function) = function_tool(tool, is_valid_name).ok_or_else(unusual)?;
    let schema = match function.get("parameters") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(schema)) => schema.clone(),
        Some(_) => return Err(unusual()),
    };
    let kept = ["type", "properties", "required", "additionalProperties"];
    let dropped = ["title", "description", "$schema"];
    // Anything else (`$defs` to inline, combinators, …) LiteLLM rewrites.
    if schema
        .keys()
        .any(|key| !kept.contains(&key.as_str()) && !dropped.contains(&key.as_str()))
        || schema
            .get("type")
            .is_some_and(|kind| kind != &json!("object"))
    {
        return Err(unusual());
    }
    let mut json_schema = Map::new();
    json_schema.insert("type".into(), json!("object"));
    json_schema.insert(
        "properties".into(),
        schema
            .get("properties")
            .cloned()
            .unwrap_or_else(|| json!({})),
    );
    json_schema.insert(
        "required".into(),
        schema.get("required").cloned().unwrap_or_else(|| json!([])),
    );
    if let Some(additional) = schema.get("additionalProperties") {
        json_schema.insert("additionalProperties".into(), additional.clone());
    }
    let description = match function.get("description") {
        Some(Value::String(text)) if !text.is_empty() => text.as_str(),
        None | Some(Value::String(_)) | Some(Value::Null) => name,
        Some(_) => return Err(unusual()),
    };
    let mut spec = Map::new();
    spec.insert(
        "inputSchema".into(),
        json!({"json": Value::Object(json_schema)}),
    );
    spec.insert("name".into(), json!(name));
    spec.insert("description".into(), json!(description));
    match function.get("strict") {
        None | Some(Value::Null) => {}
        // Anthropic models on Bedrock take `strict` (LiteLLM's default for them).
        Some(strict @ Value::Bool(true)) => {
            spec.insert("strict".into(), strict.clone());
        }
        Some(_) => return Err(unusual()),
    }
    Ok(json!({"toolSpec": Value::Object(spec)}))
}

/// The `toolConfig` body field, if any, or a decline.
pub fn tool_config(
    params: &Map<String, Value>,
    messages: &[Message],
) -> Result<Option<Node>, Decline> {
    let present = |name: &str| params.get(name).filter(|v| !v.is_null());
    let json_tool = match present("response_format") {
        None => None,
        Some(format)
            if format == &json!({"type": "json_object"}) || format == &json!({"type": "text"}) =>
        {
            None
        }
        Some(format) => Some(json_schema_tool(format)?),
    };
    if present("parallel_tool_calls").is_some() {
        return Err(decline(
            DeclineCode::ParallelToolCalls,
            "sent or dropped by LiteLLM's per-model flags",
        ));
    }
    let user_tools = match present("tools") {
        Some(Value::Array(tools)) if !tools.is_empty() => {
            let own_name = Some(&json!(JSON_TOOL));
            if tools
                .iter()
                .any(|tool| tool.pointer("/function/name") == own_name)
            {
                return Err(decline(
                    DeclineCode::Tools,
                    "a tool named like LiteLLM's own",
                ));
            }
            Some(tools.iter().map(tool_spec).collect::<Result<Vec<_>, _>>()?)
        }
        Some(_) => return Err(decline(DeclineCode::Tools, "an unusual tools shape")),
        None => None,
    };
    let tools = match (json_tool, user_tools) {
        // LiteLLM puts its tool first (and forces it unless the caller chose).
        (Some(json_tool), user_tools) => {
            let mut tools = vec![json_tool];
            tools.extend(user_tools.unwrap_or_default());
            tools
        }
        (None, Some(tools)) => tools,
        (None, None) => {
            if messages.iter().any(Message::is_tool_exchange) {
                return Err(decline(
                    DeclineCode::MessageField,
                    "a tool history without tools (LiteLLM rewrites it as text)",
                ));
            }
            if present("tool_choice").is_some() {
                return Err(decline(
                    DeclineCode::ToolChoice,
                    "tool_choice without tools",
                ));
            }
            return Ok(None);
        }
    };
    let forced = tools.first().and_then(|t| t.pointer("/toolSpec/name")) == Some(&json!(JSON_TOOL));
    let mut config = vec![("tools".to_string(), Node::Value(Value::Array(tools)))];
    if let Some(choice) = present("tool_choice") {
        config.push(("toolChoice".to_string(), Node::Value(tool_choice(choice)?)));
    } else if forced {
        config.push((
            "toolChoice".to_string(),
            Node::Value(json!({"tool": {"name": JSON_TOOL}})),
        ));
    }
    Ok(Some(Node::Object(config)))
}

/// `response_format: {"type": "json_schema", "json_schema": {"schema", "description"?, …}}` as
/// LiteLLM's `json_tool_call` tool spec.
fn json_schema_tool(format: &Value) -> Result<Value, Decline> {
    let unusual = || {
        decline(
            DeclineCode::ResponseFormat,
            "a response_format LiteLLM maps in its own way",
        )
    };
    if format.get("type") != Some(&json!("json_schema")) {
        return Err(unusual());
    }
    let spec = format
        .get("json_schema")
        .and_then(Value::as_object)
        .ok_or_else(unusual)?;
    let schema = spec
        .get("schema")
        .filter(|s| s.is_object())
        .ok_or_else(unusual)?;
    let mut function = Map::new();
    function.insert("name".into(), json!(JSON_TOOL));
    function.insert("parameters".into(), schema.clone());
    if let Some(description) = spec.get("description").filter(|d| !d.is_null()) {
        function.insert("description".into(), description.clone());
    }
    tool_spec(&json!({"type": "function", "function": function})).map_err(|_| unusual())
}

fn tool_choice(choice: &Value) -> Result<Value, Decline> {
    let unusual = || {
        decline(
            DeclineCode::ToolChoice,
            "a tool_choice LiteLLM rejects or maps",
        )
    };
    match read_tool_choice(choice, is_valid_name).ok_or_else(unusual)? {
        ToolChoice::Auto => Ok(json!({"auto": {}})),
        ToolChoice::Required => Ok(json!({"any": {}})),
        ToolChoice::Function(name) => Ok(json!({"tool": {"name": name}})),
        // LiteLLM raises on it.
        ToolChoice::None => Err(unusual()),
    }
}

/// An assistant turn's `tool_calls` as `toolUse` blocks.
pub fn tool_use_blocks(calls: &Value) -> Result<Vec<Node>, Decline> {
    Ok(tool_calls(calls, is_valid_id, is_valid_name)?
        .into_iter()
        .map(|call| {
            Node::Value(json!({
                "toolUse": {"input": call.input, "name": call.name, "toolUseId": call.id},
            }))
        })
        .collect())
}

/// A `tool` message as the `toolResult` block LiteLLM sends (text content).
pub fn tool_result_block(message: &Message) -> Result<Node, Decline> {
    let (id, result) = tool_result(message, is_valid_id)?;
    let text = |text: &bytes::Bytes| Node::object([("text", Node::Str(text.clone()))]);
    let content = match result {
        ToolResultText::Text(body) => vec![text(body)],
        ToolResultText::Parts(parts) => parts.into_iter().map(text).collect(),
        ToolResultText::Absent => Vec::new(),
    };
    Ok(Node::object([(
        "toolResult",
        Node::object([
            ("content", Node::Array(content)),
            ("toolUseId", Node::from(id)),
        ]),
    )]))
}

/// LiteLLM's `_filter_json_mode_tools` (the answer to a forced `json_tool_call`): when only it
/// was called, its arguments become the content (replacing the text) and a `tool_calls` finish
/// becomes `stop`; next to real tool calls, they are appended to the text.
pub fn json_mode_answer(
    text: String,
    tool_calls: Vec<Value>,
    finish: &'static str,
) -> (String, Vec<Value>, &'static str) {
    let is_json_tool = |call: &Value| call.pointer("/function/name") == Some(&json!(JSON_TOOL));
    let Some(json_call) = tool_calls.iter().find(|call| is_json_tool(call)) else {
        return (text, tool_calls, finish);
    };
    let arguments = json_call
        .pointer("/function/arguments")
        .and_then(Value::as_str)
        .map(unwrap_properties)
        .unwrap_or_default();
    let real: Vec<Value> = tool_calls
        .iter()
        .filter(|c| !is_json_tool(c))
        .cloned()
        .collect();
    if real.is_empty() {
        let finish = if finish == "tool_calls" {
            "stop"
        } else {
            finish
        };
        return (arguments, real, finish);
    }
    (text + &arguments, real, finish)
}

/// LiteLLM's `_unwrap_bedrock_properties`: `{"properties": X}` alone becomes `X`.
fn unwrap_properties(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) if map.len() == 1 && map.contains_key("properties") => {
            python_json(&map["properties"])
        }
        _ => arguments.to_string(),
    }
}

/// `toolUse` blocks of an answer as LiteLLM's tool calls: `index` is the block's position in the
/// content, `arguments` Python's `json.dumps` of the input.
pub fn answer_tool_calls(blocks: &[Value]) -> Vec<Value> {
    blocks
        .iter()
        .enumerate()
        .filter_map(|(index, block)| {
            let tool = block.get("toolUse")?;
            Some(answer_tool_call(
                index,
                tool.get("toolUseId"),
                tool.get("name"),
                tool.get("input"),
            ))
        })
        .collect()
}
