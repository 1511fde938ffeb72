//! `/v1/messages` streams on the lane (`anthropic/…`, Bedrock Invoke): the provider's bytes
//! (Bedrock's events as LiteLLM writes them) go to the client as the proxy relays them —
//! `message_start` naming the model group ([`Restamper`]), every byte after it as it arrives —
//! and LiteLLM's end-of-stream logging runs in the replay, over the transcript Rust kept.
//!
//! The lane answers once the restamp is decided (the first event is in, as a rule) and, where
//! the router holds frames back until content because a retry could still take the stream over
//! (`num_retries`), once content is in. A stream that fails or ends before that, brings an error
//! event first, or whose first frame the proxy would read differently, is read to its end and
//! answered by the proxy from its ticket (whose router then retries as it would). A stream that
//! fails after it: the proxy writes its error frame (its exception mapping), so the lane queues
//! the replay first and sends the client the end of the proxy's answer.

use bytes::Bytes;

use super::restamp::{Restamper, contains};
use crate::http::UpstreamRequest;
use crate::lane::connection::Connection;
use crate::lane::head::Head;
use crate::lane::headers::{CostHeaders, HeaderSet, answer_headers};
use crate::lane::served::{ClientRequest, Served};
use crate::lane::state::Serving;
use crate::lane::streamed::{self, End, StreamFrames, end_piece};
use crate::providers::MessagesApi;
use crate::providers::messages::stream::{sse_frame, transform};
use crate::stream::{Batch, Piece, Receiver};

/// The proxy seals a frame cut short before its error frame by the last bytes it wrote; the
/// replay is handed this many of them.
const SEAL_LOOKBACK: usize = 64;
/// The router commits to a held stream after this many reads without content.
const MAX_HELD_READS: usize = 200;

/// An admitted `/v1/messages` stream.
pub(super) struct MessagesStream {
    pub api: MessagesApi,
    /// The router holds the stream's frames back until its first content (a retry could
    /// still take it over): the lane answers only then.
    pub held: bool,
    /// The API base the proxy names on the stream (its Messages route's), if any.
    pub api_base: Option<String>,
}

/// A `/v1/messages` stream's frames: the provider's bytes as the proxy relays them.
struct MessagesFrames {
    api: MessagesApi,
    /// The bytes read until the restamp was decided: the replay's stream starts with them, so
    /// the proxy's restamp decides there too.
    head: Bytes,
    /// The last bytes sent after the head (what the proxy's seal of a cut frame looks at).
    last: Vec<u8>,
}

impl StreamFrames for MessagesFrames {
    const RAW: bool = true;
    const CLOSING: &'static [u8] = b"";

    fn frames(&mut self, batch: Batch) -> Vec<u8> {
        let read = read_of(batch, self.api);
        self.last.extend_from_slice(&read);
        let cut = self.last.len().saturating_sub(SEAL_LOOKBACK);
        self.last.drain(..cut);
        read
    }

    fn proxy_writes(&self, end: &End) -> bool {
        end.is_err()
    }

    /// The head, and after a failure the last bytes sent (where the proxy seals a cut frame).
    fn pieces(&self, end: End) -> Vec<Piece> {
        let last: &[u8] = if end.is_err() { &self.last } else { &[] };
        let mut read = Vec::with_capacity(self.head.len() + last.len());
        read.extend_from_slice(&self.head);
        read.extend_from_slice(last);
        vec![Piece::Raw(Bytes::from(read)), end_piece(end)]
    }
}

pub(super) async fn serve(
    request: ClientRequest<'_>,
    mut head: Head,
    upstream: UpstreamRequest,
    stream: MessagesStream,
    serving: Serving,
) -> Served {
    let lane = request.lane;
    let connection = request.connection;
    let transform = transform(stream.api);
    let mut opened = match streamed::open(request, &head, upstream, transform, true).await {
        Ok(opened) => opened,
        Err(served) => return served,
    };
    let mut restamper = Restamper::new(&head.model_group);
    // Every byte read until the restamp is decided, and what the proxy writes of them.
    let mut read_head = Vec::new();
    let mut written = Vec::new();
    let mut end;
    let mut reads = 0;
    let mut committed = !stream.held;
    let decided = loop {
        let Some((read, read_end)) = next_read(&mut opened.receiver, connection, stream.api).await
        else {
            return Served::Gone;
        };
        read_head.extend_from_slice(&read);
        end = read_end;
        match restamper.process(&read) {
            Ok(bytes) => written.extend(bytes),
            Err(_) => break false,
        }
        if !committed {
            // An error event before content is the router's to retry: the proxy's.
            if contains(&read_head, b"error") {
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
                    next_read(&mut opened.receiver, connection, stream.api).await
                else {
                    return Served::Gone;
                };
                read_head.extend_from_slice(&read);
                if let Some(end) = read_end {
                    break end;
                }
            },
        };
        let pieces = vec![Piece::Raw(Bytes::from(read_head)), end_piece(end)];
        return streamed::to_proxy(lane, &head, opened, pieces, true);
    }
    if let Some(usage) = &head.deployment.usage {
        // The router counts a stream's request as it opens, its tokens once it is logged.
        head.group_usage = usage.serve(0);
    }
    let headers = answer_headers(
        &lane.table.settings(),
        &head,
        HeaderSet::MessagesStream(stream.api_base.as_deref()),
        CostHeaders::Stream,
        opened.upstream_ms(),
        &opened.provider_headers,
    );
    let frames = MessagesFrames {
        api: stream.api,
        head: Bytes::from(read_head),
        last: Vec::new(),
    };
    streamed::answer_with(
        request, head, opened, frames, written, end, headers, serving,
    )
}

/// The next reads of the provider's stream as the proxy's bytes, and the end when it came; None
/// once the client is gone (dropping the receiver then ends the pump and closes the provider
/// connection) or the stream is over.
async fn next_read(
    receiver: &mut Receiver,
    connection: &Connection,
    api: MessagesApi,
) -> Option<(Vec<u8>, Option<End>)> {
    let batch = tokio::select! {
        batch = receiver.next_batch(usize::MAX) => batch,
        () = connection.closed() => None,
    };
    let mut batch = batch?;
    let end = batch.end.take();
    Some((read_of(batch, api), end))
}

/// A batch's bytes as the proxy relays them: Anthropic's as they came, Bedrock's events as
/// LiteLLM writes them (`event: …` and `json.dumps`).
fn read_of(batch: Batch, api: MessagesApi) -> Vec<u8> {
    match api {
        MessagesApi::Anthropic => batch.raw,
        MessagesApi::BedrockInvoke => {
            let mut frames = Vec::new();
            for event in &batch.chunks {
                sse_frame(event, &mut frames);
            }
            frames
        }
    }
}

/// Whether a read carries generated content, as the router tells (an `event:
/// content_block_delta` line; `bytes.splitlines` breaks at `\n`, `\r` and `\r\n`).
fn has_content(read: &[u8]) -> bool {
    read.split(|byte| *byte == b'\n' || *byte == b'\r')
        .any(|line| line == b"event: content_block_delta")
}
