//! Admission and transform of each kind of call, before any I/O: a prepared call or stream for
//! the Python layer to start, or why it stays on LiteLLM's path (`Declined`).

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use super::bridge::PreparedCall;
use super::deployment::{Deployment, timeout_from_secs};
use super::errors::{self, InvalidRequestError};
use super::extract;
use super::headers::header_list;
use super::stream::{Payload, PreparedStream};
use crate::call::ResponseShape;
use crate::http::UpstreamRequest;
use crate::model::{ChatRequest, Decline, DeclineCode, EmbeddingRequest};
use crate::providers::bedrock::transcription::{self, TranscriptionRequest};
use crate::providers::chunks::StreamOptions;
use crate::providers::{self, MessagesApi, Refusal, messages};

/// Why a request stays on LiteLLM's Python path.
#[pyclass(frozen, get_all, module = "litellm_fastpath._native")]
pub struct Declined {
    pub code: &'static str,
    pub detail: String,
}

#[pymethods]
impl Declined {
    fn __repr__(&self) -> String {
        format!("Declined(code={:?}, detail={:?})", self.code, self.detail)
    }
}

/// Admission and transform for a chat request, before any I/O: returns a `PreparedCall`
/// or a `Declined`; malformed input raises `InvalidRequestError`.
#[pyfunction]
#[pyo3(signature = (deployment, messages, params, timeout=None))]
pub fn prepare_chat(
    py: Python<'_>,
    deployment: &Deployment,
    messages: &Bound<'_, PyAny>,
    params: &Bound<'_, PyAny>,
    timeout: Option<f64>,
) -> PyResult<Py<PyAny>> {
    let request = match chat_request(messages, params) {
        Ok(request) => request,
        Err(decline) => return declined(py, decline),
    };
    let timeout = timeout.map(timeout_from_secs).transpose()?;
    let core = Arc::clone(&deployment.inner);
    // Structure only (cheap): text and media are checked in the call, off this thread.
    let outcome = providers::prepare(&core, &request)
        .map(|upstream| (vec![upstream], ResponseShape::ChatCompletion(core)));
    prepared_or_declined(py, outcome, timeout)
}

/// Admission and transform for a streamed chat request (`stream=True`), before any I/O:
/// returns a `PreparedStream` or a `Declined`; malformed input raises `InvalidRequestError`.
#[pyfunction]
#[pyo3(signature = (
    deployment, messages, params, *, stream_options=None, strip_usage=false,
    repeat_limit=100, timeout=None,
))]
#[allow(clippy::too_many_arguments)]
pub fn prepare_chat_stream(
    py: Python<'_>,
    deployment: &Deployment,
    messages: &Bound<'_, PyAny>,
    params: &Bound<'_, PyAny>,
    stream_options: Option<&Bound<'_, PyAny>>,
    strip_usage: bool,
    repeat_limit: usize,
    timeout: Option<f64>,
) -> PyResult<Py<PyAny>> {
    let request = match chat_request(messages, params) {
        Ok(request) => request,
        Err(decline) => return declined(py, decline),
    };
    let stream_options = stream_options
        .map(pythonize::depythonize::<serde_json::Value>)
        .transpose()
        .map_err(|err| InvalidRequestError::new_err(format!("stream_options: {err}")))?;
    let options = StreamOptions {
        given: stream_options.is_some(),
        include_usage: stream_options.as_ref().and_then(|o| o.get("include_usage"))
            == Some(&serde_json::Value::Bool(true)),
        strip_usage_artifacts: strip_usage,
        repeat_limit,
    };
    let timeout = timeout.map(timeout_from_secs).transpose()?;
    let outcome = providers::prepare_stream(&deployment.inner, &request, stream_options, options);
    admitted(py, outcome, |(mut upstream, transform)| {
        with_timeout(&mut upstream, timeout);
        Ok(Py::new(py, PreparedStream::new(upstream, transform))?.into_any())
    })
}

