//! Streams on the lane: the provider's events become the proxy's SSE frames in Rust, written to
//! the client as they arrive; LiteLLM's logging runs in the replay afterwards.
//!
//! The lane answers only once the first chunk is in: a stream that fails or ends before it is
//! answered by the proxy (LiteLLM then answers with an error status, not a stream). After the
//! first chunk the lane writes every frame itself, the first chunk's too (the proxy names the
//! model group in it, as in the others). Its end is `data: [DONE]` unless the client asked for
//! the usage chunk or the stream failed: LiteLLM writes those ends from its own state (usage and
//! cost, its exception mapping), so the lane queues the replay first and sends the client the
//! end of the proxy's answer to it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use tokio::sync::{Notify, mpsc, oneshot};

use super::answer::{self, CostHeaders, Timings};
use super::{
    Body, Connection, LaneDeployment, Outcome, PendingReplay, Served, Serving, StreamOutcome,
    enqueue_replay, pending_replay, tickets,
};
use crate::http::UpstreamRequest;
use crate::stream::{self, Piece, StreamError, StreamTransform};

/// Frames buffered for the client: a slow client slows the provider read past this.
pub(super) const CLIENT_FRAMES: usize = 8;
/// How long a stream waits for the proxy to write its end (a replay waits behind others).
const TAIL_TIMEOUT: Duration = Duration::from_secs(60);
const DONE: &[u8] = b"data: [DONE]\n\n";

/// What every stream the lane admits carries, chat and `/v1/messages` alike.
pub(super) struct StreamHead {
    pub model_group: String,
    pub key_spend: f64,
    pub deployment: Arc<LaneDeployment>,
    pub call_id: (String, bool),
    pub received: Instant,
}

impl StreamHead {
    /// The proxy's headers for a stream, written before any cost is known.
    pub fn headers(
        &self,
        settings: &super::table::Settings,
        upstream_ms: f64,
        provider_headers: &http::HeaderMap,
    ) -> Vec<(String, String)> {
        let timings = Timings {
            total_ms: self.received.elapsed().as_secs_f64() * 1000.0,
            upstream_ms,
        };
        answer::headers(
            settings,
            &self.deployment,
            &self.model_group,
            &self.call_id.0,
            CostHeaders::Stream,
            self.key_spend,
            timings,
            provider_headers,
        )
    }

    /// A ticket for the proxy: this stream's outcome.
    pub fn issue(&self, lane: &super::Lane, outcome: StreamOutcome) -> tickets::Issued {
        lane.tickets.issue(
            &self.deployment.id,
            self.call_id.clone(),
            Outcome::Stream(outcome),
        )
    }
}

/// An admitted chat stream.
pub(super) struct Stream {
    pub head: StreamHead,
    /// The client asked for the usage chunk (`stream_options.include_usage`).
    pub usage_chunk: bool,
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn serve(
    lane: &Arc<super::Lane>,
    parts: &http::request::Parts,
    body: &Bytes,
    connection: &Connection,
    stream: Stream,
    upstream: UpstreamRequest,
    transform: Box<dyn StreamTransform>,
    serving: Serving,
) -> Served {
    let called = Instant::now();
    let opened = tokio::select! {
        opened = stream::open(&lane.engine.transport, upstream) => opened,
        () = connection.closed() => return Served::Gone,
    };
    let response = match opened {
        Ok(response) => response,
        Err(err) => {
            let outcome = StreamOutcome {
                opened: Err(err),
                pieces: Vec::new(),
                raw: false,
            };
            return replay_through_proxy(lane, &stream, outcome);
        }
    };
    let provider_headers = response.headers().clone();
    let (tx, mut receiver) = stream::channel();
    let stop = Arc::new(Notify::new());
    lane.engine
        .runtime
        .spawn(stream::pump(response, transform, tx, Arc::clone(&stop)));
    let first = tokio::select! {
        first = receiver.next_batch(1) => first,
        // Dropping the receiver ends the pump and closes the provider connection.
        () = connection.closed() => return Served::Gone,
    };
    let upstream_ms = called.elapsed().as_secs_f64() * 1000.0;
    let Some(first) = first else {
        return Served::Gone;
    };
    let Some(first_chunk) = first.chunks.into_iter().next() else {
        // Over before any chunk: the proxy answers (with LiteLLM's error status, say).
        let outcome = StreamOutcome {
            opened: Ok(provider_headers),
            pieces: first.end.into_iter().map(end_piece).collect(),
            raw: false,
        };
        return replay_through_proxy(lane, &stream, outcome);
    };
    let headers = stream
        .head
        .headers(&lane.table.settings(), upstream_ms, &provider_headers);
    let (frames, frames_rx) = mpsc::channel::<Bytes>(CLIENT_FRAMES);
    let writer = Writer {
        lane: Arc::clone(lane),
        pending: pending_replay(parts, body, connection),
        connection: connection.clone(),
        frames,
        stop,
        headers: provider_headers,
        _serving: serving,
    };
    lane.engine
        .runtime
        .spawn(writer.run(stream, first_chunk, first.end, receiver));
    lane.count("served");
    Served::Answer(super::answer_response(client_body(frames_rx), headers))
}

/// Forwards the request to the proxy with a ticket for the stream's outcome.
fn replay_through_proxy(lane: &super::Lane, stream: &Stream, outcome: StreamOutcome) -> Served {
    Served::Replay(stream.head.issue(lane, outcome))
}

pub(super) fn end_piece(end: Result<Value, StreamError>) -> Piece {
    match end {
        Ok(answer) => Piece::End(answer),
        Err(err) => Piece::Failed(err),
    }
}

/// Queues the replay ahead of the others and sends the client the end of the proxy's answer to
/// it: what LiteLLM writes from its own state (the usage chunk, its error frame).
pub(super) async fn send_the_proxys_end(
    lane: &super::Lane,
    pending: PendingReplay,
    issued: tickets::Issued,
    frames: &mpsc::Sender<Bytes>,
) {
    let (tail_tx, tail_rx) = oneshot::channel();
    lane.tails
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(issued.id.clone(), tail_tx);
    let ticket = issued.id.clone();
    enqueue_replay(lane, pending, issued, true);
    match tokio::time::timeout(TAIL_TIMEOUT, tail_rx).await {
        Ok(Ok(tail)) if !tail.is_empty() => {
            let _ = frames.send(tail).await;
        }
        _ => {
            lane.tails
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&ticket);
        }
    }
}

