//! Embeddings, what every provider shares: the call (the upstream requests LiteLLM would send,
//! and how its 2xx answers become the dict the Python layer turns into LiteLLM's
//! `EmbeddingResponse`), and the param rules. Each provider builds its own (`embeddings`).
//!
//! Vectors keep every float bit for bit: `serde_json` parses with `float_roundtrip` (correctly
//! rounded, as Python's `json` does) and the binding layer hands Python the same `f64`s.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::error::TransformError;
use super::parts::json_object;
use crate::http::UpstreamRequest;
use crate::model::{Decline, DeclineCode};

/// An admitted embeddings call: its upstream requests and how to read the answers.
#[derive(Debug)]
pub struct EmbeddingCall {
    /// Sent one after another, each once; the first failure ends the call (LiteLLM sends Titan
    /// one request per input, in order, and stops at the first error).
    pub requests: Vec<UpstreamRequest>,
    pub answer: EmbeddingAnswer,
}

/// How a call's 2xx bodies (one per request, in order) become the embedding response: the
/// provider's reader, and the model it names.
#[derive(Clone, Debug)]
pub struct EmbeddingAnswer {
    pub model: String,
    pub read: fn(model: &str, answers: Vec<Value>) -> Result<Value, TransformError>,
}

impl EmbeddingAnswer {
    pub fn parse(&self, bodies: &[Bytes]) -> Result<Value, TransformError> {
        let objects = bodies
            .iter()
            .map(json_object)
            .collect::<Result<Vec<_>, _>>()?;
        (self.read)(&self.model, objects)
    }
}

/// The one answer of a call that sends one request.
pub(crate) fn one(mut answers: Vec<Value>) -> Result<Value, TransformError> {
    match answers.len() {
        1 => Ok(answers.remove(0)),
        n => Err(TransformError::InvalidResponse(format!(
            "expected one answer, got {n}"
        ))),
    }
}

/// Params outside `allowed` decline (LiteLLM forwards, drops or rejects them per model).
pub(crate) fn admit_params(allowed: &[&str], params: &Map<String, Value>) -> Result<(), Decline> {
    match params.keys().find(|name| !allowed.contains(&name.as_str())) {
        Some(name) => Err(Decline::new(
            DeclineCode::UnsupportedParam,
            format!("embedding param {name:?}"),
        )),
        None => Ok(()),
    }
}

/// `encoding_format` when it is one of the two every provider maps the same way; other values
/// are forwarded verbatim, mapped or dropped per model by LiteLLM.
pub(crate) fn encoding_format(params: &Map<String, Value>) -> Result<Option<&str>, Decline> {
    match params.get("encoding_format") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(format)) if format == "float" || format == "base64" => {
            Ok(Some(format.as_str()))
        }
        Some(_) => Err(Decline::new(
            DeclineCode::ParamType,
            "encoding_format other than \"float\" or \"base64\"",
        )),
    }
}

/// A positive integer param (`dimensions`): other values are the provider's to judge.
pub(crate) fn positive_integer(
    params: &Map<String, Value>,
    name: &str,
) -> Result<Option<u64>, Decline> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
            Decline::new(
                DeclineCode::ParamType,
                format!("param {name:?} is not a positive integer"),
            )
        }),
    }
}

/// A string param, or a decline naming it.
pub(crate) fn string_param<'a>(
    params: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, Decline> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.as_str())),
        Some(_) => Err(Decline::new(
            DeclineCode::ParamType,
            format!("param {name:?} is not a string"),
        )),
    }
}

/// An `{"embedding": ..., "index": i, "object": "embedding"}` item (the OpenAI field order).
pub(crate) fn embedding_item(embedding: Value, index: usize) -> Value {
    let mut item = Map::with_capacity(3);
    item.insert("embedding".into(), embedding);
    item.insert("index".into(), Value::from(index));
    item.insert("object".into(), Value::from("embedding"));
    Value::Object(item)
}
