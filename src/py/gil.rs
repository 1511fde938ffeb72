//! The one place that takes the GIL from a thread Python did not start.
//!
//! Tokio's I/O workers never wait for the GIL: everything that needs Python after a call began
//! (handing a result to asyncio, releasing the caller's text and media) goes to one dedicated
//! thread, which runs all of it under a single GIL acquisition. Releases do not make that thread
//! take the GIL by themselves: they ride along with the next handoff (normally the same call's
//! result), or go out within [`RELEASE_DELAY`] — one acquisition per call instead of two. With
//! nothing queued the thread sleeps without a timeout (no periodic wake-ups, no GIL requests
//! while the process is idle). At exit the queue is drained before the interpreter finalizes (a
//! thread asking for the GIL during finalization is killed inside Rust frames). Rebuilt after
//! `fork`, like the runtime.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

type Task = Box<dyn FnOnce(Python<'_>) + Send>;
type Release = Box<dyn Send>;

enum Message {
    /// Work to run with the GIL.
    Task(Task),
    /// A release arrived (or exit began) while the thread slept without a timeout: wake up and
    /// wait at most [`RELEASE_DELAY`] more, without taking the GIL.
    Nudge,
}

/// How long a release may wait for a handoff to ride along with.
const RELEASE_DELAY: Duration = Duration::from_millis(10);

/// Tasks and releases queued and not yet finished.
static PENDING: AtomicUsize = AtomicUsize::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);
/// The queue of the current process (pid, sender).
static QUEUE: Mutex<Option<(u32, Sender<Message>)>> = Mutex::new(None);
/// The GIL thread sleeps without a timeout (nothing queued): a new release must nudge it.
static IDLE: AtomicBool = AtomicBool::new(false);
/// The process whose GIL thread is running (0: none): `drain` waits for it to let go of Python.
static SERVING_PID: AtomicU32 = AtomicU32::new(0);
/// Python objects to release on the next GIL acquisition.
static RELEASES: Mutex<Vec<Release>> = Mutex::new(Vec::new());

/// Runs `task` with the GIL on the GIL thread, soon. After interpreter exit began, the task is
/// dropped instead (its Python references go to PyO3's deferred pool).
pub fn submit(task: impl FnOnce(Python<'_>) + Send + 'static) {
    if EXITING.load(Ordering::SeqCst) {
        return;
    }
    PENDING.fetch_add(1, Ordering::SeqCst);
    if sender().send(Message::Task(Box::new(task))).is_err() {
        PENDING.fetch_sub(1, Ordering::SeqCst);
    }
}

fn sender() -> Sender<Message> {
    let pid = std::process::id();
    let mut slot = QUEUE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, sender)) = slot.as_ref() {
        if *owner == pid {
            return sender.clone();
        }
    }
    let (sender, receiver) = channel();
    // A process that cannot start a thread has bigger problems; the tasks then wait unrun.
    let _ = std::thread::Builder::new()
        // Short enough to stay whole in /proc (15 bytes) and apart from the runtime's threads.
        .name("fastpath-gil".into())
        .spawn(move || serve(receiver));
    *slot = Some((pid, sender.clone()));
    sender
}

/// Releases `owner` (which holds Python references) with the GIL, on the GIL thread.
fn release(owner: Release) {
    if EXITING.load(Ordering::SeqCst) {
        // The process is ending: a release could need the GIL while Python finalizes.
        std::mem::forget(owner);
        return;
    }
    PENDING.fetch_add(1, Ordering::SeqCst);
    let mut releases = RELEASES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    releases.push(owner);
    if releases.len() == 1 {
        drop(releases);
        // Make sure a thread exists to pick it up; if it sleeps without a timeout, start its
        // RELEASE_DELAY clock (a nudge, not a GIL acquisition).
        let sender = sender();
        if IDLE.swap(false, Ordering::SeqCst) {
            let _ = sender.send(Message::Nudge);
        }
    }
}

fn releases_pending() -> bool {
    !RELEASES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .is_empty()
}

