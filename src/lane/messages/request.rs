//! A `/v1/messages` body as the lane takes it, and the client's `anthropic-*` headers. What
//! LiteLLM does with the small params (thinking, sampling) and those headers depends on their
//! values, and only LiteLLM's own functions know it: a request without them uses what the
//! Python layer asked when the group was loaded; one with them goes to the proxy the first
//! time, where the fast path asks LiteLLM and hands the lane the answer
//! (`Table::learn_messages_headers`), keyed by `decision_key`, for the next ones.

use serde_json::{Map, Value};

use crate::lane::gate::{NotForLane, PROVIDER_HEADERS};
use crate::wire::body::Node;
use crate::wire::pyjson::python_json_compact;

/// Optional fields LiteLLM forwards as given, in the order its body has them.
const OPTIONAL_FIELDS: &[&str] = &[
    "metadata",
    "stop_sequences",
    "system",
    "thinking",
    "tool_choice",
    "tools",
];
/// Sampling params: last in LiteLLM's body (it pops and re-adds them).
const SAMPLING_FIELDS: &[&str] = &["temperature", "top_p", "top_k"];

/// The parts of a `/v1/messages` body the lane reads.
#[derive(Debug)]
pub struct MessagesBody {
    pub model: String,
    /// `messages`, `max_tokens`, then the optional fields, as LiteLLM orders them.
    pub fields: Vec<(String, Node)>,
    pub stream: bool,
    /// `max_tokens` with the thinking and sampling params given, sorted and written as Python's
    /// `json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)` writes them;
    /// None without thinking or sampling params.
    pub small_params: Option<String>,
    /// `metadata.user_id` names an end user (LiteLLM's `get_end_user_id_from_request_body`:
    /// a string that is not blank).
    pub end_user: bool,
}

pub fn parse(body: &[u8]) -> Result<MessagesBody, NotForLane> {
    let Ok(Value::Object(mut given)) = serde_json::from_slice::<Value>(body) else {
        return Err(NotForLane("not a JSON object"));
    };
    let known = ["model", "max_tokens", "messages", "stream"];
    if given.keys().any(|name| {
        let name = name.as_str();
        !known.contains(&name)
            && !OPTIONAL_FIELDS.contains(&name)
            && !SAMPLING_FIELDS.contains(&name)
    }) {
        return Err(NotForLane("a field the lane does not take"));
    }
    let model = match given.remove("model") {
        Some(Value::String(model)) => model,
        _ => return Err(NotForLane("model is not a string")),
    };
    let stream = match given.remove("stream") {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        // LiteLLM leaves an explicit null out of its body (absent: `false`).
        Some(_) => return Err(NotForLane("stream is not a boolean")),
    };
    let max_tokens = match given.remove("max_tokens") {
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n),
        _ => return Err(NotForLane("max_tokens is not an integer")),
    };
    let messages = match given.remove("messages") {
        Some(Value::Array(items)) => Value::Array(items),
        _ => return Err(NotForLane("messages is not a list")),
    };
    let end_user = given
        .get("metadata")
        .and_then(|metadata| metadata.get("user_id"))
        .and_then(Value::as_str)
        .is_some_and(|user| !user.trim().is_empty());
    let mut small = Map::new();
    small.insert("max_tokens".into(), max_tokens.clone());
    let mut fields = vec![
        ("messages".to_string(), Node::document(messages)),
        ("max_tokens".to_string(), Node::Value(max_tokens)),
    ];
    for name in OPTIONAL_FIELDS.iter().chain(SAMPLING_FIELDS) {
        let value = match given.remove(*name) {
            // LiteLLM drops None-valued fields.
            None | Some(Value::Null) => continue,
            Some(value) if *name == "metadata" => metadata(value)?,
            Some(value) => value,
        };
        if *name == "thinking" || SAMPLING_FIELDS.contains(name) {
            small.insert((*name).to_string(), value.clone());
        }
        fields.push(((*name).to_string(), Node::document(value)));
    }
    let small_params =
        (small.len() > 1).then(|| python_json_compact(&sorted(&Value::Object(small))));
    Ok(MessagesBody {
        model,
        fields,
        stream,
        small_params,
        end_user,
    })
}

/// The key of LiteLLM's decision for a request's small params and client headers: its small
/// params (see `MessagesBody`; empty without any), a newline, and the `anthropic-*` headers the
/// proxy passes on, as a sorted JSON object in the same form. The Python layer writes the same
/// key when it learns.
pub fn decision_key(small_params: Option<&str>, client_headers: &Map<String, Value>) -> String {
    let small = small_params.unwrap_or("");
    let headers = python_json_compact(&sorted(&Value::Object(client_headers.clone())));
    format!("{small}\n{headers}")
}

