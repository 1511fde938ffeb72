//! OpenAI-compatible embeddings: `POST {api_base}/embeddings`, `input` forwarded as given.

use serde_json::{Map, Value};

use super::endpoint::upstream_request;
use crate::http::RequestBody;
use crate::model::{Decline, DeclineCode, EmbeddingRequest};
use crate::providers::embedding::{
    EmbeddingAnswer, EmbeddingCall, admit_params, encoding_format, one, positive_integer,
    string_param,
};
use crate::providers::error::{Refusal, TransformError};
use crate::providers::provider::Deployment;
use crate::wire::body::JsonBody;

/// What LiteLLM sends as given for OpenAI; every other param goes through its `extra_body`
/// merge, or is refused, and stays on its Python path.
const PARAMS: &[&str] = &["user", "dimensions", "encoding_format"];

pub fn build(
    deployment: &Deployment,
    request: &EmbeddingRequest,
) -> Result<EmbeddingCall, Refusal> {
    let params = &request.params;
    admit_params(PARAMS, params)?;
    let user = string_param(params, "user")?;
    let dimensions = positive_integer(params, "dimensions")?;
    if dimensions.is_some() && !deployment.model.contains("text-embedding-3") {
        // LiteLLM refuses `dimensions` for older models unless told to drop it.
        return Err(Decline::new(DeclineCode::ModelSpecific, "dimensions for this model").into());
    }
    let format = encoding_format(params)?;

    // Without `encoding_format` LiteLLM posts its own dict (model first); with it, the OpenAI
    // SDK's `embeddings.create` builds the body (input first, format last).
    let model = Value::from(deployment.model.as_str());
    let input = request.input.to_value();
    let mut body = Map::new();
    match format {
        None => {
            body.insert("model".into(), model);
            body.insert("input".into(), input);
        }
        Some(_) => {
            body.insert("input".into(), input);
            body.insert("model".into(), model);
        }
    }
    if let Some(user) = user {
        body.insert("user".into(), Value::from(user));
    }
    if let Some(dimensions) = dimensions {
        body.insert("dimensions".into(), Value::from(dimensions));
    }
    if let Some(format) = format {
        body.insert("encoding_format".into(), Value::from(format));
    }

    let body = RequestBody::Json(JsonBody::from_json(&Value::Object(body)));
    Ok(EmbeddingCall {
        requests: vec![upstream_request(deployment, "embeddings", body)?],
        answer: EmbeddingAnswer {
            model: deployment.model.clone(),
            read: |_model, answers| parse(one(answers)?),
        },
    })
}

/// The answer as the OpenAI SDK builds it (`CreateEmbeddingResponse.model_dump()`): declared
/// fields first, null when missing, then the provider's extra fields; vector numbers are floats.
pub fn parse(body: Value) -> Result<Value, TransformError> {
    let Value::Object(mut body) = body else {
        return Err(TransformError::UnparsableResponse(
            "expected a JSON object".into(),
        ));
    };
    let mut out = Map::with_capacity(body.len() + 4);
    let data = match body.shift_remove("data") {
        Some(Value::Array(items)) => Value::Array(items.into_iter().map(sdk_item).collect()),
        other => other.unwrap_or(Value::Null),
    };
    out.insert("data".into(), data);
    for field in ["model", "object"] {
        out.insert(
            field.into(),
            body.shift_remove(field).unwrap_or(Value::Null),
        );
    }
    let usage = match body.shift_remove("usage") {
        Some(Value::Object(usage)) => {
            Value::Object(declared_first(usage, &["prompt_tokens", "total_tokens"]))
        }
        other => other.unwrap_or(Value::Null),
    };
    out.insert("usage".into(), usage);
    out.extend(body);
    Ok(Value::Object(out))
}

fn sdk_item(item: Value) -> Value {
    let Value::Object(item) = item else {
        return item;
    };
    let mut item = declared_first(item, &["embedding", "index", "object"]);
    if let Some(Value::Array(numbers)) = item.get_mut("embedding") {
        for number in numbers.iter_mut() {
            if let Some(float) = exact_float(number) {
                *number = Value::from(float);
            }
        }
    }
    Value::Object(item)
}

/// The SDK's `list[float]` turns an integer into a float when the float is exactly equal to it
/// (and keeps other integers as they are).
fn exact_float(number: &Value) -> Option<f64> {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if let Some(n) = number.as_u64() {
        let float = n as f64;
        return (float < 2.0 * TWO_POW_63 && float as u64 == n).then_some(float);
    }
    let n = number.as_i64()?;
    let float = n as f64;
    (float < TWO_POW_63 && float as i64 == n).then_some(float)
}

/// `fields` first (null when missing), then the rest in their order.
fn declared_first(mut object: Map<String, Value>, fields: &[&str]) -> Map<String, Value> {
    let mut out = Map::with_capacity(object.len() + fields.len());
    for field in fields {
        out.insert(
            (*field).into(),
            object.shift_remove(*field).unwrap_or(Value::Null),
        );
    }
    out.extend(object);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_become_floats_only_when_exact() {
        assert_eq!(exact_float(&Value::from(3u64)), Some(3.0));
        assert_eq!(exact_float(&Value::from(-17i64)), Some(-17.0));
        assert_eq!(exact_float(&Value::from(9_007_199_254_740_993u64)), None);
        assert_eq!(exact_float(&Value::from(u64::MAX)), None);
        assert_eq!(
            exact_float(&Value::from(i64::MIN)),
            Some(-9.223_372_036_854_776e18)
        );
        assert_eq!(exact_float(&Value::from(0.5)), None);
    }
}
