//! Idle client connections close as uvicorn closes them: `timeout_keep_alive` seconds after a
//! response has been written, unless the client has sent something since. (uvicorn arms that
//! timer when a response completes and disarms it on any bytes received; a connection that has
//! never been answered, or holds part of the next request, stays open.) The lane takes the
//! public socket, so without this `--keepalive_timeout` would no longer apply to clients.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What the idle rule needs to know about one client connection.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    /// Requests whose response has not been fully written.
    in_flight: AtomicUsize,
    /// When the last response was fully written (ns since `start`); 0: none yet.
    answered_at: AtomicU64,
    /// Bytes arrived since that response.
    read_since: AtomicBool,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Instant::now(),
            in_flight: AtomicUsize::new(0),
            answered_at: AtomicU64::new(0),
            read_since: AtomicBool::new(false),
        })
    }

    /// Marks a request as being answered until the guard is dropped (with its response body).
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(self))
    }

    /// How long until the connection may be closed as idle, given the limit: None while a
    /// request is in flight, before the first answer, or once the client has sent more.
    pub fn idle_close_in(&self, limit: Duration) -> Option<Duration> {
        if self.in_flight.load(Ordering::Acquire) > 0 || self.read_since.load(Ordering::Acquire) {
            return None;
        }
        let answered = self.answered_at.load(Ordering::Acquire);
        if answered == 0 {
            return None;
        }
        let idle = self
            .start
            .elapsed()
            .saturating_sub(Duration::from_nanos(answered));
        Some(limit.saturating_sub(idle))
    }

    fn received(&self) {
        self.read_since.store(true, Ordering::Release);
    }

    fn answered(&self) {
        let now = u64::try_from(self.start.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        // Bytes of the next request may already be in; only later ones count as "since".
        self.read_since.store(false, Ordering::Release);
        self.answered_at.store(now, Ordering::Release);
    }
}

/// A request being answered; dropped when its response body is done.
pub struct InFlight(Arc<Activity>);

/// A response body that holds its request's `InFlight` until hyper drops it (written, or the
/// connection ended); size and end are the body's own, so the framing does not change.
pub struct Answering<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B> Answering<B> {
    pub fn new(body: B, in_flight: InFlight) -> Self {
        Answering {
            body,
            _in_flight: in_flight,
        }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Answering<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.answered();
        }
    }
}

/// The client's socket, noting when bytes arrive.
pub struct Tracked<IO> {
    io: IO,
    activity: Arc<Activity>,
}

impl<IO> Tracked<IO> {
    pub fn new(io: IO, activity: Arc<Activity>) -> Self {
        Tracked { io, activity }
    }

    /// The connection itself (once it is upgraded, idle rules no longer apply).
    pub fn into_inner(self) -> IO {
        self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.received();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    #[test]
    fn a_connection_is_idle_only_after_an_answer_and_until_the_client_sends_more() {
        let activity = Activity::new();
        assert_eq!(activity.idle_close_in(LIMIT), None, "never answered");
        let request = activity.enter();
        assert_eq!(activity.idle_close_in(LIMIT), None, "in flight");
        drop(request);
        let left = activity.idle_close_in(LIMIT).expect("answered, idle");
        assert!(left <= LIMIT && left > LIMIT - Duration::from_secs(1));
        activity.received();
        assert_eq!(
            activity.idle_close_in(LIMIT),
            None,
            "part of the next request is in"
        );
        drop(activity.enter());
        assert!(activity.idle_close_in(LIMIT).is_some());
    }

    #[test]
    fn pipelined_requests_keep_the_connection_busy_until_the_last_answer() {
        let activity = Activity::new();
        let first = activity.enter();
        let second = activity.enter();
        drop(first);
        assert_eq!(activity.idle_close_in(LIMIT), None);
        drop(second);
        assert!(activity.idle_close_in(LIMIT).is_some());
    }
}