/// Admission and transform for a `/v1/messages` request, before any I/O: `fields` are the
/// top-level body fields in LiteLLM's order, `headers` what LiteLLM sends besides the
/// credential. Returns `(call, rewrote_messages)` — a `PreparedCall` (answer: the provider's
/// bytes) or a `PreparedStream` (bytes forwarded as they arrive), and whether LiteLLM's
/// block rules dropped anything from `messages` — or a `Declined`; malformed input raises
/// `InvalidRequestError`.
#[pyfunction]
#[pyo3(signature = (deployment, fields, headers, *, stream=false, timeout=None))]
pub fn prepare_messages(
    py: Python<'_>,
    deployment: &Deployment,
    fields: Vec<(String, Bound<'_, PyAny>)>,
    headers: Vec<(String, String)>,
    stream: bool,
    timeout: Option<f64>,
) -> PyResult<Py<PyAny>> {
    let mut body = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        match extract::document(&value) {
            Ok(node) => body.push((name, node)),
            Err(decline) => return declined(py, decline),
        }
    }
    let headers = header_list(headers)?;
    let request = messages::MessagesRequest {
        fields: body,
        stream,
        headers,
    };
    let timeout = timeout.map(timeout_from_secs).transpose()?;
    admitted(
        py,
        messages::prepare(&deployment.inner, request),
        |prepared| {
            let mut upstream = prepared.upstream;
            with_timeout(&mut upstream, timeout);
            let call = if stream {
                let transform = messages::stream::transform(prepared.api);
                let stream = match prepared.api {
                    // Bedrock's events as LiteLLM writes them.
                    MessagesApi::BedrockInvoke => {
                        PreparedStream::with_payload(upstream, transform, Payload::MessagesSse)
                    }
                    MessagesApi::Anthropic => PreparedStream::new(upstream, transform),
                };
                Py::new(py, stream)?.into_any()
            } else {
                Py::new(py, PreparedCall::new(upstream, ResponseShape::Raw))?.into_any()
            };
            Ok((call, prepared.rewrote_messages)
                .into_pyobject(py)?
                .into_any()
                .unbind())
        },
    )
}

/// Admission and transform for an embeddings request, before any I/O: returns a
/// `PreparedCall` or a `Declined`; malformed input raises `InvalidRequestError`.
#[pyfunction]
#[pyo3(signature = (deployment, input, params, timeout=None))]
pub fn prepare_embedding(
    py: Python<'_>,
    deployment: &Deployment,
    input: &Bound<'_, PyAny>,
    params: &Bound<'_, PyAny>,
    timeout: Option<f64>,
) -> PyResult<Py<PyAny>> {
    let extracted = extract::embedding_input(input).and_then(|input| {
        Ok(EmbeddingRequest {
            input,
            params: extract::params(params)?,
        })
    });
    let request = match extracted {
        Ok(request) => request,
        Err(decline) => return declined(py, decline),
    };
    let timeout = timeout.map(timeout_from_secs).transpose()?;
    let outcome = providers::prepare_embedding(&deployment.inner, &request)
        .map(|call| (call.requests, ResponseShape::Embedding(call.answer)));
    prepared_or_declined(py, outcome, timeout)
}

/// An admission outcome as Python sees it: a `PreparedCall` (the caller's `timeout` applied
/// to every request), a `Declined`, or `InvalidRequestError`.
fn prepared_or_declined(
    py: Python<'_>,
    outcome: Result<(Vec<UpstreamRequest>, ResponseShape), Refusal>,
    timeout: Option<Duration>,
) -> PyResult<Py<PyAny>> {
    admitted(py, outcome, |(mut requests, shape)| {
        for upstream in &mut requests {
            with_timeout(upstream, timeout);
        }
        Ok(Py::new(py, PreparedCall::sequence(requests, shape))?.into_any())
    })
}

