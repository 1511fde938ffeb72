//! The client's chat answer, as the proxy writes it: LiteLLM's `ModelResponse` for the
//! provider's body, serialized as the proxy serializes it, and its usage.
//!
//! Only answers of a shape known here are written by the lane; for any other the proxy writes
//! the answer itself (the lane replays the call's outcome through it).

use serde_json::{Map, Value, json};

use crate::lane::cost::{MessagesUsage, Usage};
use crate::providers::AnswerShape;

/// The proxy's JSON body for a chat answer of the usual shape (text answers, no cache tokens),
/// or None when the shape is not one the lane writes. OpenAI answers carry their own id and
/// time; for Anthropic and Bedrock LiteLLM makes them up, and so does the lane (`minted`).
pub fn chat_body(
    shape: AnswerShape,
    completion: &Value,
    model_group: &str,
    minted: (&str, i64),
) -> Option<(Vec<u8>, Usage)> {
    match shape {
        AnswerShape::OpenAi => openai_body(completion, model_group),
        AnswerShape::Converted => converted_body(completion, model_group, minted),
    }
}

/// An OpenAI `chat.completion`, as LiteLLM's `ModelResponse` for it serializes.
fn openai_body(completion: &Value, model_group: &str) -> Option<(Vec<u8>, Usage)> {
    let fields = completion.as_object()?;
    let mut system_fingerprint = None;
    let mut service_tier = None;
    for (name, value) in fields {
        match name.as_str() {
            "id" | "created" | "model" | "object" | "choices" | "usage" => {}
            "system_fingerprint" => system_fingerprint = Some(value),
            // LiteLLM's own additions, left out of the body when null.
            "moderation" | "service_tier" if value.is_null() => {}
            // Other tiers have prices of their own.
            "service_tier" if value == "default" => service_tier = Some(value.clone()),
            _ => return None,
        }
    }
    let id = fields.get("id")?.as_str()?;
    let created = fields.get("created")?.as_i64()?;
    if fields.get("object")?.as_str()? != "chat.completion" {
        return None;
    }
    let (usage, usage_json) = openai_usage(fields.get("usage")?)?;
    let choices = written_choices(fields, choice)?;
    let mut body = Map::new();
    body.insert("id".into(), json!(id));
    body.insert("created".into(), json!(created));
    body.insert("model".into(), json!(model_group));
    body.insert("object".into(), json!("chat.completion"));
    match system_fingerprint {
        Some(Value::String(fingerprint)) => {
            body.insert("system_fingerprint".into(), json!(fingerprint));
        }
        Some(Value::Null) | None => {}
        Some(_) => return None,
    }
    body.insert("choices".into(), Value::Array(choices));
    body.insert("usage".into(), usage_json);
    if let Some(tier) = service_tier {
        body.insert("service_tier".into(), tier);
    }
    Some((serde_json::to_vec(&Value::Object(body)).ok()?, usage))
}

/// An answer LiteLLM converted from Anthropic's or Bedrock's (Rust did the same conversion):
/// `ModelResponse` leaves out the fields that are None, here and in the usage details.
fn converted_body(
    completion: &Value,
    model_group: &str,
    (id, created): (&str, i64),
) -> Option<(Vec<u8>, Usage)> {
    let fields = completion.as_object()?;
    let known = |name: &str| {
        // `id` and `created` are the lane's own (see `mint_id`).
        matches!(
            name,
            "object" | "model" | "choices" | "usage" | "id" | "created"
        )
    };
    if fields.keys().any(|name| !known(name))
        || fields.get("object")?.as_str()? != "chat.completion"
    {
        return None;
    }
    let (usage, usage_json) = converted_usage(fields.get("usage")?)?;
    let choices = written_choices(fields, converted_choice)?;
    let body = json!({
        "id": id,
        "created": created,
        "model": model_group,
        "object": "chat.completion",
        "choices": choices,
        "usage": usage_json,
    });
    Some((serde_json::to_vec(&body).ok()?, usage))
}

/// Every choice as `write` writes it; None when one is of a shape the lane does not write.
fn written_choices(
    fields: &Map<String, Value>,
    write: fn(&Value) -> Option<Value>,
) -> Option<Vec<Value>> {
    fields
        .get("choices")?
        .as_array()?
        .iter()
        .map(write)
        .collect()
}