/// Waits, without the GIL, for the next task: `Ok(None)` when releases are due (or exit began)
/// and no task came within [`RELEASE_DELAY`].
fn next_task(receiver: &Receiver<Message>) -> Result<Option<Task>, RecvTimeoutError> {
    let mut deadline: Option<Instant> = None;
    loop {
        if EXITING.load(Ordering::SeqCst) {
            return Ok(None);
        }
        if deadline.is_none() {
            // Announce the sleep before looking: a release pushed after the look sees IDLE.
            IDLE.store(true, Ordering::SeqCst);
            if releases_pending() {
                IDLE.store(false, Ordering::SeqCst);
                deadline = Some(Instant::now() + RELEASE_DELAY);
            }
        }
        let message = match deadline {
            None => receiver
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected)?,
            Some(deadline) => {
                match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(message) => message,
                    Err(RecvTimeoutError::Timeout) => return Ok(None),
                    Err(err) => return Err(err),
                }
            }
        };
        IDLE.store(false, Ordering::SeqCst);
        match message {
            Message::Task(task) => return Ok(Some(task)),
            Message::Nudge => {}
        }
    }
}

fn take_releases() -> Vec<Release> {
    std::mem::take(
        &mut *RELEASES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    )
}

#[allow(clippy::disallowed_methods)] // the one sanctioned GIL acquisition
fn serve(receiver: Receiver<Message>) {
    SERVING_PID.store(std::process::id(), Ordering::SeqCst);
    // One thread state for the thread's whole life: it waits with the GIL released (`detach`),
    // so a handoff costs a GIL switch, not setting up and tearing down a thread state.
    let mut receiver = receiver;
    Python::attach(|py| {
        loop {
            // The receiver is moved in and out: `detach` wants `Send`, a `&Receiver` is not.
            let (received, back) = py.detach(move || {
                let received = next_task(&receiver);
                (received, receiver)
            });
            receiver = back;
            let Ok(first) = received else {
                break;
            };
            let releases = take_releases();
            if EXITING.load(Ordering::SeqCst) {
                let count = releases.len() + usize::from(first.is_some());
                // Leaked on purpose: the process is ending.
                std::mem::forget(releases);
                std::mem::forget(first);
                PENDING.fetch_sub(count, Ordering::SeqCst);
                break;
            }
            let count = releases.len();
            drop(releases);
            PENDING.fetch_sub(count, Ordering::SeqCst);
            if let Some(first) = first {
                run(py, first);
            }
            // Everything else already queued runs under the same acquisition.
            while let Ok(message) = receiver.try_recv() {
                if let Message::Task(next) = message {
                    run(py, next);
                }
            }
        }
    });
    // Python is let go of before the interpreter finalizes (see `drain`).
    SERVING_PID.store(0, Ordering::SeqCst);
}

fn run(py: Python<'_>, task: Task) {
    // A panicking task must not take the thread (and every later handoff) with it.
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| task(py)));
    PENDING.fetch_sub(1, Ordering::SeqCst);
}

/// Registered with `atexit`: runs before finalization, while the GIL thread can still take the
/// GIL. Stops new tasks and waits (without the GIL) until the queue is empty and the GIL thread
/// has let go of Python, at most two seconds.
#[pyfunction]
pub fn drain(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    let pid = std::process::id();
    // Wake the GIL thread if it sleeps without a timeout, so it lets go of Python now.
    if let Some((owner, sender)) = QUEUE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .as_ref()
    {
        if *owner == pid {
            let _ = sender.send(Message::Nudge);
        }
    }
    py.detach(|| {
        let deadline = Instant::now() + Duration::from_secs(2);
        while (PENDING.load(Ordering::SeqCst) != 0 || SERVING_PID.load(Ordering::SeqCst) == pid)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// A Python object's buffer held by Rust (e.g. as a `bytes::Bytes` owner). Dropping it, on any
/// thread, releases the object on the GIL thread within [`RELEASE_DELAY`], not at PyO3's next
/// entry from Python.
pub struct ReleasedWithGil<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> ReleasedWithGil<T> {
    pub fn new(owner: T) -> Self {
        ReleasedWithGil(Some(owner))
    }
}

impl<T: AsRef<[u8]> + Send + 'static> AsRef<[u8]> for ReleasedWithGil<T> {
    fn as_ref(&self) -> &[u8] {
        self.0.as_ref().map_or(&[], |owner| owner.as_ref())
    }
}

impl<T: Send + 'static> Drop for ReleasedWithGil<T> {
    fn drop(&mut self) {
        if let Some(owner) = self.0.take() {
            release(Box::new(owner));
        }
    }
}
