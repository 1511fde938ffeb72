//! Bedrock embeddings: Amazon Titan text (v1, v2) and Cohere embed models, `POST
//! {endpoint}/model/{id}/invoke`, SigV4-signed, with LiteLLM's bodies, batching and usage.

use serde_json::{Map, Value};

use super::endpoint::{aws_request, invoke_url};
use crate::http::{RequestBody, UpstreamRequest};
use crate::model::{Decline, DeclineCode, EmbeddingRequest};
use crate::providers::embedding::{
    EmbeddingAnswer, EmbeddingCall, admit_params, embedding_item, encoding_format, one,
    positive_integer, string_param,
};
use crate::providers::error::{Refusal, TransformError};
use crate::providers::provider::Deployment;
use crate::wire::body::JsonBody;

/// The embedding families LiteLLM 1.106.12 serves on Bedrock that the fast path reproduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// `amazon.titan-embed-text-v1`: `{"inputText"}` only; LiteLLM refuses every OpenAI param.
    TitanV1,
    /// `amazon.titan-embed-text-v2:0`: `dimensions`, `encoding_format`, `normalize`.
    TitanV2,
    /// `cohere.embed-*` (with or without a region prefix such as `us.`): one batched request.
    Cohere,
}

fn family(model: &str) -> Option<Family> {
    // LiteLLM matches Titan ids exactly (anything else fails before I/O); Cohere by the
    // provider segment of the id (`cohere.embed-…`, or after a region prefix: `us.cohere.…`).
    match model {
        "amazon.titan-embed-text-v1" => return Some(Family::TitanV1),
        "amazon.titan-embed-text-v2:0" => return Some(Family::TitanV2),
        _ => {}
    }
    let mut segments = model.split('.');
    let provider_segment = matches!(
        (segments.next(), segments.next()),
        (Some(_), Some("cohere")) | (Some("cohere"), Some(_))
    );
    (provider_segment && model.contains("cohere.embed") && !model.contains('/'))
        .then_some(Family::Cohere)
}

pub fn build(
    deployment: &Deployment,
    request: &EmbeddingRequest,
) -> Result<EmbeddingCall, Refusal> {
    let family = family(&deployment.model).ok_or_else(|| {
        Decline::new(
            DeclineCode::ModelSpecific,
            "a Bedrock embedding model other than Titan text v1/v2 or Cohere embed",
        )
    })?;
    let texts = request.input.texts().ok_or_else(|| {
        // LiteLLM sends token ids to Bedrock as they are (a body Bedrock rejects).
        Decline::new(DeclineCode::EmbeddingInput, "token ids for a Bedrock model")
    })?;
    let params = &request.params;
    match family {
        Family::TitanV1 => {
            admit_params(&[], params)?;
            titan_call(deployment, &texts, &Map::new())
        }
        Family::TitanV2 => {
            admit_params(&["dimensions", "encoding_format", "normalize"], params)?;
            let mut options = Map::new();
            if let Some(format) = encoding_format(params)? {
                let kind = if format == "base64" {
                    "binary"
                } else {
                    "float"
                };
                options.insert("embeddingTypes".into(), Value::from(vec![kind]));
            }
            if let Some(dimensions) = positive_integer(params, "dimensions")? {
                options.insert("dimensions".into(), Value::from(dimensions));
            }
            match params.get("normalize") {
                None | Some(Value::Null) => {}
                Some(value @ Value::Bool(_)) => {
                    options.insert("normalize".into(), value.clone());
                }
                Some(_) => {
                    return Err(
                        Decline::new(DeclineCode::ParamType, "normalize is not a bool").into(),
                    );
                }
            }
            titan_call(deployment, &texts, &options)
        }
        Family::Cohere => {
            admit_params(
                &["dimensions", "encoding_format", "input_type", "truncate"],
                params,
            )?;
            if texts.iter().any(|text| text.starts_with("data:")) {
                // LiteLLM sends data URLs to Cohere as images.
                return Err(Decline::new(DeclineCode::EmbeddingInput, "a data URL input").into());
            }
            let mut body = Map::new();
            let input_type = string_param(params, "input_type")?.unwrap_or("search_document");
            body.insert("input_type".into(), Value::from(input_type));
            body.insert("texts".into(), Value::from(texts.clone()));
            if let Some(truncate) = string_param(params, "truncate")? {
                body.insert("truncate".into(), Value::from(truncate));
            }
            if let Some(format) = encoding_format(params)? {
                // LiteLLM asks Cohere for floats when the caller wants base64.
                let kind = if format == "base64" { "float" } else { format };
                body.insert("embedding_types".into(), Value::from(vec![kind]));
            }
            if let Some(dimensions) = positive_integer(params, "dimensions")? {
                body.insert("output_dimension".into(), Value::from(dimensions));
            }
            Ok(EmbeddingCall {
                requests: vec![invoke(deployment, Value::Object(body))?],
                answer: EmbeddingAnswer {
                    model: deployment.model.clone(),
                    read: |model, answers| parse_cohere(model, one(answers)?),
                },
            })
        }
    }
}