fn converted_choice(value: &Value) -> Option<Value> {
    let fields = value.as_object()?;
    if fields
        .keys()
        .any(|name| !matches!(name.as_str(), "index" | "finish_reason" | "message"))
    {
        return None;
    }
    let finish_reason = fields.get("finish_reason")?.as_str()?;
    let message = fields.get("message")?.as_object()?;
    if message.keys().any(|name| {
        !matches!(
            name.as_str(),
            "role" | "content" | "provider_specific_fields" | "tool_calls"
        )
    }) || message.get("role")?.as_str()? != "assistant"
    {
        return None;
    }
    let extra = match message.get("provider_specific_fields") {
        // A plain dict on the message: kept as it is, nulls included.
        Some(extra) => Some(Value::Object(extra.as_object()?.clone())),
        None => None,
    };
    let mut out = Map::new();
    match (
        finish_reason,
        message.get("content"),
        message.get("tool_calls"),
    ) {
        ("stop" | "length", Some(Value::String(text)), None) => {
            out.insert("content".into(), json!(text));
            out.insert("role".into(), json!("assistant"));
            if let Some(extra) = extra {
                out.insert("provider_specific_fields".into(), extra);
            }
        }
        // Anthropic's tool calls alone: LiteLLM's `Message` puts a None content last.
        ("tool_calls", Some(Value::Null), Some(calls)) if extra.is_some() => {
            out.insert("role".into(), json!("assistant"));
            out.insert("tool_calls".into(), written_tool_calls(calls, true)?);
            out.insert("provider_specific_fields".into(), extra?);
            out.insert("content".into(), Value::Null);
        }
        // Tool calls with text (Bedrock's text may be empty): the text first, then as above.
        ("tool_calls", Some(Value::String(text)), Some(calls)) => {
            out.insert("content".into(), json!(text));
            out.insert("role".into(), json!("assistant"));
            out.insert("tool_calls".into(), written_tool_calls(calls, true)?);
            if let Some(extra) = extra {
                out.insert("provider_specific_fields".into(), extra);
            }
        }
        _ => return None,
    }
    Some(json!({
        "finish_reason": finish_reason,
        "index": fields.get("index")?.as_u64()?,
        "message": out,
    }))
}

/// Tool calls as LiteLLM's `ChatCompletionMessageToolCall` writes them: `{"index",
/// "function": {"arguments", "name"}, "id", "type": "function"}`, where only the calls LiteLLM
/// converted (Anthropic's, Bedrock's: `indexed`) carry an index.
fn written_tool_calls(calls: &Value, indexed: bool) -> Option<Value> {
    let calls = calls.as_array().filter(|calls| !calls.is_empty())?;
    calls
        .iter()
        .map(|call| {
            let fields = call
                .as_object()
                .filter(|fields| fields.len() == 3 + usize::from(indexed))?;
            let mut out = Map::new();
            if indexed {
                out.insert("index".into(), json!(fields.get("index")?.as_u64()?));
            }
            out.insert("function".into(), tool_function(fields.get("function")?)?);
            out.insert("id".into(), json!(fields.get("id")?.as_str()?));
            out.insert("type".into(), function_type(fields.get("type")?)?);
            Some(Value::Object(out))
        })
        .collect::<Option<Vec<_>>>()
        .map(Value::Array)
}

fn tool_function(value: &Value) -> Option<Value> {
    let fields = value.as_object().filter(|fields| fields.len() == 2)?;
    Some(json!({
        "arguments": fields.get("arguments")?.as_str()?,
        "name": fields.get("name")?.as_str()?,
    }))
}

fn function_type(value: &Value) -> Option<Value> {
    (value.as_str()? == "function").then(|| json!("function"))
}

