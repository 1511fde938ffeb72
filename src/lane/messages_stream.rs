//! `/v1/messages` streams on the lane (`anthropic/…`, Bedrock Invoke): the provider's bytes
//! (Bedrock's events as LiteLLM writes them) go to the client as the proxy relays them — `message_start` naming the model group ([`Restamper`]), every byte
//! after it as it arrives — and LiteLLM's end-of-stream logging runs in the replay, over the
//! transcript Rust kept.
//!
//! The lane answers once the restamp is decided (the first event is in, as a rule) and, where
//! the router holds frames back until content because a retry could still take the stream over
//! (`num_retries`), once content is in. A stream that fails or ends before that, brings an error
//! event first, or whose first frame the proxy would read differently, is read to its end and
//! answered by the proxy from its ticket (whose router then retries as it would). A stream that fails after it: the proxy
//! writes its error frame (its exception mapping), so the lane queues the replay first and sends
//! the client the end of the proxy's answer.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{Notify, mpsc};

use super::restamp::{Restamper, contains};
use super::streamed::{
    CLIENT_FRAMES, StreamHead, client_body, end_after_stop, end_piece, send_the_proxys_end,
};
use super::{
    Connection, PendingReplay, Served, Serving, StreamOutcome, enqueue_replay, pending_replay,
    tickets,
};
use crate::http::UpstreamRequest;
use crate::providers::messages::stream::{AnthropicPassthrough, BedrockInvokeStream, sse_frame};
use crate::stream::{self, Batch, Piece, StreamError, StreamTransform};

/// The proxy seals a frame cut short before its error frame by the last bytes it wrote; the
/// replay is handed this many of them.
const SEAL_LOOKBACK: usize = 64;

const API_BASE_HEADER: &str = "x-litellm-model-api-base";
/// The router commits to a held stream after this many reads without content.
const MAX_HELD_READS: usize = 200;

/// An admitted `/v1/messages` stream.
pub(super) struct MessagesStream {
    pub head: StreamHead,
    /// The router holds the stream's frames back until its first content (a retry could
    /// still take it over): the lane answers only then.
    pub held: bool,
    /// A Bedrock Invoke stream: its events are written as LiteLLM writes them (the proxy then
    /// relays those frames as it relays Anthropic's bytes).
    pub bedrock: bool,
}

pub(super) async fn serve(
    lane: &Arc<super::Lane>,
    parts: &http::request::Parts,
    body: &Bytes,
    connection: &Connection,
    stream: MessagesStream,
    upstream: UpstreamRequest,
    serving: Serving,
) -> Served {
    let called = Instant::now();
    let opened = tokio::select! {
        opened = stream::open(&lane.engine.transport, upstream) => opened,
        () = connection.closed() => return Served::Gone,
    };
    let response = match opened {
        Ok(response) => response,
        Err(err) => return to_proxy(lane, &stream, Err(err), Vec::new()),
    };
    let provider_headers = response.headers().clone();
    let (tx, mut receiver) = stream::channel();
    let stop = Arc::new(Notify::new());
    let transform: Box<dyn StreamTransform> = if stream.bedrock {
        Box::new(BedrockInvokeStream::new())
    } else {
        Box::new(AnthropicPassthrough::new())
    };
    lane.engine
        .runtime
        .spawn(stream::pump(response, transform, tx, Arc::clone(&stop)));
    let mut restamper = Restamper::new(&stream.head.model_group);
    // Every byte read until the restamp is decided, and what the proxy writes of them.
    let mut head = Vec::new();
    let mut written = Vec::new();
    let mut end;
    let mut reads = 0;
    let mut committed = !stream.held;
    let decided = loop {
        let Some((read, read_end)) = next_read(&mut receiver, connection, stream.bedrock).await
        else {
            return Served::Gone;
        };
        head.extend_from_slice(&read);
        end = read_end;
        match restamper.process(&read) {
            Ok(bytes) => written.extend(bytes),
            Err(_) => break false,
        }
        if !committed {
            // An error event before content is the router's to retry: the proxy's.
            if contains(&head, b"error") {
                break false;
            }
            reads += 1;
            committed = has_content(&read) || reads >= MAX_HELD_READS;
        }
        if committed && !restamper.armed() {
            break true;
        }
        if end.is_some() {
            break false;
        }
    };
    if !decided {
        let end = match end {
            Some(end) => end,
            None => loop {
                let Some((read, read_end)) =
                    next_read(&mut receiver, connection, stream.bedrock).await
                else {
                    return Served::Gone;
                };
                head.extend_from_slice(&read);
                if let Some(end) = read_end {
                    break end;
                }
            },
        };
        let pieces = vec![Piece::Raw(Bytes::from(head)), end_piece(end)];
        return to_proxy(lane, &stream, Ok(provider_headers), pieces);
    }
    let mut headers = stream.head.headers(
        &lane.table.settings(),
        called.elapsed().as_secs_f64() * 1000.0,
        &provider_headers,
    );
    // The proxy names the API base of its `/v1/messages` route, not its chat route's.
    headers.retain(|(name, _)| name != API_BASE_HEADER);
    let api_base = stream
        .head
        .deployment
        .messages
        .as_ref()
        .and_then(|m| m.api_base.clone());
    if let Some(api_base) = api_base {
        headers.push((API_BASE_HEADER.to_string(), api_base));
    }
    let (frames, frames_rx) = mpsc::channel::<Bytes>(CLIENT_FRAMES);
    let writer = Writer {
        lane: Arc::clone(lane),
        pending: pending_replay(parts, body, connection),
        connection: connection.clone(),
        frames,
        stop,
        headers: provider_headers,
        head: Bytes::from(head),
        _serving: serving,
    };
    lane.engine
        .runtime
        .spawn(writer.run(stream, written, end, receiver));
    lane.count("served");
    Served::Answer(super::answer_response(client_body(frames_rx), headers))
}

