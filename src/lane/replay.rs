//! The replay: every request the lane served waits here for the proxy, which runs it in-process
//! through its own endpoint with the request's ticket (its auth, hooks, router, logging, cost and
//! spend run as on the normal path; its answer goes nowhere), after the client has its answer.
//! A stream whose end the proxy writes waits here for that end (its tail).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, oneshot};

use super::connection::{Connection, PEER_HEADER};
use super::tickets::Issued;

/// How long the queue must have been quiet (nothing queued) before its replays go to Python.
/// A replay is milliseconds of the proxy's Python, queued the moment its answer is written:
/// started at once, it takes the CPU just as the client wakes to read that answer, and on a
/// busy machine the client then waits up to a scheduler slice (measured: most of the lane's
/// p99 at 45 req/s). The client has read its answer well within this.
const REPLAY_QUIET: Duration = Duration::from_millis(2);
/// The longest a replay waits for a quiet moment; under steady load the queue goes as a batch.
const REPLAY_MAX_WAIT: Duration = Duration::from_millis(20);
/// How long after a hand-over a queue of fewer than `REPLAY_FULL_BATCH` waits before the next:
/// each hand-over costs the proxy's Python about half a millisecond of its own (waking its
/// loop, the batch's checks and counts), which at a steady low rate would otherwise be paid per
/// request. Logging and accounting then lag by at most this much; an idle lane hands a request
/// over as before (the last hand-over is long past).
const REPLAY_SPACING: Duration = Duration::from_millis(100);
/// A queue this long goes as soon as it is due, spacing or not: its hand-over cost is spread
/// already, and a longer wait would only make the backlog look busier.
const REPLAY_FULL_BATCH: usize = 16;
/// The most replays handed over at once (the rest stay queued, due at once): a batch is
/// milliseconds of the proxy's Python per request, run on its loop without a break, and the
/// proxy's own requests (health checks, routes the lane does not take) wait behind it.
const REPLAY_MAX_BATCH: usize = 64;
/// How long a stream waits for the proxy to write its end (a replay waits behind others).
const TAIL_TIMEOUT: Duration = Duration::from_secs(60);

/// A request the lane served, for the proxy to replay in-process after the client has its
/// answer.
#[derive(Debug)]
pub struct Replay {
    pub path: String,
    /// Every header as the client sent it (values that are not text are left out), plus
    /// `x-litellm-call-id` when the lane chose the call id.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub client: Option<SocketAddr>,
    pub server: Option<SocketAddr>,
    pub ticket: String,
}

/// A served request's replay, before its ticket is known.
pub(super) struct PendingReplay {
    path: String,
    headers: Vec<(String, String)>,
    body: Bytes,
    client: Option<SocketAddr>,
    server: Option<SocketAddr>,
}

impl PendingReplay {
    pub(super) fn new(
        parts: &http::request::Parts,
        body: &Bytes,
        connection: &Connection,
    ) -> PendingReplay {
        PendingReplay {
            path: parts.uri.path().to_string(),
            headers: parts
                .headers
                .iter()
                .filter(|(name, _)| name.as_str() != PEER_HEADER)
                .filter_map(|(name, value)| {
                    Some((name.to_string(), value.to_str().ok()?.to_string()))
                })
                .collect(),
            body: body.clone(),
            client: Some(connection.peer),
            server: connection.local,
        }
    }

    fn with_ticket(self, issued: Issued) -> Replay {
        let mut headers = self.headers;
        if issued.call_id.added {
            headers.push(("x-litellm-call-id".into(), issued.call_id.id));
        }
        Replay {
            path: self.path,
            headers,
            body: self.body,
            client: self.client,
            server: self.server,
            ticket: issued.id,
        }
    }
}

/// The replays waiting for the proxy, how many it has not finished, and the streams waiting for
/// the end of the proxy's answer to theirs.
#[derive(Default)]
pub(super) struct Replays {
    queue: Mutex<ReplayQueue>,
    ready: Notify,
    /// Queued, or handed to the proxy and not finished.
    backlog: AtomicUsize,
    /// By ticket.
    tails: Mutex<HashMap<String, oneshot::Sender<Bytes>>>,
}

