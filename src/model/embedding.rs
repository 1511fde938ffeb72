//! The provider-neutral embeddings request: `input` as the caller sent it, in one of the four
//! shapes every provider's API names (anything else is declined before any I/O).

use serde_json::{Map, Value};

/// `input` of an embeddings call. A single string and a list of strings stay apart because
/// OpenAI-compatible upstreams receive `input` exactly as given.
#[derive(Clone, Debug, PartialEq)]
pub enum EmbeddingInput {
    /// `"text"`
    Text(String),
    /// `["text", ...]` (non-empty)
    Texts(Vec<String>),
    /// `[1, 2, 3]`: one pre-tokenized input (non-empty)
    Tokens(Vec<u64>),
    /// `[[1, 2], [3]]`: several pre-tokenized inputs (non-empty, none empty)
    TokenLists(Vec<Vec<u64>>),
}

impl EmbeddingInput {
    /// The texts, when the input is text (one or many); token input has none.
    pub fn texts(&self) -> Option<Vec<&str>> {
        match self {
            EmbeddingInput::Text(text) => Some(vec![text.as_str()]),
            EmbeddingInput::Texts(texts) => Some(texts.iter().map(String::as_str).collect()),
            EmbeddingInput::Tokens(_) | EmbeddingInput::TokenLists(_) => None,
        }
    }

    /// `input` as JSON, exactly in the shape the caller gave it.
    pub fn to_value(&self) -> Value {
        match self {
            EmbeddingInput::Text(text) => Value::from(text.as_str()),
            EmbeddingInput::Texts(texts) => Value::from(texts.clone()),
            EmbeddingInput::Tokens(tokens) => Value::from(tokens.clone()),
            EmbeddingInput::TokenLists(lists) => {
                Value::Array(lists.iter().map(|list| Value::from(list.clone())).collect())
            }
        }
    }
}

/// An embeddings call: the input plus the params that shape the provider request, in the
/// caller's order.
#[derive(Clone, Debug)]
pub struct EmbeddingRequest {
    pub input: EmbeddingInput,
    pub params: Map<String, Value>,
}