/// The usage LiteLLM computed, without its None fields; answers that read or wrote the prompt
/// cache are left to the proxy (their cost is not linear in the token counts).
fn converted_usage(value: &Value) -> Option<(Usage, Value)> {
    let fields = value.as_object()?;
    let usage = Usage {
        prompt_tokens: fields.get("prompt_tokens")?.as_u64()?,
        completion_tokens: fields.get("completion_tokens")?.as_u64()?,
        total_tokens: fields.get("total_tokens")?.as_u64()?,
        reasoning_tokens: 0,
        cached_tokens: 0,
        anthropic_cache: None,
    };
    // Reasoning next to LiteLLM's own `text_tokens` count is priced by rules of its own.
    if fields
        .get("completion_tokens_details")
        .and_then(|details| details.get("reasoning_tokens"))
        .is_some_and(|tokens| tokens.as_u64() != Some(0))
    {
        return None;
    }
    let usage = Usage {
        anthropic_cache: anthropic_cache(fields, &usage)?,
        ..usage
    };
    let mut out = Map::new();
    out.insert("completion_tokens".into(), json!(usage.completion_tokens));
    out.insert("prompt_tokens".into(), json!(usage.prompt_tokens));
    out.insert("total_tokens".into(), json!(usage.total_tokens));
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("prompt_tokens" | "completion_tokens" | "total_tokens", _) | (_, Value::Null) => {}
            ("completion_tokens_details" | "prompt_tokens_details", Value::Object(details)) => {
                let kept: Map<String, Value> = details
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                // Counts, and Anthropic's cache writes by TTL (all counts).
                let counts = |value: &Value| match value {
                    Value::Object(split) => split.values().all(Value::is_u64),
                    other => other.is_u64(),
                };
                if !kept.values().all(counts) {
                    return None;
                }
                out.insert(name.clone(), Value::Object(kept));
            }
            // Anthropic's tier on every answer; other tiers have prices of their own.
            ("service_tier", Value::String(tier)) if tier == "standard" => {
                out.insert(name.clone(), value.clone());
            }
            ("cache_creation_input_tokens" | "cache_read_input_tokens", Value::Number(_)) => {
                out.insert(name.clone(), value.clone());
            }
            _ => return None,
        }
    }
    Some((usage, Value::Object(out)))
}

/// The prompt cache's counts in a converted Anthropic usage (None inside: no cache use), as
/// `MessagesUsage` prices them; None when the writes come without their split by lifetime.
fn anthropic_cache(fields: &Map<String, Value>, usage: &Usage) -> Option<Option<MessagesUsage>> {
    let count = |name: &str| match fields.get(name) {
        None | Some(Value::Null) => Some(0),
        Some(value) => value.as_u64(),
    };
    let (read, writes) = (
        count("cache_read_input_tokens")?,
        count("cache_creation_input_tokens")?,
    );
    if read == 0 && writes == 0 {
        return Some(None);
    }
    let split = fields
        .get("prompt_tokens_details")
        .and_then(|details| details.get("cache_creation_token_details"));
    let part = |name: &str| match split.and_then(|split| split.get(name)) {
        None | Some(Value::Null) => Some(0),
        Some(value) => value.as_u64(),
    };
    let (write_5m, write_1h) = (
        part("ephemeral_5m_input_tokens")?,
        part("ephemeral_1h_input_tokens")?,
    );
    if write_5m.checked_add(write_1h)? != writes {
        return None;
    }
    Some(Some(MessagesUsage {
        input: usage.prompt_tokens.checked_sub(read)?.checked_sub(writes)?,
        output: usage.completion_tokens,
        cache_read: read,
        cache_write_5m: write_5m,
        cache_write_1h: write_1h,
    }))
}

/// One choice with a text answer and a plain finish reason.
fn choice(value: &Value) -> Option<Value> {
    let fields = value.as_object()?;
    for (name, value) in fields {
        match name.as_str() {
            "index" | "message" | "finish_reason" => {}
            "logprobs" if value.is_null() => {}
            "provider_specific_fields" if value.as_object().is_some_and(Map::is_empty) => {}
            _ => return None,
        }
    }
    let index = fields.get("index")?.as_u64()?;
    let finish_reason = fields.get("finish_reason")?.as_str()?;
    let message = fields.get("message")?.as_object()?;
    let tool_calls = message.get("tool_calls").filter(|calls| !calls.is_null());
    for (name, value) in message {
        match name.as_str() {
            "role" | "content" => {}
            "provider_specific_fields" if *value == json!({"refusal": null}) => {}
            // The SDK's unset optional fields.
            "tool_calls" | "function_call" | "audio" if value.is_null() => {}
            "tool_calls" => {}
            // What OpenAI sends on every message now.
            "annotations" if *value == json!([]) => {}
            _ => return None,
        }
    }
    if message.get("role")?.as_str()? != "assistant" {
        return None;
    }
    let refusal = json!({"refusal": null});
    let annotations = message.get("annotations");
    let message = match (finish_reason, tool_calls, message.get("content")?) {
        ("stop" | "length", None, Value::String(content)) => {
            let mut out = Map::new();
            out.insert("content".into(), json!(content));
            out.insert("role".into(), json!("assistant"));
            out.insert("provider_specific_fields".into(), refusal);
            if let Some(annotations) = annotations {
                out.insert("annotations".into(), annotations.clone());
            }
            Value::Object(out)
        }
        // Tool calls with text: the text first.
        ("tool_calls", Some(calls), Value::String(content)) => {
            let mut out = Map::new();
            out.insert("content".into(), json!(content));
            out.insert("role".into(), json!("assistant"));
            out.insert("tool_calls".into(), written_tool_calls(calls, false)?);
            out.insert("provider_specific_fields".into(), refusal);
            if let Some(annotations) = annotations {
                out.insert("annotations".into(), annotations.clone());
            }
            Value::Object(out)
        }
        // Tool calls alone: LiteLLM's `Message` puts a None content last.
        ("tool_calls", Some(calls), Value::Null) => {
            let mut out = Map::new();
            out.insert("role".into(), json!("assistant"));
            out.insert("tool_calls".into(), written_tool_calls(calls, false)?);
            out.insert("provider_specific_fields".into(), refusal);
            if let Some(annotations) = annotations {
                out.insert("annotations".into(), annotations.clone());
            }
            out.insert("content".into(), Value::Null);
            Value::Object(out)
        }
        _ => return None,
    };
    Some(json!({
        "finish_reason": finish_reason,
        "index": index,
        "message": message,
        "provider_specific_fields": {},
    }))
}

