//! The proxy's answer to a `/v1/messages` call: the provider's JSON as Python reads and writes
//! it back (compact, raw UTF-8, floats as `repr`) with `model` set to the model group; answers
//! whose cost has parts the lane does not price (another tier, server tools; cache reads and
//! writes where LiteLLM's cost of them is not the lane's) are left to the proxy.

use serde_json::Value;

use crate::lane::cost::MessagesUsage;
use crate::wire::pyjson::python_json_compact;

/// The proxy's body for the provider's answer, and its usage; None when the lane leaves the
/// answer to the proxy.
pub fn answer_body(raw: &[u8], model_group: &str) -> Option<(Vec<u8>, MessagesUsage)> {
    let Ok(Value::Object(mut answer)) = serde_json::from_slice::<Value>(raw) else {
        return None;
    };
    if answer.get("type")? != "message" || !answer.get("model")?.is_string() {
        return None;
    }
    let usage = MessagesUsage::read(answer.get("usage")?)?;
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
    use super::*;

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
