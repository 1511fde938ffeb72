//! The serve path every route shares for streams: open the provider's stream once (while
//! watching for the client leaving), let the route decide when to answer (its first frames),
//! then write the route's frames to the client as the provider's events arrive, and queue the
//! replay, which hands LiteLLM the stream's outcome for its logging.
//!
//! A stream that fails to open, or ends before the route answers, is answered by the proxy from
//! its ticket. An end the route does not write itself (an error; a usage chunk LiteLLM writes
//! from its own state) is the proxy's: the lane queues the replay first and sends the client
//! the end of the proxy's answer to it. A client that leaves mid-stream closes the provider
//! stream at once; the replay logs what was read until then.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};

use super::connection::Connection;
use super::head::Head;
use super::replay::PendingReplay;
use super::response::{Body, answer};
use super::served::{ClientRequest, Served};
use super::state::{Lane, Serving};
use super::tickets::{Outcome, StreamOutcome};
use crate::http::UpstreamRequest;
use crate::stream::{self, Batch, Piece, Receiver, StreamError, StreamTransform};

/// Frames buffered for the client: a slow client slows the provider read past this.
const CLIENT_FRAMES: usize = 8;

/// How a stream ends: the assembled answer, or the failure.
pub(super) type End = Result<Value, StreamError>;

/// What a route writes of a stream, and what the replay gets of it.
pub(super) trait StreamFrames: Send + 'static {
    /// The pieces are the provider's bytes (`/v1/messages`), not chunks.
    const RAW: bool;
    /// What the lane writes after the last frame when the end is its own (`data: [DONE]`).
    const CLOSING: &'static [u8];
    /// The client's frames for one batch of the provider's stream (its end taken out).
    fn frames(&mut self, batch: Batch) -> Vec<u8>;
    /// Whether the proxy writes this end (the lane then waits for it and sends it on).
    fn proxy_writes(&self, end: &End) -> bool;
    /// The pieces the replay's stream wrapper gets, ending with `end`.
    fn pieces(&self, end: End) -> Vec<Piece>;
}

/// A stream the provider opened: its headers, and its pieces as the pump reads them.
pub(super) struct Opened {
    pub provider_headers: http::HeaderMap,
    pub receiver: Receiver,
    /// Ends the pump early (the client left): the provider connection closes at once.
    stop: Arc<Notify>,
    pub called: Instant,
}

impl Opened {
    pub(super) fn upstream_ms(&self) -> f64 {
        self.called.elapsed().as_secs_f64() * 1000.0
    }
}

/// Opens the provider's stream and starts its pump; Err: what the request comes to instead
/// (the client left, or the proxy answers the failure from the ticket).
pub(super) async fn open(
    request: ClientRequest<'_>,
    head: &Head,
    upstream: UpstreamRequest,
    transform: Box<dyn StreamTransform>,
    raw: bool,
) -> Result<Opened, Served> {
    let lane = request.lane;
    let called = Instant::now();
    let opened = tokio::select! {
        opened = stream::open(&lane.engine.transport, upstream) => opened,
        () = request.connection.closed() => return Err(Served::Gone),
    };
    head.end_provider_call();
    let response = match opened {
        Ok(response) => response,
        Err(err) => {
            let outcome = StreamOutcome {
                opened: Err(err),
                pieces: Vec::new(),
                raw,
            };
            return Err(Served::Replay(head.issue(lane, Outcome::Stream(outcome))));
        }
    };
    let provider_headers = response.headers().clone();
    let (tx, receiver) = stream::channel();
    let stop = Arc::new(Notify::new());
    lane.engine
        .runtime
        .spawn(stream::pump(response, transform, tx, Arc::clone(&stop)));
    Ok(Opened {
        provider_headers,
        receiver,
        stop,
        called,
    })
}

/// A stream over before the route answered: the proxy answers from its ticket (with LiteLLM's
/// error status, say, or its router's retry).
pub(super) fn to_proxy(
    lane: &Lane,
    head: &Head,
    opened: Opened,
    pieces: Vec<Piece>,
    raw: bool,
) -> Served {
    let outcome = StreamOutcome {
        opened: Ok(opened.provider_headers),
        pieces,
        raw,
    };
    Served::Replay(head.issue(lane, Outcome::Stream(outcome)))
}

pub(super) fn end_piece(end: End) -> Piece {
    match end {
        Ok(answer) => Piece::End(answer),
        Err(err) => Piece::Failed(err),
    }
}