impl Replays {
    /// Queues a replay; `first` puts it ahead of the others (a client waits for its end).
    pub(super) fn enqueue(&self, pending: PendingReplay, issued: Issued, first: bool) {
        self.backlog.fetch_add(1, Ordering::AcqRel);
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.push(pending.with_ticket(issued), first, Instant::now());
        drop(queue);
        self.ready.notify_one();
    }

    /// Every replay waiting, once the queue is due (see `ReplayQueue`).
    pub(super) async fn next(&self) -> Vec<Replay> {
        loop {
            let due_in = {
                let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                match queue.due_in(now) {
                    Some(wait) if wait.is_zero() => return queue.take(now),
                    due_in => due_in,
                }
            };
            match due_in {
                None => self.ready.notified().await,
                // A replay queued meanwhile may be urgent, or extend the quiet.
                Some(wait) => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.ready.notified() => {}
                    }
                }
            }
        }
    }

    pub(super) fn replayed(&self) {
        let _ = self
            .backlog
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    pub(super) fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Acquire)
    }

    /// Queues the replay ahead of the others and waits for the end of the proxy's answer to
    /// it: what LiteLLM writes from its own state (the usage chunk, its error frame). None when
    /// it wrote nothing there, or not in time.
    pub(super) async fn proxys_end(&self, pending: PendingReplay, issued: Issued) -> Option<Bytes> {
        let (tail_tx, tail_rx) = oneshot::channel();
        let ticket = issued.id.clone();
        self.tails
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ticket.clone(), tail_tx);
        self.enqueue(pending, issued, true);
        match tokio::time::timeout(TAIL_TIMEOUT, tail_rx).await {
            Ok(Ok(tail)) if !tail.is_empty() => Some(tail),
            _ => {
                self.tails
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&ticket);
                None
            }
        }
    }

    /// Whether a stream waits for the proxy's answer to this ticket's replay (`proxys_end`).
    pub(super) fn awaits_tail(&self, ticket: &str) -> bool {
        self.tails
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(ticket)
    }

    /// The proxy's answer to a replay past its first chunk's frame, for a stream waiting for it.
    pub(super) fn send_tail(&self, ticket: &str, tail: Bytes) {
        let waiting = self
            .tails
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(ticket);
        if let Some(waiting) = waiting {
            let _ = waiting.send(tail);
        }
    }
}

/// Served requests waiting for their replay, handed to Python together once the lane has
/// been quiet for `REPLAY_QUIET` (or the oldest has waited `REPLAY_MAX_WAIT`), a short queue no
/// sooner than `REPLAY_SPACING` after the last hand-over, and at once when a client waits for
/// one (a stream's end that the proxy writes).
#[derive(Default)]
struct ReplayQueue {
    items: VecDeque<Replay>,
    oldest: Option<Instant>,
    newest: Option<Instant>,
    urgent: bool,
    /// When the last batch was handed over.
    taken: Option<Instant>,
}

impl ReplayQueue {
    /// Queues a replay; `urgent` puts it ahead of the others and makes the queue due.
    fn push(&mut self, replay: Replay, urgent: bool, now: Instant) {
        if urgent {
            self.items.push_front(replay);
        } else {
            self.items.push_back(replay);
        }
        self.urgent |= urgent;
        self.oldest.get_or_insert(now);
        self.newest = Some(now);
    }

    /// How long until the queue is due; None when it is empty.
    fn due_in(&self, now: Instant) -> Option<Duration> {
        let (oldest, newest) = (self.oldest?, self.newest?);
        if self.urgent {
            return Some(Duration::ZERO);
        }
        let quiet = (newest + REPLAY_QUIET).saturating_duration_since(now);
        let longest = (oldest + REPLAY_MAX_WAIT).saturating_duration_since(now);
        let due = quiet.min(longest);
        match self.taken {
            Some(taken) if self.items.len() < REPLAY_FULL_BATCH => {
                Some(due.max((taken + REPLAY_SPACING).saturating_duration_since(now)))
            }
            _ => Some(due),
        }
    }

