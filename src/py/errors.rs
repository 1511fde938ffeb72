//! The Python exceptions of the native layer and the one mapping from core errors to them.
//! The Python layer turns these into LiteLLM's own exception classes.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::call::CallError;
use crate::http::client::{TransportError, UpstreamResponse};
use crate::providers::TransformError;
use crate::stream::StreamError;
use crate::wire::eventstream::EventStreamError;

create_exception!(
    _native,
    FastpathError,
    PyException,
    "Base class of litellm-fastpath errors."
);
create_exception!(
    _native,
    InvalidRequestError,
    FastpathError,
    "The caller's request is malformed (HTTP 400); nothing was sent."
);
create_exception!(
    _native,
    UpstreamStatusError,
    FastpathError,
    "The provider answered with a non-2xx status. args: (message, UpstreamStatus)."
);
create_exception!(
    _native,
    UpstreamTimeoutError,
    FastpathError,
    "The provider did not answer within the timeout."
);
create_exception!(
    _native,
    UpstreamConnectionError,
    FastpathError,
    "Connecting to the provider failed or it closed the connection."
);
create_exception!(
    _native,
    InvalidResponseError,
    FastpathError,
    "The provider's 2xx answer could not be parsed."
);
create_exception!(
    _native,
    UpstreamStreamError,
    FastpathError,
    "The provider reported an error inside a stream. args: (message, error_object)."
);
create_exception!(
    _native,
    InternalError,
    FastpathError,
    "A bug in litellm-fastpath (a caught panic); the worker keeps running."
);

/// A provider's non-2xx answer, as `UpstreamStatusError` carries it: the status, the body
/// (text, truncated) and the headers (those that are text).
#[pyclass(frozen, get_all, module = "litellm_fastpath._native")]
pub struct UpstreamStatus {
    status: u16,
    body: String,
    headers: Py<PyDict>,
}

/// Upstream error bodies are quoted in messages, but only this much of them.
const MAX_QUOTED_BODY: usize = 4096;

pub fn truncated_body(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if text.len() <= MAX_QUOTED_BODY {
        return text.into_owned();
    }
    let mut end = MAX_QUOTED_BODY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... [truncated]", &text[..end])
}

pub fn call_error_to_py(py: Python<'_>, err: CallError) -> PyErr {
    match err {
        CallError::Status(response) => {
            let UpstreamResponse {
                status,
                headers,
                body,
            } = *response;
            let header_dict = PyDict::new(py);
            for (name, value) in &headers {
                if let Ok(value) = value.to_str() {
                    let _ = header_dict.set_item(name.as_str(), value);
                }
            }
            let answer = UpstreamStatus {
                status,
                body: truncated_body(&body),
                headers: header_dict.unbind(),
            };
            match Py::new(py, answer) {
                Ok(answer) => UpstreamStatusError::new_err((
                    format!("provider returned HTTP {status}"),
                    answer,
                )),
                Err(err) => err,
            }
        }
        CallError::Transport(err) => transport_error_to_py(err),
        CallError::Signing(err) => InvalidRequestError::new_err(err.to_string()),
        CallError::Transform(err) => transform_error_to_py(err),
    }
}

pub fn transport_error_to_py(err: TransportError) -> PyErr {
    match err {
        TransportError::Timeout(_) => UpstreamTimeoutError::new_err(err.to_string()),
        TransportError::Connect(_) | TransportError::Disconnected(_) => {
            UpstreamConnectionError::new_err(err.to_string())
        }
        TransportError::InvalidUrl(_) => InvalidRequestError::new_err(err.to_string()),
        TransportError::Setup(_) => InternalError::new_err(err.to_string()),
    }
}

pub fn transform_error_to_py(err: TransformError) -> PyErr {
    match err {
        // args: (message, kind): "unparsable" (not a JSON object) or "shape" (fields missing).
        TransformError::UnparsableResponse(_) => {
            InvalidResponseError::new_err((err.to_string(), "unparsable"))
        }
        TransformError::InvalidResponse(_) => {
            InvalidResponseError::new_err((err.to_string(), "shape"))
        }
        TransformError::InvalidRequest(_)
        | TransformError::Body(_)
        | TransformError::Media(_)
        | TransformError::InvalidHeader(_) => InvalidRequestError::new_err(err.to_string()),
    }
}

pub fn stream_error_to_py(py: Python<'_>, err: StreamError) -> PyErr {
    match err {
        StreamError::Transport(err) => transport_error_to_py(err),
        StreamError::Sse(err) => InvalidResponseError::new_err((err.to_string(), "stream")),
        StreamError::EventStream(err) => {
            // args kind: "truncated" (the body ended inside a message) or "stream".
            let kind = match err {
                EventStreamError::Truncated(..) => "truncated",
                EventStreamError::Invalid(_) => "stream",
            };
            InvalidResponseError::new_err((err.to_string(), kind))
        }
        StreamError::Transform(err) => transform_error_to_py(err),
        StreamError::Repetition(_) => UpstreamStreamError::new_err((
            err.to_string(),
            pythonize::pythonize(py, &serde_json::json!({"type": "repetition"}))
                .map(|v| v.unbind())
                .unwrap_or_else(|_| py.None()),
        )),
        StreamError::Provider(error) => match pythonize::pythonize(py, &error) {
            Ok(error) => UpstreamStreamError::new_err((
                "the provider sent an error event mid-stream".to_string(),
                error.unbind(),
            )),
            Err(err) => InternalError::new_err(format!("cannot convert the error event: {err}")),
        },
    }
}

pub fn panic_to_py(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let detail = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    InternalError::new_err(format!("internal error in litellm-fastpath: {detail}"))
}
