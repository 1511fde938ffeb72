//! Streamed calls for Python: open the call (asyncio or blocking), then drain its chunks in
//! batches, one handoff per batch however many chunks it holds.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::bridge::settle_later;
use super::errors::{InternalError, call_error_to_py, panic_to_py, stream_error_to_py};
use super::headers::headers_to_py;
use crate::call::CallError;
use crate::http::UpstreamRequest;
use crate::http::client::{OpenResponse, TransportError};
use crate::providers::messages::stream::sse_frame;
use crate::runtime::{self, Engine};
use crate::stream::{self, Batch, Receiver, StreamError, StreamTransform};
use http::HeaderMap;

enum StreamWork {
    Live {
        request: Box<UpstreamRequest>,
        transform: Box<dyn StreamTransform>,
    },
    /// A stream the fast lane already read: how it opened, and the pieces to hand over.
    Replayed {
        opened: Result<HeaderMap, CallError>,
        pieces: Vec<stream::Piece>,
    },
}

/// What a handle's batches carry to Python.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// Chunk dicts, or SSE frames when a frame model is given.
    Chunks,
    /// The provider's bytes as they arrived.
    Raw,
    /// `/v1/messages` events as LiteLLM writes them (`event: …\ndata: {json.dumps}`).
    MessagesSse,
}

/// A streamed request that passed admission; it can be started exactly once.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct PreparedStream {
    work: Mutex<Option<StreamWork>>,
    url: String,
    payload: Payload,
}

impl PreparedStream {
    pub fn new(request: UpstreamRequest, transform: Box<dyn StreamTransform>) -> Self {
        let payload = if transform.forwards_raw() {
            Payload::Raw
        } else {
            Payload::Chunks
        };
        Self::with_payload(request, transform, payload)
    }

    pub fn with_payload(
        request: UpstreamRequest,
        transform: Box<dyn StreamTransform>,
        payload: Payload,
    ) -> Self {
        PreparedStream {
            url: request.url.clone(),
            payload,
            work: Mutex::new(Some(StreamWork::Live {
                request: Box::new(request),
                transform,
            })),
        }
    }

    /// A stream the fast lane served, for the proxy's replay of it: it opens as the provider's
    /// stream did and yields `pieces` (its first chunk and its end) without calling anyone.
    pub fn replayed(
        opened: Result<HeaderMap, CallError>,
        pieces: Vec<stream::Piece>,
        payload: Payload,
    ) -> Self {
        PreparedStream {
            url: String::new(),
            payload,
            work: Mutex::new(Some(StreamWork::Replayed { opened, pieces })),
        }
    }

    fn take(&self) -> PyResult<StreamWork> {
        self.work
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .ok_or_else(|| InternalError::new_err("this stream was already started"))
    }
}

fn engine() -> PyResult<Arc<Engine>> {
    runtime::engine().map_err(super::errors::transport_error_to_py)
}

#[pymethods]
impl PreparedStream {
    /// The provider URL this call posts to (what LiteLLM logs as `api_base`).
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// Opens the stream; once the provider's status and headers are in, `settle(future, ok,
    /// value)` runs on `event_loop` with the provider's headers (or the exception to raise).
    /// The chunks are read from the returned handle.
    fn start(
        &self,
        event_loop: Py<PyAny>,
        future: Py<PyAny>,
        settle: Py<PyAny>,
    ) -> PyResult<StreamHandle> {
        let work = self.take()?;
        let engine = engine()?;
        let (tx, receiver) = stream::channel();
        let stop = Arc::new(tokio::sync::Notify::new());
        let pump_stop = Arc::clone(&stop);
        let task_engine = Arc::clone(&engine);
        let (request, transform) = match work {
            StreamWork::Live { request, transform } => (request, transform),
            StreamWork::Replayed { opened, pieces } => {
                let task = engine.runtime.spawn(async move {
                    let (ok, opened) = (opened.is_ok(), opened);
                    settle_later(event_loop, settle, future, move |py| match opened {
                        Ok(headers) => Ok(headers_to_py(py, &headers)?.into_any().unbind()),
                        Err(err) => Err(call_error_to_py(py, err)),
                    });
                    if ok {
                        for piece in pieces {
                            if tx.send(piece).await.is_err() {
                                return;
                            }
                        }
                    }
                });
                return Ok(StreamHandle::new(
                    receiver,
                    task.abort_handle(),
                    self.payload,
                    stop,
                ));
            }
        };
        let task = engine.runtime.spawn(async move {
            let opened = AssertUnwindSafe(stream::open(&task_engine.transport, *request))
                .catch_unwind()
                .await;
            let response = match opened {
                Ok(Ok(response)) => response,
                Ok(Err(err)) => {
                    settle_later(event_loop, settle, future, move |py| {
                        Err(call_error_to_py(py, err))
                    });
                    return;
                }
                Err(panic) => {
                    settle_later(event_loop, settle, future, move |_| Err(panic_to_py(panic)));
                    return;
                }
            };
            let headers = response.headers().clone();
            settle_later(event_loop, settle, future, move |py| {
                Ok(headers_to_py(py, &headers)?.into_any().unbind())
            });
            run_pump(response, transform, tx, pump_stop).await;
        });
        Ok(StreamHandle::new(
            receiver,
            task.abort_handle(),
            self.payload,
            stop,
        ))
    }