/// An admission outcome as Python sees it: what `ready` makes of it, a `Declined`, or
/// `InvalidRequestError`.
fn admitted<T>(
    py: Python<'_>,
    outcome: Result<T, Refusal>,
    ready: impl FnOnce(T) -> PyResult<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    match outcome {
        Ok(value) => ready(value),
        Err(Refusal::Declined(decline)) => declined(py, decline),
        Err(Refusal::Invalid(err)) => Err(errors::transform_error_to_py(err)),
    }
}

/// The caller's timeout, when it gave one, over the deployment's.
fn with_timeout(upstream: &mut UpstreamRequest, timeout: Option<Duration>) {
    if let Some(timeout) = timeout {
        upstream.timeout = timeout;
    }
}

/// A chat request as Python hands it over, or why it stays on LiteLLM's path.
fn chat_request(
    messages: &Bound<'_, PyAny>,
    params: &Bound<'_, PyAny>,
) -> Result<ChatRequest, Decline> {
    let params = extract::params(params)?;
    Ok(ChatRequest {
        messages: extract::messages(messages)?,
        params,
    })
}

/// A Bedrock Converse transcription: `audio` is raw audio (`bytes`, `bytearray`, any
/// contiguous buffer) or existing base64 text (`str`); read-only buffers are not copied.
#[pyfunction]
#[pyo3(signature = (deployment, audio, audio_format, *, language=None, prompt=None, temperature=None, timeout=None))]
#[allow(clippy::too_many_arguments)]
pub fn prepare_transcription(
    deployment: &Deployment,
    audio: &Bound<'_, PyAny>,
    audio_format: String,
    language: Option<String>,
    prompt: Option<String>,
    temperature: Option<&Bound<'_, PyAny>>,
    timeout: Option<f64>,
) -> PyResult<PreparedCall> {
    let audio = extract::audio(audio).map_err(InvalidRequestError::new_err)?;
    let temperature = temperature
        .map(
            |value| match pythonize::depythonize::<serde_json::Value>(value) {
                Ok(value @ (serde_json::Value::Number(_) | serde_json::Value::String(_))) => {
                    Ok(value)
                }
                _ => Err(InvalidRequestError::new_err(
                    "temperature must be a number or a string",
                )),
            },
        )
        .transpose()?;
    let request = TranscriptionRequest {
        audio,
        format: audio_format,
        language,
        prompt,
        temperature,
    };
    let mut upstream = transcription::build_transcription(&deployment.inner, &request)
        .map_err(errors::transform_error_to_py)?;
    with_timeout(&mut upstream, timeout.map(timeout_from_secs).transpose()?);
    Ok(PreparedCall::new(
        upstream,
        ResponseShape::Parsed(transcription::parse_transcription),
    ))
}

/// A Converse call with a JSON body the caller built (`bytes`, not copied); answers as a
/// transcription. For benchmarks that compare body builders (cargo feature `bench`).
#[cfg(feature = "bench")]
#[pyfunction]
#[pyo3(signature = (deployment, body, timeout=None))]
pub fn prepare_converse_body(
    deployment: &Deployment,
    body: &Bound<'_, PyAny>,
    timeout: Option<f64>,
) -> PyResult<PreparedCall> {
    let body = extract::buffer_bytes(body)
        .map_err(|why| InvalidRequestError::new_err(format!("body: {why}")))?;
    let mut upstream = transcription::prebuilt_request(&deployment.inner, body)
        .map_err(errors::transform_error_to_py)?;
    with_timeout(&mut upstream, timeout.map(timeout_from_secs).transpose()?);
    Ok(PreparedCall::new(
        upstream,
        ResponseShape::Parsed(transcription::parse_transcription),
    ))
}

fn declined(py: Python<'_>, decline: Decline) -> PyResult<Py<PyAny>> {
    Ok(Py::new(
        py,
        Declined {
            code: decline.code.as_str(),
            detail: decline.detail,
        },
    )?
    .into_any())
}

/// Every decline reason's name: what `decline_counts()` counts and the README lists.
#[pyfunction]
pub fn decline_codes() -> Vec<&'static str> {
    DeclineCode::ALL.iter().map(|code| code.as_str()).collect()
}