/// The token details LiteLLM's `Usage` writes for OpenAI, in the order it writes them (the
/// SDK's field order); its null ones are left out.
const COMPLETION_DETAILS: &[&str] = &[
    "accepted_prediction_tokens",
    "audio_tokens",
    "reasoning_tokens",
    "rejected_prediction_tokens",
];
const PROMPT_DETAILS: &[&str] = &["audio_tokens", "cached_tokens"];

/// OpenAI's usage as LiteLLM writes it. Answers that read the prompt cache are left to the
/// proxy (cached tokens have a price of their own), as are details not listed above.
fn openai_usage(value: &Value) -> Option<(Usage, Value)> {
    let fields = value.as_object()?;
    let totals = ["completion_tokens", "prompt_tokens", "total_tokens"];
    let details = [
        ("completion_tokens_details", COMPLETION_DETAILS),
        ("prompt_tokens_details", PROMPT_DETAILS),
    ];
    if fields.keys().any(|name| {
        !totals.contains(&name.as_str()) && !details.iter().any(|(known, _)| name == known)
    }) {
        return None;
    }
    let count = |name: &str| fields.get(name)?.as_u64();
    let mut usage = Usage {
        prompt_tokens: count("prompt_tokens")?,
        completion_tokens: count("completion_tokens")?,
        total_tokens: count("total_tokens")?,
        reasoning_tokens: 0,
        cached_tokens: 0,
        anthropic_cache: None,
    };
    let mut out = Map::new();
    for name in totals {
        out.insert(name.into(), json!(count(name)?));
    }
    // LiteLLM writes the completion details before the prompt details.
    for (name, known) in details {
        let Some(value) = fields.get(name) else {
            continue;
        };
        let written = written_details(value.as_object()?, known)?;
        if let Some(tokens) = written.get("reasoning_tokens") {
            usage.reasoning_tokens = tokens.as_u64()?;
        }
        if let Some(tokens) = written.get("cached_tokens") {
            usage.cached_tokens = tokens.as_u64()?;
        }
        out.insert(name.into(), Value::Object(written));
    }
    Some((usage, Value::Object(out)))
}