    /// Opens the stream with the GIL released; returns `(handle, provider_headers)`.
    fn start_blocking(&self, py: Python<'_>) -> PyResult<(StreamHandle, Py<PyAny>)> {
        let StreamWork::Live { request, transform } = self.take()? else {
            return Err(InternalError::new_err(
                "a replayed stream is read with asyncio",
            ));
        };
        let engine = engine()?;
        let opened = py.detach(|| {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                engine
                    .runtime
                    .block_on(stream::open(&engine.transport, *request))
            }))
        });
        let response = match opened {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => return Err(call_error_to_py(py, err)),
            Err(panic) => return Err(panic_to_py(panic)),
        };
        let headers = headers_to_py(py, response.headers())?.into_any().unbind();
        let (tx, receiver) = stream::channel();
        let stop = Arc::new(tokio::sync::Notify::new());
        let task = engine
            .runtime
            .spawn(run_pump(response, transform, tx, Arc::clone(&stop)));
        Ok((
            StreamHandle::new(receiver, task.abort_handle(), self.payload, stop),
            headers,
        ))
    }
}

async fn run_pump(
    response: OpenResponse,
    transform: Box<dyn StreamTransform>,
    tx: tokio::sync::mpsc::Sender<stream::Piece>,
    stop: Arc<tokio::sync::Notify>,
) {
    let guard_tx = tx.clone();
    let pumped = AssertUnwindSafe(stream::pump(response, transform, tx, stop))
        .catch_unwind()
        .await;
    if let Err(panic) = pumped {
        let detail = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let _ = guard_tx
            .send(stream::Piece::Failed(StreamError::Transport(
                TransportError::Setup(format!("internal error in litellm-fastpath: {detail}")),
            )))
            .await;
    }
}

/// A started stream's chunks. Dropping it (or `cancel`) stops the upstream read at once.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct StreamHandle {
    receiver: Arc<tokio::sync::Mutex<Receiver>>,
    abort: tokio::task::AbortHandle,
    payload: Payload,
    stop: Arc<tokio::sync::Notify>,
}

impl StreamHandle {
    fn new(
        receiver: Receiver,
        abort: tokio::task::AbortHandle,
        payload: Payload,
        stop: Arc<tokio::sync::Notify>,
    ) -> Self {
        StreamHandle {
            receiver: Arc::new(tokio::sync::Mutex::new(receiver)),
            abort,
            payload,
            stop,
        }
    }
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        self.abort.abort();
    }
}