    fn take(&mut self, now: Instant) -> Vec<Replay> {
        self.taken = Some(now);
        let batch: Vec<Replay> = self
            .items
            .drain(..self.items.len().min(REPLAY_MAX_BATCH))
            .collect();
        if self.items.is_empty() {
            self.oldest = None;
            self.newest = None;
            self.urgent = false;
        } else {
            // What is left has waited already: due at once.
            self.urgent = true;
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(ticket: &str) -> Replay {
        Replay {
            path: "/chat/completions".into(),
            headers: Vec::new(),
            body: Bytes::new(),
            client: None,
            server: None,
            ticket: ticket.into(),
        }
    }

    #[test]
    fn replays_wait_for_a_quiet_moment_then_go_together() {
        let start = Instant::now();
        let mut queue = ReplayQueue::default();
        assert_eq!(queue.due_in(start), None);
        queue.push(replay("a"), false, start);
        assert_eq!(queue.due_in(start), Some(REPLAY_QUIET));
        // Another answer 1 ms later extends the quiet.
        let later = start + Duration::from_millis(1);
        queue.push(replay("b"), false, later);
        assert_eq!(queue.due_in(later), Some(REPLAY_QUIET));
        assert_eq!(queue.due_in(later + REPLAY_QUIET), Some(Duration::ZERO));
        let tickets: Vec<_> = queue.take(later).into_iter().map(|r| r.ticket).collect();
        assert_eq!(tickets, ["a", "b"]);
        assert_eq!(queue.due_in(later), None);
    }

    #[test]
    fn steady_answers_cannot_hold_replays_back_for_long() {
        let start = Instant::now();
        let mut queue = ReplayQueue::default();
        let mut now = start;
        while now < start + REPLAY_MAX_WAIT {
            queue.push(replay("x"), false, now);
            now += Duration::from_millis(1);
        }
        assert_eq!(queue.due_in(now), Some(Duration::ZERO));
    }

    #[test]
    fn after_a_hand_over_a_short_queue_waits_for_the_spacing_a_full_one_does_not() {
        let start = Instant::now();
        let mut queue = ReplayQueue::default();
        queue.push(replay("a"), false, start);
        queue.take(start);
        // One answer 10 ms later: quiet by 12 ms, but it waits until 100 ms after the take.
        let later = start + Duration::from_millis(10);
        queue.push(replay("b"), false, later);
        let quiet = later + REPLAY_QUIET;
        assert_eq!(queue.due_in(quiet), Some(REPLAY_SPACING - (quiet - start)));
        assert_eq!(queue.due_in(start + REPLAY_SPACING), Some(Duration::ZERO));
        // A full batch goes when quiet (or at the longest wait), spacing or not.
        let mut now = later;
        while queue.items.len() < REPLAY_FULL_BATCH {
            now += Duration::from_millis(1);
            queue.push(replay("x"), false, now);
        }
        assert_eq!(queue.due_in(now + REPLAY_QUIET), Some(Duration::ZERO));
        // A stream's end that a client waits for goes at once.
        queue.take(now);
        queue.push(replay("tail"), true, now);
        assert_eq!(queue.due_in(now), Some(Duration::ZERO));
    }

    #[test]
    fn a_long_queue_goes_in_bounded_batches_one_after_another() {
        let now = Instant::now();
        let mut queue = ReplayQueue::default();
        for _ in 0..REPLAY_MAX_BATCH + 3 {
            queue.push(replay("x"), false, now);
        }
        assert_eq!(queue.take(now).len(), REPLAY_MAX_BATCH);
        assert_eq!(queue.due_in(now), Some(Duration::ZERO));
        assert_eq!(queue.take(now).len(), 3);
        assert_eq!(queue.due_in(now), None);
    }

    #[test]
    fn a_replay_a_client_waits_for_goes_first_and_at_once() {
        let now = Instant::now();
        let mut queue = ReplayQueue::default();
        queue.push(replay("a"), false, now);
        queue.push(replay("tail"), true, now);
        assert_eq!(queue.due_in(now), Some(Duration::ZERO));
        assert_eq!(queue.take(now)[0].ticket, "tail");
    }
}