/// The next reads of the provider's stream as the proxy's bytes, and the end when it came; None
/// once the client is gone (dropping the receiver then ends the pump and closes the provider
/// connection) or the stream is over.
async fn next_read(
    receiver: &mut stream::Receiver,
    connection: &Connection,
    bedrock: bool,
) -> Option<Read> {
    let batch = tokio::select! {
        batch = receiver.next_batch(usize::MAX) => batch,
        () = connection.closed() => None,
    };
    Some(read_of(batch?, bedrock))
}

type Read = (Vec<u8>, Option<Result<serde_json::Value, StreamError>>);

/// A batch's bytes as the proxy relays them: Anthropic's as they came, Bedrock's events as
/// LiteLLM writes them (`event: …` and `json.dumps`).
fn read_of(batch: Batch, bedrock: bool) -> Read {
    if !bedrock {
        return (batch.raw, batch.end);
    }
    let mut frames = Vec::new();
    for event in &batch.chunks {
        sse_frame(event, &mut frames);
    }
    (frames, batch.end)
}

/// Whether a read carries generated content, as the router tells (an `event:
/// content_block_delta` line; `bytes.splitlines` breaks at `\n`, `\r` and `\r\n`).
fn has_content(read: &[u8]) -> bool {
    read.split(|byte| *byte == b'\n' || *byte == b'\r')
        .any(|line| line == b"event: content_block_delta")
}

/// The proxy answers: the request is forwarded with a ticket for the stream's outcome.
fn to_proxy(
    lane: &super::Lane,
    stream: &MessagesStream,
    opened: Result<http::HeaderMap, crate::call::CallError>,
    pieces: Vec<Piece>,
) -> Served {
    let outcome = StreamOutcome {
        opened,
        pieces,
        raw: true,
    };
    Served::Replay(stream.head.issue(lane, outcome))
}

/// Writes one stream to its client, then queues its replay.
struct Writer {
    lane: Arc<super::Lane>,
    pending: PendingReplay,
    connection: Connection,
    frames: mpsc::Sender<Bytes>,
    stop: Arc<Notify>,
    headers: http::HeaderMap,
    /// The bytes read until the restamp was decided: the replay's stream starts with them, so
    /// the proxy's restamp decides there too.
    head: Bytes,
    /// Counts the stream as being served until the writer is done with it.
    _serving: Serving,
}

impl Writer {
    async fn run(
        self,
        stream: MessagesStream,
        written: Vec<u8>,
        mut end: Option<Result<serde_json::Value, StreamError>>,
        mut receiver: stream::Receiver,
    ) {
        // The last bytes sent after the head (what the proxy's seal of a cut frame looks at).
        let mut last = Vec::new();
        if !written.is_empty() && self.frames.send(Bytes::from(written)).await.is_err() {
            return self.client_gone(stream, receiver).await;
        }
        while end.is_none() {
            let batch = tokio::select! {
                batch = receiver.next_batch(usize::MAX) => batch,
                () = self.frames.closed() => return self.client_gone(stream, receiver).await,
                () = self.connection.closed() => return self.client_gone(stream, receiver).await,
            };
            let Some(batch) = batch else { break };
            let (read, read_end) = read_of(batch, stream.bedrock);
            if !read.is_empty() {
                last.extend_from_slice(&read);
                let cut = last.len().saturating_sub(SEAL_LOOKBACK);
                last.drain(..cut);
                if self.frames.send(Bytes::from(read)).await.is_err() {
                    return self.client_gone(stream, receiver).await;
                }
            }
            end = read_end;
        }
        let Some(end) = end else { return };
        if end.is_ok() {
            let issued = self.issue(&stream, Vec::new(), end);
            enqueue_replay(&self.lane, self.pending, issued, false);
            return;
        }
        let issued = self.issue(&stream, last, end);
        send_the_proxys_end(&self.lane, self.pending, issued, &self.frames).await;
    }

    /// A ticket for the replay: the head (and `last`, the stream's last bytes), then its end.
    fn issue(
        &self,
        stream: &MessagesStream,
        last: Vec<u8>,
        end: Result<serde_json::Value, StreamError>,
    ) -> tickets::Issued {
        let mut read = Vec::with_capacity(self.head.len() + last.len());
        read.extend_from_slice(&self.head);
        read.extend_from_slice(&last);
        let outcome = StreamOutcome {
            opened: Ok(self.headers.clone()),
            pieces: vec![Piece::Raw(Bytes::from(read)), end_piece(end)],
            raw: true,
        };
        stream.head.issue(&self.lane, outcome)
    }

    /// The client left mid-stream: the provider connection is closed at once, and the replay
    /// logs what was read until then (the transcript so far, as the pump hands it over on
    /// `stop`).
    async fn client_gone(self, stream: MessagesStream, receiver: stream::Receiver) {
        self.lane.count("client_gone");
        self.stop.notify_one();
        if let Some(Ok(transcript)) = end_after_stop(receiver).await {
            let issued = self.issue(&stream, Vec::new(), Ok(transcript));
            enqueue_replay(&self.lane, self.pending, issued, false);
        }
    }
}
