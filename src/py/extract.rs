//! Python objects -> core request types. Text and media become `Bytes` that keep the Python
//! object alive instead of copying it.

use bytes::Bytes;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

use super::gil::ReleasedWithGil;
use crate::model::{
    Content, ContentPart, Decline, DeclineCode, EmbeddingInput, ImageUrl, Message, Role,
};
use crate::providers::bedrock::transcription::Audio;
use crate::wire::body::Node;

/// Structurally odd requests decline rather than fail: LiteLLM forwards, coerces or rejects
/// them in its own way, so its Python path decides.
fn malformed(detail: String) -> Decline {
    Decline::new(DeclineCode::MalformedMessage, detail)
}

/// A `str` as UTF-8 `Bytes` owned by the Python object (no copy for ASCII strings).
pub fn str_bytes(value: &Bound<'_, PyAny>, what: &dyn Fn() -> String) -> Result<Bytes, Decline> {
    let text = value
        .cast::<PyString>()
        .map_err(|_| malformed(format!("{} must be a string", what())))?;
    let backed = PyBackedStr::try_from(text.clone())
        .map_err(|_| malformed(format!("{} is not valid Unicode", what())))?;
    Ok(Bytes::from_owner(ReleasedWithGil::new(backed)))
}

/// Raw bytes: `bytes` and read-only buffers (a `memoryview` of `bytes`, read-only `mmap`) are
/// held without a copy, their export pinned until the call ends. Writable buffers (`bytearray`,
/// `memoryview(bytearray)`, `array`, writable `mmap`) are copied once: Python code could change
/// them while they are hashed and sent, and the bytes signed must be the bytes sent.
pub fn buffer_bytes(value: &Bound<'_, PyAny>) -> Result<Bytes, String> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(Bytes::from_owner(ReleasedWithGil::new(
            PyBackedBytes::from(bytes.clone()),
        )));
    }
    if let Ok(array) = value.cast::<PyByteArray>() {
        // PyO3 copies a bytearray into Rust memory here.
        return Ok(Bytes::from_owner(PyBackedBytes::from(array.clone())));
    }
    let buffer = PyBuffer::<u8>::get(value)
        .map_err(|_| "expected bytes, a bytes-like buffer or base64 text".to_string())?;
    if !buffer.is_c_contiguous() {
        return Err("the buffer must be contiguous".to_string());
    }
    let pinned = PinnedBuffer(buffer);
    if !pinned.0.readonly() {
        return Ok(Bytes::copy_from_slice(pinned.as_ref()));
    }
    Ok(Bytes::from_owner(ReleasedWithGil::new(pinned)))
}

/// A buffer export kept alive (and so the exporter's memory pinned) for as long as Rust uses it.
struct PinnedBuffer(PyBuffer<u8>);

impl AsRef<[u8]> for PinnedBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the export is C-contiguous (checked at creation) and stays valid until the
        // PyBuffer is released on drop; the exporter may not resize or free it meanwhile.
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr().cast::<u8>(), self.0.len_bytes()) }
    }
}

/// Audio: base64 text (`str`, sent as is) or raw bytes (encoded while sending).
pub fn audio(value: &Bound<'_, PyAny>) -> Result<Audio, String> {
    if let Ok(text) = value.cast::<PyString>() {
        let backed = PyBackedStr::try_from(text.clone())
            .map_err(|_| "audio text is not valid Unicode".to_string())?;
        return Ok(Audio::Base64(Bytes::from_owner(ReleasedWithGil::new(
            backed,
        ))));
    }
    buffer_bytes(value)
        .map(Audio::Raw)
        .map_err(|why| format!("audio: {why}"))
}

pub fn messages(value: &Bound<'_, PyAny>) -> Result<Vec<Message>, Decline> {
    let list = value
        .cast::<PyList>()
        .map(|list| list.as_any().clone())
        .or_else(|_| value.cast::<PyTuple>().map(|tuple| tuple.as_any().clone()))
        .map_err(|_| malformed("messages must be a list".to_string()))?;
    let mut out = Vec::new();
    for (index, item) in list
        .try_iter()
        .map_err(|_| malformed("messages must be a list".into()))?
        .enumerate()
    {
        let item = item.map_err(|_| malformed("messages must be a list".into()))?;
        out.push(message(&item, index)?);
    }
    if out.is_empty() {
        return Err(malformed("messages must not be empty".to_string()));
    }
    Ok(out)
}