/// The route answers: `first` (its first frames) and then every frame of the stream go to the
/// client, under these headers, as the writer sends them.
#[allow(clippy::too_many_arguments)]
pub(super) fn answer_with<F: StreamFrames>(
    request: ClientRequest<'_>,
    head: Head,
    opened: Opened,
    frames: F,
    first: Vec<u8>,
    end: Option<End>,
    headers: Vec<(String, String)>,
    serving: Serving,
) -> Served {
    let lane = request.lane;
    lane.count_served(
        request.route.as_str(),
        &head.model_group,
        opened.called.elapsed(),
    );
    let (sender, client_frames) = mpsc::channel::<Bytes>(CLIENT_FRAMES);
    let writer = Writer {
        lane: Arc::clone(lane),
        head,
        pending: request.pending_replay(),
        connection: request.connection.clone(),
        sender,
        stop: opened.stop,
        provider_headers: opened.provider_headers,
        frames,
        _serving: serving,
    };
    lane.engine
        .runtime
        .spawn(writer.run(first, end, opened.receiver));
    Served::Answer(answer(client_body(client_frames), headers))
}

/// The response body: whatever the writer sends, as it sends it.
fn client_body(frames: mpsc::Receiver<Bytes>) -> Body {
    let frames = futures_util::stream::unfold(frames, |mut frames| async move {
        let frame = frames.recv().await?;
        Some((Ok::<_, hyper::Error>(Frame::data(frame)), frames))
    });
    StreamBody::new(frames).boxed()
}

/// Writes one stream to its client, then queues its replay.
struct Writer<F> {
    lane: Arc<Lane>,
    head: Head,
    pending: PendingReplay,
    connection: Connection,
    sender: mpsc::Sender<Bytes>,
    stop: Arc<Notify>,
    provider_headers: http::HeaderMap,
    frames: F,
    /// Counts the stream as being served until the writer is done with it.
    _serving: Serving,
}

impl<F: StreamFrames> Writer<F> {
    async fn run(mut self, first: Vec<u8>, mut end: Option<End>, mut receiver: Receiver) {
        if !first.is_empty() && self.sender.send(Bytes::from(first)).await.is_err() {
            return self.client_gone(receiver).await;
        }
        while end.is_none() {
            let batch = tokio::select! {
                batch = receiver.next_batch(usize::MAX) => batch,
                () = self.sender.closed() => return self.client_gone(receiver).await,
                () = self.connection.closed() => return self.client_gone(receiver).await,
            };
            let Some(mut batch) = batch else { break };
            end = batch.end.take();
            let frames = self.frames.frames(batch);
            if !frames.is_empty() && self.sender.send(Bytes::from(frames)).await.is_err() {
                return self.client_gone(receiver).await;
            }
        }
        let Some(end) = end else { return };
        let proxy_writes = self.frames.proxy_writes(&end);
        let outcome = self.outcome(end);
        let issued = self.head.issue(&self.lane, outcome);
        if !proxy_writes {
            if !F::CLOSING.is_empty() {
                let _ = self.sender.send(Bytes::from_static(F::CLOSING)).await;
            }
            self.lane.replays.enqueue(self.pending, issued, false);
            return;
        }
        if let Some(tail) = self.lane.replays.proxys_end(self.pending, issued).await {
            let _ = self.sender.send(tail).await;
        }
    }

    fn outcome(&self, end: End) -> Outcome {
        Outcome::Stream(StreamOutcome {
            opened: Ok(self.provider_headers.clone()),
            pieces: self.frames.pieces(end),
            raw: F::RAW,
        })
    }

    /// The client left mid-stream: the provider connection is closed at once, and the replay
    /// logs what was read until then (the answer so far, as the pump hands it over on `stop`).
    async fn client_gone(self, receiver: Receiver) {
        self.lane.count("client_gone");
        self.stop.notify_one();
        if let Some(Ok(answer)) = end_after_stop(receiver).await {
            let issued = self.head.issue(&self.lane, self.outcome(Ok(answer)));
            self.lane.replays.enqueue(self.pending, issued, false);
        }
    }
}

/// The end the pump hands over once stopped (the answer so far); the pieces before it are
/// dropped, and so is the receiver, which closes the provider connection.
async fn end_after_stop(mut receiver: Receiver) -> Option<End> {
    loop {
        match receiver.next_batch(usize::MAX).await {
            Some(batch) if batch.end.is_some() => return batch.end,
            Some(_) => {}
            None => return None,
        }
    }
}