/// Titan: one request per input, `{"inputText", ...options}`.
fn titan_call(
    deployment: &Deployment,
    texts: &[&str],
    options: &Map<String, Value>,
) -> Result<EmbeddingCall, Refusal> {
    let requests = texts
        .iter()
        .map(|text| {
            let mut body = Map::with_capacity(1 + options.len());
            body.insert("inputText".into(), Value::from(*text));
            body.extend(options.iter().map(|(k, v)| (k.clone(), v.clone())));
            invoke(deployment, Value::Object(body))
        })
        .collect::<Result<_, _>>()?;
    Ok(EmbeddingCall {
        requests,
        answer: EmbeddingAnswer {
            model: deployment.model.clone(),
            read: parse_titan,
        },
    })
}

fn invoke(deployment: &Deployment, body: Value) -> Result<UpstreamRequest, TransformError> {
    let url = invoke_url(deployment)?;
    aws_request(
        deployment,
        url,
        RequestBody::Json(JsonBody::from_json(&body)),
    )
}

fn invalid(what: &str) -> TransformError {
    TransformError::InvalidResponse(what.into())
}

/// Titan: one body per input; the vector is `embeddingsByType.binary`, else `.float`, else
/// `embedding` (LiteLLM's order); usage sums `inputTextTokenCount`.
pub fn parse_titan(model: &str, bodies: Vec<Value>) -> Result<Value, TransformError> {
    let mut data = Vec::with_capacity(bodies.len());
    let mut tokens: u64 = 0;
    for (index, mut body) in bodies.into_iter().enumerate() {
        let by_type = body
            .get_mut("embeddingsByType")
            .and_then(Value::as_object_mut)
            .and_then(|types| {
                types
                    .shift_remove("binary")
                    .or_else(|| types.shift_remove("float"))
            });
        let vector = match by_type {
            Some(vector) => vector,
            None => body
                .get_mut("embedding")
                .map(Value::take)
                .ok_or_else(|| invalid("no embedding in a Titan answer"))?,
        };
        tokens += body
            .get("inputTextTokenCount")
            .and_then(Value::as_u64)
            .ok_or_else(|| invalid("no integer 'inputTextTokenCount' in a Titan answer"))?;
        data.push(embedding_item(vector, index));
    }
    Ok(response(model, data, Some(usage(tokens, None))))
}