/// One details object as LiteLLM writes it: the `known` counts in that order, nulls left out;
/// None for another key, or a nonzero count of tokens with prices (or rules) of their own
/// (audio, predictions).
fn written_details(details: &Map<String, Value>, known: &[&str]) -> Option<Map<String, Value>> {
    if details.keys().any(|key| !known.contains(&key.as_str())) {
        return None;
    }
    let priced = ["reasoning_tokens", "cached_tokens"];
    let mut written = Map::new();
    for key in known {
        match details.get(*key) {
            None | Some(Value::Null) => {}
            Some(tokens) => {
                let tokens = tokens.as_u64()?;
                if tokens != 0 && !priced.contains(key) {
                    return None;
                }
                written.insert((*key).into(), json!(tokens));
            }
        }
    }
    (!written.is_empty()).then_some(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane::cost::{CachePrices, Pricing};
    use crate::wire::pyjson::python_float;

    fn completion() -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
            "model": "gpt-4o-mini", "system_fingerprint": "fp",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
                "message": {"role": "assistant", "content": "hi",
                    "provider_specific_fields": {"refusal": null}},
                "provider_specific_fields": {}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
            "moderation": null, "service_tier": null,
        })
    }

    #[test]
    fn writes_the_proxy_body() {
        let (body, usage) =
            chat_body(AnswerShape::OpenAi, &completion(), "group", ("x", 1)).unwrap();
        assert_eq!(
            String::from_utf8(body).unwrap(),
            concat!(
                r#"{"id":"chatcmpl-1","created":1700000000,"model":"group","object":"chat.completion","#,
                r#""system_fingerprint":"fp","choices":[{"finish_reason":"stop","index":0,"message":"#,
                r#"{"content":"hi","role":"assistant","provider_specific_fields":{"refusal":null}},"#,
                r#""provider_specific_fields":{}}],"usage":{"completion_tokens":7,"prompt_tokens":11,"#,
                r#""total_tokens":18}}"#
            )
        );
        assert_eq!(usage.total_tokens, 18);
    }

    #[test]
    fn writes_tool_calls_in_litellms_order() {
        let mut openai = completion();
        openai["choices"][0]["finish_reason"] = json!("tool_calls");
        openai["choices"][0]["message"] = json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}],
            "annotations": [], "provider_specific_fields": {"refusal": null}});
        let (body, _) = chat_body(AnswerShape::OpenAi, &openai, "group", ("x", 1)).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            serde_json::to_string(&body["choices"][0]["message"]).unwrap(),
            concat!(
                r#"{"role":"assistant","tool_calls":[{"function":{"arguments":"{}","name":"f"},"#,
                r#""id":"c1","type":"function"}],"provider_specific_fields":{"refusal":null},"#,
                r#""annotations":[],"content":null}"#
            )
        );
        openai["choices"][0]["message"]["content"] = json!("Let me check.");
        let (body, _) = chat_body(AnswerShape::OpenAi, &openai, "group", ("x", 1)).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            serde_json::to_string(&body["choices"][0]["message"]).unwrap(),
            concat!(
                r#"{"content":"Let me check.","role":"assistant","tool_calls":[{"function":"#,
                r#"{"arguments":"{}","name":"f"},"id":"c1","type":"function"}],"#,
                r#""provider_specific_fields":{"refusal":null},"annotations":[]}"#
            )
        );
        let converted = |content: Value, extra: Option<Value>| {
            let mut message = json!({"role": "assistant", "content": content,
                "tool_calls": [{"index": 0, "function": {"arguments": "{}", "name": "f"},
                    "id": "t1", "type": "function"}]});
            if let Some(extra) = extra {
                message["provider_specific_fields"] = extra;
            }
            let completion = json!({"object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}});
            let (body, _) = chat_body(AnswerShape::Converted, &completion, "group", ("x", 1))?;
            let body: Value = serde_json::from_slice(&body).unwrap();
            Some(serde_json::to_string(&body["choices"][0]["message"]).unwrap())
        };
        let calls = r#""tool_calls":[{"index":0,"function":{"arguments":"{}","name":"f"},"id":"t1","type":"function"}]"#;
        assert_eq!(
            converted(json!(null), Some(json!({"citations": null}))).unwrap(),
            format!(
                r#"{{"role":"assistant",{calls},"provider_specific_fields":{{"citations":null}},"content":null}}"#
            )
        );
        assert_eq!(
            converted(json!(""), None).unwrap(),
            format!(r#"{{"content":"","role":"assistant",{calls}}}"#)
        );
        // Text and tool calls (compared with the proxy's answer in tests/test_lane_proxy.py).
        assert_eq!(
            converted(json!("Let me check."), Some(json!({"citations": null}))).unwrap(),
            format!(
                r#"{{"content":"Let me check.","role":"assistant",{calls},"provider_specific_fields":{{"citations":null}}}}"#
            )
        );
        assert_eq!(
            converted(json!("Let me check."), None).unwrap(),
            format!(r#"{{"content":"Let me check.","role":"assistant",{calls}}}"#)
        );
        // A shape no test has compared with LiteLLM's: the proxy writes it.
        assert_eq!(converted(json!(null), None), None);
    }

    #[test]
    fn leaves_other_shapes_to_the_proxy() {
        let mut tools = completion();
        tools["choices"][0]["finish_reason"] = json!("tool_calls");
        let mut details = completion();
        details["usage"]["prompt_tokens_details"] = json!({"audio_tokens": 3});
        let mut refusal = completion();
        refusal["choices"][0]["message"]["provider_specific_fields"] = json!({"refusal": "no"});
        let mut extra = completion();
        extra["service_tier"] = json!("priority");
        for odd in [tools, details, refusal, extra] {
            assert!(
                chat_body(AnswerShape::OpenAi, &odd, "group", ("x", 1)).is_none(),
                "{odd}"
            );
        }
    }

    #[test]
    fn writes_litellms_body_for_converted_answers() {
        let converted = json!({
            "object": "chat.completion", "model": "claude",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                "content": "hi", "provider_specific_fields": {"citations": null}}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
                "completion_tokens_details": {"reasoning_tokens": 0, "text_tokens": 7},
                "prompt_tokens_details": {"audio_tokens": null, "cached_tokens": 0},
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "speed": null},
        });
        let (body, _) =
            chat_body(AnswerShape::Converted, &converted, "g", ("chatcmpl-1", 5)).unwrap();
        assert_eq!(
            String::from_utf8(body).unwrap(),
            concat!(
                r#"{"id":"chatcmpl-1","created":5,"model":"g","object":"chat.completion","#,
                r#""choices":[{"finish_reason":"stop","index":0,"message":{"content":"hi","#,
                r#""role":"assistant","provider_specific_fields":{"citations":null}}}],"#,
                r#""usage":{"completion_tokens":7,"prompt_tokens":11,"total_tokens":18,"#,
                r#""completion_tokens_details":{"reasoning_tokens":0,"text_tokens":7},"#,
                r#""prompt_tokens_details":{"cached_tokens":0},"#,
                r#""cache_creation_input_tokens":0,"cache_read_input_tokens":0}}"#
            )
        );
        // The prompt cache read: priced apart, at prices checked for the deployment only.
        let mut cached = converted.clone();
        cached["usage"]["cache_read_input_tokens"] = json!(3);
        let (_, usage) = chat_body(AnswerShape::Converted, &cached, "g", ("x", 1)).unwrap();
        let mut pricing = Pricing {
            input_per_token: 3e-06,
            output_per_token: 1.5e-05,
            cache_read_per_token: None,
            anthropic_cache: None,
        };
        assert!(usage.cost(pricing).is_none());
        pricing.anthropic_cache = Some(CachePrices {
            read: 3e-07,
            write_5m: 3.75e-06,
            write_1h: 6e-06,
        });
        let cost = usage.cost(pricing).unwrap();
        assert_eq!(python_float(cost.cache_read), "9e-07");
        assert_eq!(python_float(cost.input), "2.4e-05");
        // Writes without their split by lifetime: the proxy's.
        cached["usage"]["cache_creation_input_tokens"] = json!(2);
        assert!(chat_body(AnswerShape::Converted, &cached, "g", ("x", 1)).is_none());
    }

    /// OpenAI's usage as the API sends it now: details and `service_tier` (the expected body is
    /// the proxy's, from a run of LiteLLM 1.106.12).
    #[test]
    fn writes_openais_usage_details_and_tier() {
        let mut real = completion();
        real["usage"] = json!({"prompt_tokens": 1919, "completion_tokens": 10,
            "total_tokens": 1929, "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 5, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}});
        real["service_tier"] = json!("default");
        let (body, usage) = chat_body(AnswerShape::OpenAi, &real, "group", ("x", 1)).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            serde_json::to_string(&body["usage"]).unwrap(),
            concat!(
                r#"{"completion_tokens":10,"prompt_tokens":1919,"total_tokens":1929,"#,
                r#""completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"#,
                r#""reasoning_tokens":5,"rejected_prediction_tokens":0},"#,
                r#""prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0}}"#
            )
        );
        assert_eq!(
            body.as_object().unwrap().keys().next_back().unwrap(),
            "service_tier"
        );
        assert_eq!(body["service_tier"], "default");
        assert_eq!(usage.reasoning_tokens, 5);
        // Another tier, an unknown detail: the proxy writes those.
        let mut flex = real.clone();
        flex["service_tier"] = json!("flex");
        let mut unknown = real.clone();
        unknown["usage"]["prompt_tokens_details"]["image_tokens"] = json!(0);
        for odd in [flex, unknown] {
            assert!(
                chat_body(AnswerShape::OpenAi, &odd, "group", ("x", 1)).is_none(),
                "{odd}"
            );
        }
    }
}
