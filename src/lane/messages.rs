//! `/v1/messages` on the lane: non-streaming Anthropic Messages calls to `anthropic/…`
//! deployments. What LiteLLM does with the small params (thinking, sampling) and the client's
//! `anthropic-*` headers depends on their values, and only LiteLLM's own functions know it: a
//! request without them uses what the Python layer asked when the group was loaded; one with
//! them goes to the proxy the first time, where the fast path asks LiteLLM and hands the lane
//! the answer (`Table::learn_messages_headers`), keyed by `decision_key`, for the next ones.
//!
//! The proxy's answer is the provider's JSON as Python reads and writes it back (compact,
//! raw UTF-8, floats as `repr`) with `model` set to the model group; answers whose cost has
//! parts the lane does not price (another tier, server tools; cache reads and writes where
//! LiteLLM's cost of them is not the lane's) are left to the proxy.

use serde_json::{Map, Value};

use super::answer::Cost;
use super::request::NotForLane;
use super::table::Pricing;
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

/// The proxy's body for the provider's answer, and its usage; None when the lane leaves the
/// answer to the proxy.
pub fn answer_body(raw: &[u8], model_group: &str) -> Option<(Vec<u8>, MessagesUsage)> {
    let Ok(Value::Object(mut answer)) = serde_json::from_slice::<Value>(raw) else {
        return None;
    };
    if answer.get("type")? != "message" || !answer.get("model")?.is_string() {
        return None;
    }
    let usage = usage(answer.get("usage")?)?;
    if !numbers_read_back_alike(&Value::Object(answer.clone())) {
        return None;
    }
    // The proxy names the model group it served (in place: the key keeps its position).
    answer.insert("model".into(), Value::String(model_group.to_string()));
    Some((
        python_json_compact(&Value::Object(answer)).into_bytes(),
        usage,
    ))
}

/// An Anthropic answer's token counts: input (the uncached part), output, and the prompt
/// cache's reads and writes by lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessagesUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write_5m: u64,
    pub cache_write_1h: u64,
}

/// Anthropic's usage, when its cost is tokens alone: input, output and the prompt cache (its
/// writes split by lifetime when there are any), the standard tier, nothing else.
pub fn usage(value: &Value) -> Option<MessagesUsage> {
    let fields = value.as_object()?;
    let count = |name: &str| match fields.get(name) {
        None | Some(Value::Null) => Some(0),
        Some(value) => value.as_u64(),
    };
    let known = [
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "cache_creation",
        "service_tier",
    ];
    if fields.keys().any(|name| !known.contains(&name.as_str())) {
        return None;
    }
    if !fields
        .get("service_tier")
        .is_none_or(|tier| tier.is_null() || tier == "standard")
    {
        return None;
    }
    let writes = count("cache_creation_input_tokens")?;
    let (cache_write_5m, cache_write_1h) = match fields.get("cache_creation") {
        None | Some(Value::Null) if writes == 0 => (0, 0),
        Some(Value::Object(split)) => {
            let part = |name: &str| match split.get(name) {
                None | Some(Value::Null) => Some(0),
                Some(value) => value.as_u64(),
            };
            if split.keys().any(|name| {
                name != "ephemeral_5m_input_tokens" && name != "ephemeral_1h_input_tokens"
            }) {
                return None;
            }
            (
                part("ephemeral_5m_input_tokens")?,
                part("ephemeral_1h_input_tokens")?,
            )
        }
        // Writes without their split: LiteLLM's reading of those is not the lane's to guess.
        _ => return None,
    };
    if cache_write_5m.checked_add(cache_write_1h)? != writes {
        return None;
    }
    Some(MessagesUsage {
        input: fields.get("input_tokens")?.as_u64()?,
        output: fields.get("output_tokens")?.as_u64()?,
        cache_read: count("cache_read_input_tokens")?,
        cache_write_5m,
        cache_write_1h,
    })
}

impl MessagesUsage {
    /// The cost as LiteLLM's `generic_cost_per_token` works it out for Anthropic, the same float
    /// operations in the same order, and the proxy's additive split of it for the headers; None
    /// for cache reads or writes without checked prices (the proxy writes that answer).
    pub fn cost(&self, pricing: Pricing) -> Option<Cost> {
        let output = self.output as f64 * pricing.output_per_token;
        let mut prompt = self.input as f64 * pricing.input_per_token;
        if self.cache_read == 0 && self.cache_write_5m == 0 && self.cache_write_1h == 0 {
            return Some(Cost {
                input: prompt,
                output,
                total: prompt + output,
                reasoning: 0.0,
                cache_read: 0.0,
                cache_creation: 0.0,
            });
        }
        let prices = pricing.anthropic_cache?;
        let cache_read = self.cache_read as f64 * prices.read;
        prompt += cache_read;
        let cache_creation = self.cache_write_5m as f64 * prices.write_5m
            + self.cache_write_1h as f64 * prices.write_1h;
        prompt += cache_creation;
        Some(Cost {
            input: prompt - cache_read - cache_creation,
            output,
            total: prompt + output,
            reasoning: 0.0,
            cache_read,
            cache_creation,
        })
    }
}

