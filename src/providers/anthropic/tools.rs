//! Function tools on Anthropic, as LiteLLM 1.106.12 maps them (`AnthropicConfig._map_tools`,
//! `_map_tool_choice`, `anthropic_messages_pt`, `_transform_response`).
//!
//! Served: function tools whose names Anthropic accepts as they are (LiteLLM would rename the
//! others and map the names back), schemas LiteLLM only trims (no `definitions` to inline),
//! `tool_choice` in every OpenAI form, `parallel_tool_calls`, assistant `tool_calls` whose
//! arguments are JSON (or empty), tool results as text, `response_format` `text`/`json_object`
//! (LiteLLM sends nothing for them). Everything else declines.

use serde_json::{Map, Value, json};

use crate::model::{Decline, DeclineCode, Message};
use crate::providers::tools::{
    ToolChoice, ToolResultText, answer_tool_call, function_tool, read_tool_choice, tool_calls,
    tool_result,
};
use crate::wire::body::Node;

/// Schema keys LiteLLM's `sanitize_input_schema_for_anthropic` keeps at the top level.
/// (`$defs` it keeps too, but with references it may inline: declined.)
const SCHEMA_KEYS: &[&str] = &[
    "type",
    "properties",
    "additionalProperties",
    "required",
    "strict",
];
/// Keys LiteLLM drops silently (the rest it inlines or rewrites: declined).
const DROPPED_SCHEMA_KEYS: &[&str] = &["$schema", "title", "description"];

fn decline(code: DeclineCode, why: &str) -> Decline {
    Decline::new(code, why.to_string())
}

/// Anthropic's tool-name rule; LiteLLM renames (and maps back) any other name.
fn is_valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One OpenAI function tool as LiteLLM sends it: `{name, input_schema, type: custom,
/// description?}`.
fn tool(tool: &Value) -> Result<Value, Decline> {
    let unusual = || decline(DeclineCode::Tools, "a tool LiteLLM rewrites for Anthropic");
    let (name, function) = function_tool(tool, is_valid_name).ok_or_else(unusual)?;
    let schema = match function.get("parameters") {
        None => json!({"type": "object", "properties": {}}),
        Some(Value::Object(schema)) => input_schema(schema).ok_or_else(unusual)?,
        Some(_) => return Err(unusual()),
    };
    let mut out = Map::new();
    out.insert("name".into(), json!(name));
    out.insert("input_schema".into(), schema);
    out.insert("type".into(), json!("custom"));
    match function.get("description") {
        None => {}
        Some(Value::String(description)) => {
            out.insert("description".into(), json!(description));
        }
        Some(_) => return Err(unusual()),
    }
    Ok(Value::Object(out))
}

/// The schema trimmed as LiteLLM trims it, or None when LiteLLM would do more (inline
/// `definitions`, drop combinators).
fn input_schema(schema: &Map<String, Value>) -> Option<Value> {
    let mut out = Map::new();
    for (key, value) in schema {
        if SCHEMA_KEYS.contains(&key.as_str()) {
            out.insert(key.clone(), value.clone());
        } else if !DROPPED_SCHEMA_KEYS.contains(&key.as_str()) {
            return None;
        }
    }
    if out.get("type") != Some(&json!("object")) {
        // Set in place when present, appended when missing (dict assignment keeps the order).
        out.insert("type".into(), json!("object"));
    }
    if !out.contains_key("properties") {
        out.insert("properties".into(), json!({}));
    }
    Some(Value::Object(out))
}

/// LiteLLM's placeholder when the history holds tool calls but the request has no tools.
fn dummy_tool() -> Value {
    json!({
        "name": "dummy_tool",
        "input_schema": {"type": "object", "properties": {}},
        "type": "custom",
        "description": "This is a dummy tool call",
    })
}

/// Anthropic's beta for `output_format` (LiteLLM adds it with the field).
pub const STRUCTURED_OUTPUTS_BETA: &str = "structured-outputs-2025-11-13";

/// Schema keywords LiteLLM's `filter_anthropic_output_schema` removes (noting them in the
/// description): declined rather than reworded.
const OUTPUT_SCHEMA_CONSTRAINTS: &[&str] = &[
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "if",
    "then",
    "else",
    "not",
];

/// `response_format: json_schema` as LiteLLM's `output_format` (the Python layer admits it only
/// for models with native structured output): every object node gets `additionalProperties:
/// false`. Schemas LiteLLM rewrites further (`$ref`/`$defs` to inline, constraints it moves into
/// descriptions, `oneOf`, `enum`) decline.
pub fn output_format(format: &Value) -> Result<Value, Decline> {
    let unusual = || {
        decline(
            DeclineCode::ResponseFormat,
            "a response_format LiteLLM rewrites for Anthropic",
        )
    };
    let schema = format
        .pointer("/json_schema/schema")
        .filter(|schema| schema.is_object())
        .ok_or_else(unusual)?;
    Ok(json!({"type": "json_schema", "schema": output_schema(schema).ok_or_else(unusual)?}))
}

fn output_schema(schema: &Value) -> Option<Value> {
    let Value::Object(node) = schema else {
        return Some(schema.clone());
    };
    let mut out = Map::new();
    for (key, value) in node {
        let key = key.as_str();
        if OUTPUT_SCHEMA_CONSTRAINTS.contains(&key)
            || matches!(key, "$ref" | "$defs" | "definitions" | "oneOf" | "enum")
        {
            return None;
        }
        let value = match (key, value) {
            ("properties", Value::Object(properties)) => Value::Object(
                properties
                    .iter()
                    .map(|(name, inner)| Some((name.clone(), output_schema(inner)?)))
                    .collect::<Option<Map<_, _>>>()?,
            ),
            ("items", inner @ Value::Object(_)) => output_schema(inner)?,
            ("anyOf" | "allOf", Value::Array(items)) => Value::Array(
                items
                    .iter()
                    .map(output_schema)
                    .collect::<Option<Vec<_>>>()?,
            ),
            _ => value.clone(),
        };
        out.insert(key.to_string(), value);
    }
    if out.get("type") == Some(&json!("object")) {
        // Set in place when present, appended when not (a Python dict assignment).
        out.insert("additionalProperties".into(), json!(false));
    }
    Some(Value::Object(out))
}