/// `value` with every object's keys sorted (Python's `sort_keys=True`).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(fields) => {
            let mut names: Vec<&String> = fields.keys().collect();
            names.sort();
            Value::Object(
                names
                    .into_iter()
                    .map(|name| (name.clone(), sorted(&fields[name])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// LiteLLM's `validate_anthropic_api_metadata`: only `user_id` goes to the provider.
fn metadata(value: Value) -> Result<Value, NotForLane> {
    let Value::Object(mut given) = value else {
        return Err(NotForLane("metadata is not an object"));
    };
    let mut kept = Map::new();
    match given.remove("user_id") {
        None | Some(Value::Null) => {}
        Some(Value::String(user)) => {
            kept.insert("user_id".into(), Value::String(user));
        }
        Some(_) => return Err(NotForLane("metadata.user_id is not a string")),
    }
    Ok(Value::Object(kept))
}

/// The `anthropic-*` headers the proxy passes on to a `/v1/messages` call, by name; None when
/// one is sent twice or is not text.
pub fn client_headers(headers: &http::HeaderMap) -> Option<Map<String, Value>> {
    let mut found = Map::new();
    for name in PROVIDER_HEADERS {
        let mut values = headers.get_all(*name).iter();
        if let Some(value) = values.next() {
            if values.next().is_some() {
                return None;
            }
            found.insert((*name).to_string(), value.to_str().ok()?.into());
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(value: Value) -> Vec<u8> {
        serde_json::to_vec(&value).unwrap()
    }

    fn field_names(request: &MessagesBody) -> Vec<&str> {
        request
            .fields
            .iter()
            .map(|(name, _)| name.as_str())
            .collect()
    }

    #[test]
    fn takes_plain_requests_in_litellms_field_order() {
        let request = parse(&body(json!({
            "tools": [{"name": "t", "input_schema": {"type": "object"}}],
            "system": "be brief",
            "metadata": {"user_id": "u1", "trace": "dropped"},
            "messages": [{"role": "user", "content": "hi"}],
            "model": "claude",
            "max_tokens": 64,
            "stop_sequences": null,
        })))
        .unwrap();
        assert_eq!(request.model, "claude");
        assert!(!request.stream);
        let Node::Object(metadata) = &request.fields[2].1 else {
            panic!("metadata is an object");
        };
        assert_eq!(metadata.len(), 1, "only user_id goes on");
        assert_eq!(
            field_names(&request),
            ["messages", "max_tokens", "metadata", "system", "tools"]
        );
    }

    #[test]
    fn a_user_id_that_is_not_blank_names_an_end_user() {
        let hi = json!([{"role": "user", "content": "hi"}]);
        let named = |metadata: Value| {
            let given =
                json!({"model": "m", "max_tokens": 5, "messages": hi, "metadata": metadata});
            parse(&body(given)).unwrap().end_user
        };
        assert!(named(json!({"user_id": "u1"})));
        assert!(!named(json!({"user_id": "  "})));
        assert!(!named(json!({"user_id": null})));
        assert!(!named(json!({})));
    }

    #[test]
    fn keys_small_params_as_python_writes_them_sorted() {
        let request = parse(&body(json!({
            "model": "claude",
            "messages": [],
            "top_p": 0.5,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "max_tokens": 2048,
            "temperature": 1e-5,
        })))
        .unwrap();
        assert_eq!(
            field_names(&request),
            ["messages", "max_tokens", "thinking", "temperature", "top_p"]
        );
        let small = request.small_params.as_deref();
        assert_eq!(
            small,
            Some(
                r#"{"max_tokens":2048,"temperature":1e-05,"thinking":{"budget_tokens":1024,"type":"enabled"},"top_p":0.5}"#
            )
        );
        let mut headers = Map::new();
        headers.insert("anthropic-version".into(), json!("2023-06-01"));
        headers.insert("anthropic-beta".into(), json!("b,a"));
        assert_eq!(
            decision_key(small, &headers),
            format!(
                "{}\n{}",
                small.unwrap(),
                r#"{"anthropic-beta":"b,a","anthropic-version":"2023-06-01"}"#
            )
        );
        let plain = parse(&body(
            json!({"model": "m", "messages": [], "max_tokens": 1}),
        ))
        .unwrap();
        assert_eq!(plain.small_params, None);
    }

    #[test]
    fn leaves_everything_else_to_the_proxy() {
        let hi = json!([{"role": "user", "content": "hi"}]);
        for odd in [
            json!({"model": "m", "max_tokens": 5, "messages": hi, "top_q": 0.5}),
            json!({"model": "m", "max_tokens": 5, "messages": hi, "output_config": {}}),
            json!({"model": "m", "max_tokens": true, "messages": hi}),
            json!({"model": "m", "max_tokens": 5.0, "messages": hi}),
            json!({"model": "m", "messages": hi}),
            json!({"model": "m", "max_tokens": 5, "messages": "hi"}),
            json!({"model": "m", "max_tokens": 5, "messages": hi, "stream": null}),
            json!({"model": "m", "max_tokens": 5, "messages": hi, "metadata": "x"}),
            json!({"model": "m", "max_tokens": 5, "messages": hi, "metadata": {"user_id": 7}}),
            json!({"model": 1, "max_tokens": 5, "messages": hi}),
        ] {
            assert!(parse(&body(odd.clone())).is_err(), "{odd}");
        }
    }
}