/// The end the pump hands over once stopped (the answer so far); the pieces before it are
/// dropped, and so is the receiver, which closes the provider connection.
pub(super) async fn end_after_stop(
    mut receiver: stream::Receiver,
) -> Option<Result<Value, StreamError>> {
    loop {
        match receiver.next_batch(usize::MAX).await {
            Some(batch) if batch.end.is_some() => return batch.end,
            Some(_) => {}
            None => return None,
        }
    }
}

/// The response body: whatever the writer sends, as it sends it.
pub(super) fn client_body(frames: mpsc::Receiver<Bytes>) -> Body {
    let frames = futures_util::stream::unfold(frames, |mut frames| async move {
        let frame = frames.recv().await?;
        Some((Ok::<_, hyper::Error>(Frame::data(frame)), frames))
    });
    StreamBody::new(frames).boxed()
}

/// Writes one stream to its client, then queues its replay.
struct Writer {
    lane: Arc<super::Lane>,
    pending: PendingReplay,
    connection: Connection,
    frames: mpsc::Sender<Bytes>,
    stop: Arc<Notify>,
    headers: http::HeaderMap,
    /// Counts the stream as being served until the writer is done with it.
    _serving: Serving,
}

impl Writer {
    async fn run(
        self,
        stream: Stream,
        first_chunk: Value,
        mut end: Option<Result<Value, StreamError>>,
        mut receiver: stream::Receiver,
    ) {
        let mut frame = Vec::new();
        stream::proxy_frame(&first_chunk, &stream.head.model_group, &mut frame);
        if !self.send(frame).await {
            return self.client_gone(stream, first_chunk, receiver).await;
        }
        while end.is_none() {
            let batch = tokio::select! {
                batch = receiver.next_batch(usize::MAX) => batch,
                () = self.frames.closed() => {
                    return self.client_gone(stream, first_chunk, receiver).await;
                }
                () = self.connection.closed() => {
                    return self.client_gone(stream, first_chunk, receiver).await;
                }
            };
            let Some(batch) = batch else { break };
            let mut frames = Vec::new();
            for chunk in &batch.chunks {
                stream::proxy_frame(chunk, &stream.head.model_group, &mut frames);
            }
            if !frames.is_empty() && !self.send(frames).await {
                return self.client_gone(stream, first_chunk, receiver).await;
            }
            end = batch.end;
        }
        let Some(end) = end else { return };
        let proxy_writes_end = end.is_err() || stream.usage_chunk;
        let issued = self.issue(stream, first_chunk, end);
        if !proxy_writes_end {
            let _ = self.frames.send(Bytes::from_static(DONE)).await;
            enqueue_replay(&self.lane, self.pending, issued, false);
            return;
        }
        send_the_proxys_end(&self.lane, self.pending, issued, &self.frames).await;
    }

    async fn send(&self, frame: Vec<u8>) -> bool {
        self.frames.send(Bytes::from(frame)).await.is_ok()
    }

    /// A ticket for the replay: the stream's first chunk and its end.
    fn issue(
        &self,
        stream: Stream,
        first_chunk: Value,
        end: Result<Value, StreamError>,
    ) -> tickets::Issued {
        let outcome = StreamOutcome {
            opened: Ok(self.headers.clone()),
            pieces: vec![Piece::Chunks(vec![first_chunk]), end_piece(end)],
            raw: false,
        };
        stream.head.issue(&self.lane, outcome)
    }

    /// The client left mid-stream: the provider connection is closed at once, and the replay
    /// logs what was read until then (the answer so far, as the pump hands it over on `stop`).
    async fn client_gone(self, stream: Stream, first_chunk: Value, receiver: stream::Receiver) {
        self.lane.count("client_gone");
        self.stop.notify_one();
        let end = end_after_stop(receiver).await;
        if let Some(Ok(answer)) = end {
            let issued = self.issue(stream, first_chunk, Ok(answer));
            enqueue_replay(&self.lane, self.pending, issued, false);
        }
    }
}