/// `(payload, text, end)`. payload: a list of chunk dicts, or — when `frames_model` is given —
/// `bytes` of SSE frames as the proxy writes them, with that model name, or the provider's
/// bytes (`/v1/messages` streams); text: the content of
/// the batch's chunks joined (what LiteLLM would bill on a disconnect); end: None (more to
/// come), the whole answer as one chunk dict (the stream is over) or the exception that ended
/// it. A handle drained past its end gives `(None, "", None)`.
fn batch_to_py(
    py: Python<'_>,
    batch: Option<(Batch, Option<Vec<u8>>)>,
    payload: Payload,
) -> PyResult<Py<PyAny>> {
    let Some((batch, frames)) = batch else {
        return Ok((py.None(), "", py.None())
            .into_pyobject(py)?
            .into_any()
            .unbind());
    };
    let text: String = batch
        .chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    let payload: Py<PyAny> = match (payload, frames) {
        (Payload::Raw, _) => PyBytes::new(py, &batch.raw).into_any().unbind(),
        (Payload::Chunks | Payload::MessagesSse, Some(frames)) => {
            PyBytes::new(py, &frames).into_any().unbind()
        }
        (Payload::MessagesSse, None) => PyBytes::new(py, b"").into_any().unbind(),
        (Payload::Chunks, None) => {
            let list = PyList::empty(py);
            for chunk in &batch.chunks {
                list.append(pythonize::pythonize(py, chunk).map_err(|err| {
                    InternalError::new_err(format!("cannot convert a stream chunk: {err}"))
                })?)?;
            }
            list.into_any().unbind()
        }
    };
    let end: Py<PyAny> = match batch.end {
        None => py.None(),
        Some(Ok(answer)) => pythonize::pythonize(py, &answer)
            .map_err(|err| InternalError::new_err(format!("cannot convert the answer: {err}")))?
            .unbind(),
        Some(Err(err)) => stream_error_to_py(py, err).into_value(py).into_any(),
    };
    Ok((payload, text, end).into_pyobject(py)?.into_any().unbind())
}

/// The next batch, with its frames serialized here (on tokio) when asked for.
async fn next_batch(
    receiver: Arc<tokio::sync::Mutex<Receiver>>,
    frames_model: Option<String>,
    limit: usize,
    payload: Payload,
) -> Option<(Batch, Option<Vec<u8>>)> {
    let batch = receiver.lock().await.next_batch(limit).await?;
    if payload == Payload::MessagesSse {
        let mut frames = Vec::new();
        for event in &batch.chunks {
            sse_frame(event, &mut frames);
        }
        return Some((batch, Some(frames)));
    }
    let frames = frames_model.map(|model| {
        let mut frames = Vec::new();
        for chunk in &batch.chunks {
            stream::proxy_frame(chunk, &model, &mut frames);
        }
        frames
    });
    Some((batch, frames))
}

#[pymethods]
impl StreamHandle {
    /// Waits for the next batch; `settle(future, ok, (payload, text, end))` runs on
    /// `event_loop`. With `frames_model`, the payload is ready-to-send SSE frames.
    /// `limit` caps the chunks handed over (the rest wait for the next call).
    #[pyo3(signature = (event_loop, future, settle, frames_model=None, limit=usize::MAX))]
    fn next(
        &self,
        event_loop: Py<PyAny>,
        future: Py<PyAny>,
        settle: Py<PyAny>,
        frames_model: Option<String>,
        limit: usize,
    ) -> PyResult<()> {
        let engine = engine()?;
        let receiver = Arc::clone(&self.receiver);
        let payload = self.payload;
        engine.runtime.spawn(async move {
            let batch = next_batch(receiver, frames_model, limit, payload).await;
            settle_later(event_loop, settle, future, move |py| {
                batch_to_py(py, batch, payload)
            });
        });
        Ok(())
    }

    /// The next batch, waiting with the GIL released.
    fn next_blocking(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let engine = engine()?;
        let receiver = Arc::clone(&self.receiver);
        let batch = py.detach(|| {
            engine
                .runtime
                .block_on(next_batch(receiver, None, usize::MAX, self.payload))
        });
        batch_to_py(py, batch, self.payload)
    }

    /// Ends the stream here: the upstream connection is closed, and the next batches carry what
    /// was read so far and the end (the answer up to now, for logging a partial stream).
    fn stop(&self) {
        self.stop.notify_one();
    }

    /// Stops the stream: the upstream connection is closed, buffered chunks are dropped.
    fn cancel(&self) {
        self.abort.abort();
    }

    /// `cancel`, under the name LiteLLM's stream wrapper calls on its completion stream.
    fn close(&self) {
        self.abort.abort();
    }

    fn done(&self) -> bool {
        self.abort.is_finished()
    }
}