/// The fields of an object the caller sent (a dict with string keys), in order, each as it is
/// read; `at` names where the object is, `expected` what it must be.
fn object_fields<'py>(
    value: &Bound<'py, PyAny>,
    at: impl Fn() -> String,
    expected: &str,
) -> Result<impl Iterator<Item = Result<(PyBackedStr, Bound<'py, PyAny>), Decline>>, Decline> {
    let dict = value
        .cast::<PyDict>()
        .map_err(|_| malformed(format!("{} {expected}", at())))?;
    Ok(dict.iter().map(move |(key, value)| {
        let key: PyBackedStr = key
            .extract()
            .map_err(|_| malformed(format!("{} has a non-string key", at())))?;
        Ok((key, value))
    }))
}

fn message(item: &Bound<'_, PyAny>, index: usize) -> Result<Message, Decline> {
    let mut role = None;
    let mut content = None;
    let mut tool_calls = None;
    let mut tool_call_id = None;
    let at = move || format!("messages[{index}]");
    for field in object_fields(item, at, "must be an object")? {
        let (key, value) = field?;
        match &*key {
            "role" => {
                let name: PyBackedStr = value
                    .extract()
                    .map_err(|_| malformed(format!("messages[{index}].role must be a string")))?;
                role = Some(Role::parse(&name).ok_or_else(|| {
                    Decline::new(DeclineCode::MessageRole, format!("role {:?}", &*name))
                })?);
            }
            "content" => content = Some(value),
            // Explicit nulls are what OpenAI SDKs send for unset optional fields.
            _ if value.is_none() => {}
            "tool_calls" => tool_calls = Some(message_tool_calls(&value, index)?),
            "tool_call_id" => {
                tool_call_id = Some(value.extract::<String>().map_err(|_| {
                    malformed(format!("messages[{index}].tool_call_id must be a string"))
                })?);
            }
            other => {
                return Err(Decline::new(
                    DeclineCode::MessageField,
                    format!("field {other:?}"),
                ));
            }
        }
    }
    let role = role.ok_or_else(|| malformed(format!("messages[{index}] is missing 'role'")))?;
    // Tool-call fields belong to their roles; anywhere else LiteLLM decides what they mean.
    let misplaced = match role {
        Role::Assistant => tool_call_id.is_some().then_some("tool_call_id"),
        Role::Tool => tool_calls.is_some().then_some("tool_calls").or(tool_call_id
            .is_none()
            .then_some("tool message without tool_call_id")),
        _ => tool_calls
            .is_some()
            .then_some("tool_calls")
            .or(tool_call_id.is_some().then_some("tool_call_id")),
    };
    if let Some(field) = misplaced {
        return Err(Decline::new(
            DeclineCode::MessageField,
            format!("messages[{index}]: {field}"),
        ));
    }
    let content = match content {
        Some(value) if !value.is_none() => message_content(&value, index)?,
        // An assistant turn that only calls tools has no content.
        _ if tool_calls.is_some() => Content::Absent,
        _ => {
            return Err(Decline::new(
                DeclineCode::MessageWithoutContent,
                format!("messages[{index}]"),
            ));
        }
    };
    Ok(Message {
        role,
        content,
        tool_calls,
        tool_call_id,
    })
}

/// `tool_calls` of an assistant turn: a non-empty list of `{"id", "type": "function",
/// "function": {"name", "arguments"}}` with string values and nothing else; other shapes are
/// LiteLLM's to judge.
fn message_tool_calls(value: &Bound<'_, PyAny>, index: usize) -> Result<Value, Decline> {
    let odd = || {
        Decline::new(
            DeclineCode::MessageField,
            format!("messages[{index}].tool_calls has an unusual shape"),
        )
    };
    let calls: Value = pythonize::depythonize(value).map_err(|_| odd())?;
    let is_string_map = |value: &Value, keys: &[&str]| {
        value.as_object().is_some_and(|map| {
            map.len() == keys.len()
                && keys.iter().all(|key| {
                    map.get(*key)
                        .is_some_and(|v| v.is_string() || v.is_object())
                })
        })
    };
    let well_formed = calls.as_array().is_some_and(|calls| {
        !calls.is_empty()
            && calls.iter().all(|call| {
                is_string_map(call, &["id", "type", "function"])
                    && call["id"].is_string()
                    && call["type"] == "function"
                    && is_string_map(&call["function"], &["name", "arguments"])
                    && call["function"]["name"].is_string()
                    && call["function"]["arguments"].is_string()
            })
    });
    if well_formed { Ok(calls) } else { Err(odd()) }
}