/// Whether every number prints as Python prints what `json.loads` made of it: integers
/// beyond 64 bits arrive here as floats, where Python keeps them exact.
pub(super) fn numbers_read_back_alike(value: &Value) -> bool {
    const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0; // 2^53
    match value {
        Value::Number(number) => match number.as_f64().filter(|_| number.is_f64()) {
            Some(float) => float.fract() != 0.0 || float.abs() < EXACT_INTEGERS,
            None => true,
        },
        Value::Array(items) => items.iter().all(numbers_read_back_alike),
        Value::Object(fields) => fields.values().all(numbers_read_back_alike),
        _ => true,
    }
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

    #[test]
    fn writes_the_proxys_answer() {
        let raw = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"h\u00e9"},{"type":"tool_use","id":"t","name":"n","input":{"x":1.0,"y":25E-8}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":7,"service_tier":"standard"}}"#;
        // Floats print as Python's `repr` prints them.
        let (written, usage) = answer_body(raw, "group").unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"group","content":[{"type":"text","text":"hé"},{"type":"tool_use","id":"t","name":"n","input":{"x":1.0,"y":2.5e-07}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":7,"service_tier":"standard"}}"#
        );
        assert_eq!((usage.input, usage.output, usage.cache_read), (12, 7, 0));
    }

    /// Cache reads and writes priced as LiteLLM 1.106.12 prices them for claude-sonnet-4-5
    /// (the proxy's headers for this usage: total 0.004965, input 0.0036, cache read
    /// 8.999999999999999e-05, cache creation 0.00075, output 0.000525).
    #[test]
    fn prices_the_prompt_cache_as_litellm_does() {
        let usage = usage(&json!({
            "input_tokens": 1200,
            "output_tokens": 35,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 300,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 0},
            "service_tier": "standard",
        }))
        .unwrap();
        let mut pricing = Pricing {
            input_per_token: 3e-06,
            output_per_token: 1.5e-05,
            cache_read_per_token: None,
            anthropic_cache: None,
        };
        assert!(usage.cost(pricing).is_none(), "unchecked cache prices");
        pricing.anthropic_cache = Some(super::super::CachePrices {
            read: 3e-07,
            write_5m: 3.75e-06,
            write_1h: 6e-06,
        });
        let cost = usage.cost(pricing).unwrap();
        let written = [
            cost.total,
            cost.input,
            cost.cache_read,
            cost.cache_creation,
            cost.output,
        ]
        .map(crate::wire::pyjson::python_float);
        assert_eq!(
            written,
            [
                "0.004965",
                "0.0036",
                "8.999999999999999e-05",
                "0.00075",
                "0.000525"
            ]
        );
    }

    #[test]
    fn leaves_other_answers_to_the_proxy() {
        let answer = |usage: &str, extra: &str| {
            format!(
                r#"{{"id":"m","type":"message","model":"c","content":[]{extra},"usage":{usage}}}"#
            )
        };
        for raw in [
            // Cache writes without their split, or a split that does not add up.
            answer(
                r#"{"input_tokens":1,"output_tokens":1,"cache_creation_input_tokens":5}"#,
                "",
            ),
            answer(
                r#"{"input_tokens":1,"output_tokens":1,"cache_creation":{"ephemeral_1h_input_tokens":3}}"#,
                "",
            ),
            answer(
                r#"{"input_tokens":1,"output_tokens":1,"service_tier":"priority"}"#,
                "",
            ),
            answer(
                r#"{"input_tokens":1,"output_tokens":1,"server_tool_use":{"web_search_requests":1}}"#,
                "",
            ),
            answer(r#"{"input_tokens":1}"#, ""),
            // An integer Python keeps exact, which arrives here as a float; and a float that
            // could have been one.
            answer(
                r#"{"input_tokens":1,"output_tokens":1}"#,
                r#","n":123456789012345678901234"#,
            ),
            answer(r#"{"input_tokens":1,"output_tokens":1}"#, r#","n":1e16"#),
            r#"{"type":"error","error":{}}"#.to_string(),
        ] {
            assert!(answer_body(raw.as_bytes(), "g").is_none(), "{raw}");
        }
    }
}
