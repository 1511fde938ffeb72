//! One tokio runtime and one HTTP pool per process, rebuilt after `fork`.
//!
//! Proxy workers are forked from a parent that may already have imported us; a runtime's
//! threads and a pool's sockets do not survive `fork`, so each process builds its own.

use std::sync::{Arc, Mutex};

use crate::http::client::{Transport, TransportError};
use crate::http::warm::{WarmSend, WarmTarget, Warmer};

pub struct Engine {
    pid: u32,
    pub runtime: tokio::runtime::Runtime,
    pub transport: Transport,
    /// Keeps the `rust: true` deployments' upstream connections warm in `transport`'s pool.
    pub warmer: Warmer,
}

impl WarmSend for Engine {
    fn warm_once(
        &self,
        target: &WarmTarget,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, ()>> + Send + '_>> {
        self.transport.warm_once(target)
    }
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

/// The scheduling slice asked for each I/O thread, in microseconds; env
/// `LITELLM_FASTPATH_IO_SLICE_US` overrides (0 keeps the kernel's default).
fn io_slice_us() -> u64 {
    std::env::var("LITELLM_FASTPATH_IO_SLICE_US")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(100)
}

/// Asks the kernel for a short scheduling slice for the calling thread (Linux 6.12+, EEVDF's
/// custom slice; older kernels ignore it, and nothing else changes either way). Why: an I/O
/// thread wakes for a few microseconds of work, often on the core where the proxy's Python is
/// running (the lane's replays, a sync callback). With the default slice it waits behind that
/// Python for up to a few milliseconds, which was most of the lane's p99; with a short slice
/// its earlier deadline preempts at once. Its share of the CPU does not change.
#[cfg(target_os = "linux")]
fn shorten_slice(micros: u64) {
    /// `struct sched_attr` (SCHED_ATTR_SIZE_VER0), which libc does not define.
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime_ns: u64,
        deadline_ns: u64,
        period_ns: u64,
    }
    // Policy and nice are this thread's own (SCHED_OTHER, nice 0 unless someone changed it).
    // SAFETY: `getpriority` has no preconditions.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime_ns: micros * 1_000,
        deadline_ns: 0,
        period_ns: 0,
    };
    // SAFETY: `attr` is a valid `sched_attr` of the size it states, alive for the call;
    // pid 0 is the calling thread. A failure (an old kernel, a policy) leaves it as it was.
    unsafe {
        libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0);
    }
}

#[cfg(not(target_os = "linux"))]
fn shorten_slice(_micros: u64) {}

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
    let slice_us = io_slice_us();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
        .thread_name("litellm-fastpath")
        .on_thread_start(move || {
            if slice_us > 0 {
                shorten_slice(slice_us);
            }
        })
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
        warmer: Warmer::default(),
    });
    *slot = Some(Arc::clone(&engine));
    Ok(engine)
}
