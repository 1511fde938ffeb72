//! Running prepared calls: on the tokio runtime for asyncio callers (the GIL thread hands the
//! result back with `loop.call_soon_threadsafe`; an outcome the fast lane already has is handed
//! back at once with `loop.call_soon`), or blocking with the GIL released for sync callers.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::errors::{InternalError, call_error_to_py, panic_to_py, transport_error_to_py};
use super::gil;
use super::headers::headers_to_py;
use crate::call::{self, CallError, Completion, ResponseShape};
use crate::http::UpstreamRequest;
use crate::http::client::Transport;
use crate::runtime;

enum Work {
    Call {
        requests: Vec<UpstreamRequest>,
        shape: ResponseShape,
    },
    /// The fast lane already called the provider; this is the outcome (see `lane`).
    Done(Box<Result<Completion, CallError>>),
}

async fn run(transport: &Transport, work: Work) -> Result<Completion, CallError> {
    match work {
        Work::Call { requests, shape } => call::run(transport, requests, &shape).await,
        Work::Done(outcome) => *outcome,
    }
}

/// A request that passed admission; it can be started exactly once.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct PreparedCall {
    work: Mutex<Option<Work>>,
    url: String,
}

impl PreparedCall {
    pub fn new(request: UpstreamRequest, shape: ResponseShape) -> Self {
        Self::sequence(vec![request], shape)
    }

    /// Requests sent one after another, each once (Titan embeddings: one per input).
    pub fn sequence(requests: Vec<UpstreamRequest>, shape: ResponseShape) -> Self {
        PreparedCall {
            url: requests.first().map(|r| r.url.clone()).unwrap_or_default(),
            work: Mutex::new(Some(Work::Call { requests, shape })),
        }
    }

    /// A call whose provider outcome is already known (the fast lane's ticket).
    pub fn done(outcome: Result<Completion, CallError>, url: String) -> Self {
        PreparedCall {
            url,
            work: Mutex::new(Some(Work::Done(Box::new(outcome)))),
        }
    }

    fn take(&self) -> PyResult<Work> {
        self.work
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .ok_or_else(|| InternalError::new_err("this call was already started"))
    }
}

fn completion_to_py(py: Python<'_>, completion: Completion) -> PyResult<Py<PyAny>> {
    let body = match &completion.raw {
        Some(raw) => PyBytes::new(py, raw).into_any(),
        None => pythonize::pythonize(py, &completion.body)
            .map_err(|err| InternalError::new_err(format!("cannot convert the response: {err}")))?,
    };
    let headers = headers_to_py(py, &completion.headers)?;
    Ok((body, headers).into_pyobject(py)?.into_any().unbind())
}

/// Runs `value` with the GIL on the GIL thread and hands the outcome to asyncio.
pub fn settle_later(
    event_loop: Py<PyAny>,
    settle: Py<PyAny>,
    future: Py<PyAny>,
    value: impl FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send + 'static,
) {
    gil::submit(move |py| {
        let (ok, value) = match value(py) {
            Ok(value) => (true, value),
            Err(err) => (false, err.into_value(py).into_any()),
        };
        // The loop may already be closed (its caller is gone): nobody is left to tell.
        let _ = event_loop.call_method1(py, "call_soon_threadsafe", (settle, future, ok, value));
    });
}

#[pymethods]
impl PreparedCall {
    /// The provider URL this call posts to (what LiteLLM logs as `api_base`).
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// Starts the call; when it ends, `settle(future, ok, value)` runs on `event_loop`.
    /// `value` is `(completion_dict, provider_headers)` or the exception to raise. Called on
    /// the loop's thread.
    fn start(
        &self,
        py: Python<'_>,
        event_loop: Py<PyAny>,
        future: Py<PyAny>,
        settle: Py<PyAny>,
    ) -> PyResult<CallHandle> {
        let work = self.take()?;
        if let Work::Done(outcome) = work {
            // The lane's outcome is here already: hand it over on this thread (`call_soon`),
            // without a runtime task and a GIL-thread handoff per request. Its batches replay
            // hundreds a second, and each handoff made the GIL thread contend with the loop.
            let (ok, value) = match *outcome {
                Ok(completion) => (true, completion_to_py(py, completion)?),
                Err(err) => (false, call_error_to_py(py, err).into_value(py).into_any()),
            };
            event_loop.call_method1(py, "call_soon", (settle, future, ok, value))?;
            return Ok(CallHandle { abort: None });
        }
        let engine = runtime::engine().map_err(transport_error_to_py)?;
        let task_engine = Arc::clone(&engine);
        let task = engine.runtime.spawn(async move {
            let outcome = AssertUnwindSafe(run(&task_engine.transport, work))
                .catch_unwind()
                .await;
            // Converting the answer and waking asyncio happen on the GIL thread.
            settle_later(event_loop, settle, future, move |py| match outcome {
                Ok(Ok(completion)) => completion_to_py(py, completion),
                Ok(Err(err)) => Err(call_error_to_py(py, err)),
                Err(panic) => Err(panic_to_py(panic)),
            });
        });
        Ok(CallHandle {
            abort: Some(task.abort_handle()),
        })
    }

    /// Runs the call to completion on the runtime, with the GIL released.
    fn send_blocking(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let work = self.take()?;
        let engine = runtime::engine().map_err(transport_error_to_py)?;
        let outcome = py.detach(|| {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                engine.runtime.block_on(run(&engine.transport, work))
            }))
        });
        match outcome {
            Ok(Ok(completion)) => completion_to_py(py, completion),
            Ok(Err(err)) => Err(call_error_to_py(py, err)),
            Err(panic) => Err(panic_to_py(panic)),
        }
    }
}

/// Cancels a started call: the upload stops and its buffers are released.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct CallHandle {
    /// The call's task on the runtime; None when its outcome was known at the start.
    abort: Option<tokio::task::AbortHandle>,
}

#[pymethods]
impl CallHandle {
    fn cancel(&self) {
        if let Some(abort) = &self.abort {
            abort.abort();
        }
    }

    fn done(&self) -> bool {
        self.abort.as_ref().is_none_or(|abort| abort.is_finished())
    }
}