fn message_content(value: &Bound<'_, PyAny>, index: usize) -> Result<Content, Decline> {
    if value.is_instance_of::<PyString>() {
        return Ok(Content::Text(str_bytes(value, &|| {
            format!("messages[{index}].content")
        })?));
    }
    let list = value.cast::<PyList>().map_err(|_| {
        malformed(format!(
            "messages[{index}].content must be a string or a list of content parts"
        ))
    })?;
    if list.is_empty() {
        return Err(Decline::new(
            DeclineCode::EmptyContent,
            format!("messages[{index}]"),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(part_index, part)| content_part(&part, index, part_index))
        .collect::<Result<Vec<_>, _>>()
        .map(Content::Parts)
}

fn content_part(
    part: &Bound<'_, PyAny>,
    index: usize,
    part_index: usize,
) -> Result<ContentPart, Decline> {
    let at = || format!("messages[{index}].content[{part_index}]");
    let dict = part
        .cast::<PyDict>()
        .map_err(|_| malformed(format!("{} must be an object", at())))?;
    let kind: PyBackedStr = dict
        .get_item("type")
        .ok()
        .flatten()
        .ok_or_else(|| malformed(format!("{} is missing 'type'", at())))?
        .extract()
        .map_err(|_| malformed(format!("{}.type must be a string", at())))?;
    let allowed: &[&str] = match &*kind {
        "text" => &["type", "text"],
        "image_url" => &["type", "image_url"],
        other => {
            return Err(Decline::new(
                DeclineCode::ContentPart,
                format!("part type {other:?}"),
            ));
        }
    };
    for key in dict.keys() {
        let key: PyBackedStr = key
            .extract()
            .map_err(|_| malformed(format!("{} has a non-string key", at())))?;
        if !allowed.contains(&&*key) {
            return Err(Decline::new(
                DeclineCode::ContentPartField,
                format!("field {:?}", &*key),
            ));
        }
    }
    let field = |name: &str| dict.get_item(name).ok().flatten();
    match &*kind {
        "text" => {
            let text =
                field("text").ok_or_else(|| malformed(format!("{} is missing 'text'", at())))?;
            Ok(ContentPart::Text(str_bytes(&text, &|| {
                format!("{}.text", at())
            })?))
        }
        _ => {
            let image = field("image_url")
                .ok_or_else(|| malformed(format!("{} is missing 'image_url'", at())))?;
            Ok(ContentPart::Image(image_url(&image, &at)?))
        }
    }
}

fn image_url(value: &Bound<'_, PyAny>, at: &dyn Fn() -> String) -> Result<ImageUrl, Decline> {
    if value.is_instance_of::<PyString>() {
        return Ok(ImageUrl {
            url: str_bytes(value, &|| format!("{}.image_url", at()))?,
            detail: None,
            format: None,
        });
    }
    let mut url = None;
    let mut detail = None;
    let mut format = None;
    let image_at = || format!("{}.image_url", at());
    for field in object_fields(value, image_at, "must be a string or an object")? {
        let (key, item) = field?;
        let text = |name: &str| -> Result<String, Decline> {
            item.extract::<String>()
                .map_err(|_| malformed(format!("{}.image_url.{name} must be a string", at())))
        };
        match &*key {
            "url" => url = Some(str_bytes(&item, &|| format!("{}.image_url.url", at()))?),
            "detail" if !item.is_none() => detail = Some(text("detail")?),
            "format" if !item.is_none() => format = Some(text("format")?),
            "detail" | "format" => {}
            other => {
                return Err(Decline::new(
                    DeclineCode::ContentPartField,
                    format!("image_url field {other:?}"),
                ));
            }
        }
    }
    Ok(ImageUrl {
        url: url.ok_or_else(|| malformed(format!("{}.image_url is missing 'url'", at())))?,
        detail,
        format,
    })
}

/// Optional params as JSON. They are small scalars and lists, so a conversion is fine here.
pub fn params(value: &Bound<'_, PyAny>) -> Result<Map<String, Value>, Decline> {
    if value.is_none() {
        return Ok(Map::new());
    }
    let parsed: Value = pythonize::depythonize(value).map_err(|_| {
        Decline::new(
            DeclineCode::ParamType,
            "request parameters are not JSON-compatible",
        )
    })?;
    match parsed {
        Value::Object(map) => Ok(map),
        _ => Err(Decline::new(
            DeclineCode::ParamType,
            "request parameters are not an object",
        )),
    }
}

/// Embeddings `input`: a string, or a non-empty list of strings, of token ids, or of non-empty
/// token-id lists. Other shapes (LiteLLM forwards them as given) decline.
pub fn embedding_input(value: &Bound<'_, PyAny>) -> Result<EmbeddingInput, Decline> {
    let odd = |detail: &str| Decline::new(DeclineCode::EmbeddingInput, detail);
    if let Ok(text) = value.cast::<PyString>() {
        return text
            .to_str()
            .map(|text| EmbeddingInput::Text(text.to_owned()))
            .map_err(|_| odd("input is not valid Unicode"));
    }
    let list = value
        .cast_exact::<PyList>()
        .map_err(|_| odd("input is neither a string nor a list"))?;
    let first = list
        .iter()
        .next()
        .ok_or_else(|| odd("input is an empty list"))?;
    if first.is_instance_of::<PyString>() {
        return list
            .iter()
            .map(|item| match item.cast::<PyString>() {
                Ok(text) => text.to_str().map(str::to_owned).ok(),
                Err(_) => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(EmbeddingInput::Texts)
            .ok_or_else(|| odd("input mixes strings with other values"));
    }
    if first.is_instance_of::<PyList>() {
        return list
            .iter()
            .map(|item| {
                let inner = item.cast_exact::<PyList>().ok()?;
                (!inner.is_empty()).then_some(())?;
                token_ids(inner)
            })
            .collect::<Option<Vec<_>>>()
            .map(EmbeddingInput::TokenLists)
            .ok_or_else(|| odd("input is not a list of non-empty token-id lists"));
    }
    token_ids(list)
        .map(EmbeddingInput::Tokens)
        .ok_or_else(|| odd("input is not a list of strings or token ids"))
}

/// Non-negative integers (not bools) that fit a u64.
fn token_ids(list: &Bound<'_, PyList>) -> Option<Vec<u64>> {
    list.iter()
        .map(|item| {
            if item.is_instance_of::<PyBool>() || !item.is_instance_of::<PyInt>() {
                return None;
            }
            item.extract::<u64>().ok()
        })
        .collect()
}

/// Strings at most this long are copied into a `Value` (cheaper than holding the object).
const SHARED_STR_MIN: usize = 256;
/// Deeper documents decline (LiteLLM's `json.dumps` has its own recursion limit).
const MAX_DEPTH: usize = 64;

/// Any JSON-compatible Python value as a body `Node`: long strings stay in the Python object
/// (no copy), dict keys keep their order. Values JSON cannot hold (NaN, non-string keys,
/// other types) decline: LiteLLM has its own answer for them.
pub fn document(value: &Bound<'_, PyAny>) -> Result<Node, Decline> {
    document_at(value, 0)
}

fn document_at(value: &Bound<'_, PyAny>, depth: usize) -> Result<Node, Decline> {
    let odd = |what: &str| Decline::new(DeclineCode::ParamType, what.to_string());
    if depth > MAX_DEPTH {
        return Err(odd("a value nested too deeply"));
    }
    if let Ok(text) = value.cast::<PyString>() {
        let backed = PyBackedStr::try_from(text.clone())
            .map_err(|_| odd("a string that is not valid Unicode"))?;
        if backed.len() < SHARED_STR_MIN {
            return Ok(Node::Value(Value::String(backed.to_string())));
        }
        return Ok(Node::Str(Bytes::from_owner(ReleasedWithGil::new(backed))));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut pairs = Vec::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let key = key
                .cast::<PyString>()
                .map_err(|_| odd("an object key that is not a string"))?
                .to_str()
                .map_err(|_| odd("an object key that is not valid Unicode"))?
                .to_string();
            pairs.push((key, document_at(&item, depth + 1)?));
        }
        return Ok(Node::Object(pairs));
    }
    if let Ok(list) = value.cast::<PyList>() {
        let mut items = Vec::with_capacity(list.len());
        for item in list.iter() {
            items.push(document_at(&item, depth + 1)?);
        }
        return Ok(Node::Array(items));
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        // `json.dumps` writes tuples as arrays.
        let mut items = Vec::with_capacity(tuple.len());
        for item in tuple.iter() {
            items.push(document_at(&item, depth + 1)?);
        }
        return Ok(Node::Array(items));
    }
    if value.is_none() {
        return Ok(Node::Value(Value::Null));
    }
    if value.cast::<PyBool>().is_ok() || value.cast::<PyInt>().is_ok() {
        return pythonize::depythonize::<Value>(value)
            .map(Node::Value)
            .map_err(|_| odd("an integer JSON cannot hold"));
    }
    if let Ok(number) = value.cast::<pyo3::types::PyFloat>() {
        return serde_json::Number::from_f64(number.value())
            .map(|n| Node::Value(Value::Number(n)))
            .ok_or_else(|| odd("a number that is not finite"));
    }
    Err(odd("a value of a type JSON has no form for"))
}