/// Cohere: `embeddings` is a list of vectors, or a map of lists per embedding type (each item
/// then says its type, indexes restart per type). Usage comes from `meta.billed_units`; without
/// it LiteLLM counts tokens itself, in Python (`usage` null here).
pub fn parse_cohere(model: &str, mut body: Value) -> Result<Value, TransformError> {
    let by_type = body.get("response_type").and_then(Value::as_str) == Some("embeddings_by_type");
    let item = |embedding: Value, index: usize, kind: Option<&str>| {
        let mut item = Map::with_capacity(4);
        item.insert("object".into(), Value::from("embedding"));
        item.insert("index".into(), Value::from(index));
        item.insert("embedding".into(), embedding);
        if let Some(kind) = kind {
            item.insert("type".into(), Value::from(kind));
        }
        Value::Object(item)
    };
    let data = match body.get_mut("embeddings").map(Value::take) {
        Some(Value::Object(types)) => types
            .into_iter()
            .map(|(kind, vectors)| match vectors {
                Value::Array(vectors) => Ok(vectors
                    .into_iter()
                    .enumerate()
                    .map(|(index, vector)| item(vector, index, Some(&kind)))
                    .collect::<Vec<_>>()),
                _ => Err(invalid("Cohere embeddings of a type are not a list")),
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect(),
        Some(Value::Array(_)) if by_type => {
            return Err(invalid("Cohere embeddings by type are not a map"));
        }
        Some(Value::Array(vectors)) => vectors
            .into_iter()
            .enumerate()
            .map(|(index, vector)| item(vector, index, None))
            .collect(),
        _ => return Err(invalid("no 'embeddings' list in a Cohere answer")),
    };
    let billed = body.pointer("/meta/billed_units");
    let count = |name: &str| {
        billed
            .and_then(|units| units.get(name))
            .and_then(Value::as_u64)
    };
    let (text_tokens, images) = (count("input_tokens"), count("images"));
    let usage = (text_tokens.is_some() || images.is_some()).then(|| {
        let details = serde_json::json!({"text_tokens": text_tokens, "image_tokens": images});
        usage(
            text_tokens.unwrap_or(0) + images.unwrap_or(0),
            Some(details),
        )
    });
    Ok(response(model, data, usage))
}

fn usage(prompt_tokens: u64, details: Option<Value>) -> Value {
    let mut usage = Map::new();
    usage.insert("prompt_tokens".into(), Value::from(prompt_tokens));
    usage.insert("completion_tokens".into(), Value::from(0));
    usage.insert("total_tokens".into(), Value::from(prompt_tokens));
    if let Some(details) = details {
        usage.insert("prompt_tokens_details".into(), details);
    }
    Value::Object(usage)
}

fn response(model: &str, data: Vec<Value>, usage: Option<Value>) -> Value {
    let mut out = Map::new();
    out.insert("model".into(), Value::from(model));
    out.insert("object".into(), Value::from("list"));
    out.insert("data".into(), Value::Array(data));
    out.insert("usage".into(), usage.unwrap_or(Value::Null));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn families_follow_litellms_model_rules() {
        assert_eq!(family("amazon.titan-embed-text-v1"), Some(Family::TitanV1));
        assert_eq!(
            family("amazon.titan-embed-text-v2:0"),
            Some(Family::TitanV2)
        );
        assert_eq!(family("cohere.embed-english-v3"), Some(Family::Cohere));
        assert_eq!(family("us.cohere.embed-v4:0"), Some(Family::Cohere));
        for other in [
            "amazon.titan-embed-text-v2",
            "us.amazon.titan-embed-text-v2:0",
            "amazon.titan-embed-g1-text-02",
            "amazon.titan-embed-image-v1",
            "invoke/cohere.embed-english-v3",
            "cohere.command-r-v1:0",
            "amazon.nova-2-multimodal-embeddings-v1:0",
        ] {
            assert_eq!(family(other), None, "{other}");
        }
    }

    #[test]
    fn titan_prefers_binary_then_float_then_embedding_and_sums_tokens() {
        let bodies = vec![
            json!({"embedding": [1.0], "embeddingsByType": {"float": [2.0], "binary": [1, 0]},
                   "inputTextTokenCount": 3}),
            json!({"embedding": [1.5], "inputTextTokenCount": 4}),
        ];
        let out = parse_titan("m", bodies).unwrap();
        assert_eq!(out["data"][0]["embedding"], json!([1, 0]));
        assert_eq!(out["data"][1]["embedding"], json!([1.5]));
        assert_eq!(out["data"][1]["index"], json!(1));
        assert_eq!(out["usage"]["prompt_tokens"], json!(7));
        assert!(parse_titan("m", vec![json!({"embedding": [1.0]})]).is_err());
    }

    #[test]
    fn cohere_by_type_restarts_indexes_and_usage_needs_billed_units() {
        let body = json!({"embeddings": {"float": [[0.5], [0.25]], "int8": [[1], [2]]},
                          "response_type": "embeddings_by_type"});
        let out = parse_cohere("c", body).unwrap();
        let kinds: Vec<_> = out["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| (item["type"].clone(), item["index"].clone()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (json!("float"), json!(0)),
                (json!("float"), json!(1)),
                (json!("int8"), json!(0)),
                (json!("int8"), json!(1)),
            ]
        );
        assert_eq!(out["usage"], Value::Null);
        let billed = json!({"embeddings": [[0.5]], "meta": {"billed_units": {"input_tokens": 5}}});
        let out = parse_cohere("c", billed).unwrap();
        assert_eq!(out["usage"]["prompt_tokens"], json!(5));
        assert_eq!(
            out["usage"]["prompt_tokens_details"]["text_tokens"],
            json!(5)
        );
    }
}