/// `tools` and `tool_choice` body fields (in that order), or a decline.
pub fn tool_fields(
    params: &Map<String, Value>,
    messages: &[Message],
) -> Result<Vec<(String, Node)>, Decline> {
    let present = |name: &str| params.get(name).filter(|v| !v.is_null());
    let mut fields = Vec::new();
    match present("response_format") {
        None => {}
        Some(format)
            if format == &json!({"type": "json_object"}) || format == &json!({"type": "text"}) => {}
        Some(format) if format.get("type") == Some(&json!("json_schema")) => {
            fields.push(("output_format".into(), Node::Value(output_format(format)?)));
        }
        Some(_) => {
            return Err(decline(
                DeclineCode::ResponseFormat,
                "a response_format Anthropic needs rewritten",
            ));
        }
    }
    let tools = match present("tools") {
        Some(Value::Array(tools)) if !tools.is_empty() => {
            tools.iter().map(tool).collect::<Result<Vec<_>, _>>()?
        }
        Some(_) => return Err(decline(DeclineCode::Tools, "an unusual tools shape")),
        None if messages.iter().any(|m| m.tool_calls.is_some()) => vec![dummy_tool()],
        None => Vec::new(),
    };
    let has_tools = present("tools").is_some();
    if !tools.is_empty() {
        fields.push(("tools".into(), Node::Value(Value::Array(tools))));
    }
    let parallel = match present("parallel_tool_calls") {
        None => None,
        Some(Value::Bool(parallel)) => Some(*parallel),
        Some(_) => return Err(decline(DeclineCode::ParallelToolCalls, "not a bool")),
    };
    let choice = match present("tool_choice") {
        None => None,
        Some(_) if !has_tools => {
            return Err(decline(
                DeclineCode::ToolChoice,
                "tool_choice without tools",
            ));
        }
        Some(choice) => Some(tool_choice(choice)?),
    };
    let choice = match (choice, parallel) {
        (None, None) => None,
        (Some(choice), None) => Some(choice),
        (_, Some(_)) if !has_tools => {
            return Err(decline(
                DeclineCode::ParallelToolCalls,
                "parallel_tool_calls without tools",
            ));
        }
        (None, Some(parallel)) => {
            Some(json!({"type": "auto", "disable_parallel_tool_use": !parallel}))
        }
        (Some(mut choice), Some(parallel)) => {
            if choice["type"] != json!("none") {
                choice["disable_parallel_tool_use"] = json!(!parallel);
            }
            Some(choice)
        }
    };
    if let Some(choice) = choice {
        fields.push(("tool_choice".into(), Node::Value(choice)));
    }
    Ok(fields)
}

fn tool_choice(choice: &Value) -> Result<Value, Decline> {
    let unusual = || decline(DeclineCode::ToolChoice, "an unusual tool_choice");
    Ok(
        match read_tool_choice(choice, is_valid_name).ok_or_else(unusual)? {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
        },
    )
}

/// An assistant turn's `tool_calls` as `tool_use` blocks.
pub fn tool_use_blocks(calls: &Value) -> Result<Vec<Node>, Decline> {
    Ok(tool_calls(calls, is_valid_name, is_valid_name)?
        .into_iter()
        .map(|call| {
            Node::Value(json!({
                "type": "tool_use", "id": call.id, "name": call.name, "input": call.input,
            }))
        })
        .collect())
}

/// A `tool` message as the `tool_result` block LiteLLM sends (text content only).
pub fn tool_result_block(message: &Message) -> Result<Node, Decline> {
    let (id, text) = tool_result(message, is_valid_name)?;
    let content = match text {
        ToolResultText::Text(text) => Node::Str(text.clone()),
        ToolResultText::Parts(parts) => Node::Array(
            parts
                .into_iter()
                .map(|text| {
                    Node::object([
                        ("type", Node::from("text")),
                        ("text", Node::Str(text.clone())),
                    ])
                })
                .collect(),
        ),
        ToolResultText::Absent => {
            return Err(decline(
                DeclineCode::MessageWithoutContent,
                "a tool message without content",
            ));
        }
    };
    Ok(Node::object([
        ("type", Node::from("tool_result")),
        ("tool_use_id", Node::from(id)),
        ("content", content),
    ]))
}

/// `tool_use` blocks of an answer as LiteLLM's tool calls: `index` is the block's position in
/// the content, `arguments` Python's `json.dumps` of the input.
pub fn answer_tool_calls(blocks: &[Value]) -> Vec<Value> {
    blocks
        .iter()
        .enumerate()
        .filter(|(_, block)| {
            matches!(
                block.get("type").and_then(Value::as_str),
                Some("tool_use" | "server_tool_use")
            )
        })
        .map(|(index, block)| {
            answer_tool_call(
                index,
                block.get("id"),
                block.get("name"),
                block.get("input"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_gets_type_and_properties() {
        let schema =
            json!({"properties": {"a": {"type": "string"}}, "required": ["a"], "title": "x"});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        assert_eq!(
            serde_json::to_string(&input_schema(&schema).unwrap()).unwrap(),
            r#"{"properties":{"a":{"type":"string"}},"required":["a"],"type":"object"}"#
        );
    }
}
