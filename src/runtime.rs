//! One tokio runtime and one HTTP pool per process, rebuilt after `fork`.
//!
//! Proxy workers are forked from a parent that may already have imported us; a runtime's
//! threads and a pool's sockets do not survive `fork`, so each process builds its own.

use std::sync::{Arc, Mutex};

use crate::http::client::{Transport, TransportError};

pub struct Engine {
    pid: u32,
    pub runtime: tokio::runtime::Runtime,
    pub transport: Transport,
}

static ENGINE: Mutex<Option<Arc<Engine>>> = Mutex::new(None);

/// Worker threads for I/O; env `LITELLM_FASTPATH_THREADS` overrides (default 2).
fn worker_threads() -> usize {
    std::env::var("LITELLM_FASTPATH_THREADS")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2)
}

/// The engine of the current process, created on first use.
pub fn engine() -> Result<Arc<Engine>, TransportError> {
    let pid = std::process::id();
    let mut slot = ENGINE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(engine) = slot.as_ref() {
        if engine.pid == pid {
            return Ok(Arc::clone(engine));
        }
        // Inherited from the parent: its threads are gone, and dropping it would try to join
        // them. Leak it instead (one per fork).
        if let Some(stale) = slot.take() {
            std::mem::forget(stale);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
        .thread_name("litellm-fastpath")
        .enable_all()
        .build()
        .map_err(|err| TransportError::Setup(err.to_string()))?;
    // reqwest's client must be built inside the runtime that drives its connections.
    let transport = {
        let _guard = runtime.enter();
        Transport::new()?
    };
    let engine = Arc::new(Engine {
        pid,
        runtime,
        transport,
    });
    *slot = Some(Arc::clone(&engine));
    Ok(engine)
}
