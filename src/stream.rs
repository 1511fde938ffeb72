//! One streamed provider call: open it once, then pump the body through the provider's event
//! transform into a bounded channel that Python drains in batches.
//!
//! The pump runs on tokio: decoding, JSON parsing and LiteLLM's chunk rules happen off the
//! event loop, and so does serializing the proxy's SSE frames ([`proxy_frame`]). The channel holds at most
//! [`CHANNEL_PIECES`] pieces (one per upstream read), so a slow client slows the upstream read
//! instead of growing memory; dropping the receiver (client gone) ends the pump and closes the
//! upstream connection.

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::call::{self, CallError};
use crate::http::UpstreamRequest;
use crate::http::client::{OpenResponse, Transport, TransportError};
pub use crate::providers::stream::{Flow, Framing, StreamError, StreamTransform};
use crate::wire::eventstream::EventStreamDecoder;
use crate::wire::sse::{SseDecoder, SseEvent};

/// Pieces (each: what one upstream read produced) buffered between the pump and Python.
pub const CHANNEL_PIECES: usize = 16;
/// One handoff to Python carries at most about this many chunks (several pieces merged).
const BATCH_CHUNKS: usize = 512;
/// ... or about this many forwarded bytes.
const BATCH_RAW_BYTES: usize = 1024 * 1024;

/// What the pump hands over.
#[derive(Debug)]
pub enum Piece {
    Chunks(Vec<Value>),
    /// Provider bytes forwarded as they arrived.
    Raw(Bytes),
    /// The stream ended normally: the assembled answer.
    End(Value),
    Failed(StreamError),
}

/// Everything ready at once, merged: what one handoff to Python carries.
#[derive(Debug, Default)]
pub struct Batch {
    pub chunks: Vec<Value>,
    /// Forwarded provider bytes, in order.
    pub raw: Vec<u8>,
    /// Set on the last batch.
    pub end: Option<Result<Value, StreamError>>,
}

impl Batch {
    fn add(&mut self, piece: Piece) {
        match piece {
            Piece::Chunks(chunks) => self.chunks.extend(chunks),
            Piece::Raw(bytes) => self.raw.extend_from_slice(&bytes),
            Piece::End(answer) => self.end = Some(Ok(answer)),
            Piece::Failed(err) => self.end = Some(Err(err)),
        }
    }

    fn full(&self) -> bool {
        self.end.is_some() || self.chunks.len() >= BATCH_CHUNKS || self.raw.len() >= BATCH_RAW_BYTES
    }
}

/// The receiving end, drained by Python.
pub struct Receiver {
    rx: mpsc::Receiver<Piece>,
    /// Chunks received but not yet handed over (a batch was capped), and the end after them.
    held: std::collections::VecDeque<Value>,
    held_raw: Vec<u8>,
    held_end: Option<Result<Value, StreamError>>,
    ended: bool,
}

impl Receiver {
    /// Waits for the next piece, then takes every piece already waiting, and hands over at
    /// most `limit` chunks (at least one when any is there). `None` once the stream's end was
    /// handed over.
    pub async fn next_batch(&mut self, limit: usize) -> Option<Batch> {
        if self.ended {
            return None;
        }
        if self.held.is_empty() && self.held_end.is_none() {
            let mut batch = Batch::default();
            match self.rx.recv().await {
                Some(piece) => batch.add(piece),
                // The pump is gone without an end: it was cancelled.
                None => {
                    batch.end = Some(Err(StreamError::Transport(TransportError::Disconnected(
                        "stream cancelled".into(),
                    ))))
                }
            }
            while !batch.full() {
                match self.rx.try_recv() {
                    Ok(piece) => batch.add(piece),
                    Err(_) => break,
                }
            }
            self.held.extend(batch.chunks);
            self.held_raw = batch.raw;
            self.held_end = batch.end;
        }
        let take = self.held.len().min(limit.max(1));
        let chunks: Vec<Value> = self.held.drain(..take).collect();
        let end = if self.held.is_empty() {
            self.held_end.take()
        } else {
            None
        };
        self.ended = end.is_some();
        Some(Batch {
            chunks,
            raw: std::mem::take(&mut self.held_raw),
            end,
        })
    }
}

pub fn channel() -> (mpsc::Sender<Piece>, Receiver) {
    let (tx, rx) = mpsc::channel(CHANNEL_PIECES);
    (
        tx,
        Receiver {
            rx,
            held: std::collections::VecDeque::new(),
            held_raw: Vec::new(),
            held_end: None,
            ended: false,
        },
    )
}

/// Opens the call: a 2xx status with its headers, or the call's error (nothing streamed).
pub async fn open(
    transport: &Transport,
    request: UpstreamRequest,
) -> Result<OpenResponse, CallError> {
    call::open(transport, request).await
}

/// Reads the body to its end through `transform`, sending pieces to `tx`. Returns when the
/// stream ends, fails, or nobody listens any more (the response is dropped: connection closed).
/// `stop` ends it early, as if the body had ended there: the connection is closed and the
/// transform's end (the answer so far) is still sent, for the caller's logging.
pub async fn pump(
    mut response: OpenResponse,
    mut transform: Box<dyn StreamTransform>,
    tx: mpsc::Sender<Piece>,
    stop: std::sync::Arc<tokio::sync::Notify>,
) {
    let mut decoder = match transform.framing() {
        Framing::Sse => Decoder::Sse(SseDecoder::new()),
        Framing::AwsEventStream => Decoder::Aws(EventStreamDecoder::new()),
    };
    let mut events = Vec::new();
    let mut chunks = Vec::new();
    let mut done = false;
    let mut stopped = false;
    let outcome: Result<Value, StreamError> = async {
        while !done {
            let next = tokio::select! {
                next = response.next_piece() => next,
                () = stop.notified() => {
                    stopped = true;
                    break;
                }
            };
            let piece = match next {
                Ok(Some(piece)) => piece,
                Ok(None) => break,
                Err(TransportError::Disconnected(_)) if transform.saw_finish() => break,
                Err(err) => return Err(err.into()),
            };
            if transform.forwards_raw() && tx.send(Piece::Raw(piece.clone())).await.is_err() {
                return Err(StreamError::Transport(TransportError::Disconnected(
                    "stream cancelled".into(),
                )));
            }
            // Events decoded before a broken one still count (as in LiteLLM's decoders).
            let fed = decoder.feed(&piece, &mut events);
            for event in events.drain(..) {
                if done {
                    break;
                }
                done = transform.event(event, &mut chunks)? == Flow::Done;
            }
            fed?;
            if !chunks.is_empty()
                && tx
                    .send(Piece::Chunks(std::mem::take(&mut chunks)))
                    .await
                    .is_err()
            {
                return Err(StreamError::Transport(TransportError::Disconnected(
                    "stream cancelled".into(),
                )));
            }
        }
        if !done {
            // Ended or stopped early: the event being read counts if it is whole (its lines
            // are), as LiteLLM's logging parses what it read. Stopped, a broken one (cut
            // mid-line by the stop) is dropped: the answer so far is still logged and billed.
            let finished = decoder.finish(&mut events);
            if !stopped {
                finished?;
            }
            for event in events.drain(..) {
                match transform.event(event, &mut chunks) {
                    Ok(Flow::Done) => break,
                    Ok(Flow::More) => {}
                    Err(_) if stopped => break,
                    Err(err) => return Err(err),
                }
            }
        }
        transform.finish(&mut chunks)
    }
    .await;
    // The last chunks (before a failure too: they still reach the client), then the end.
    if !chunks.is_empty() && tx.send(Piece::Chunks(chunks)).await.is_err() {
        return;
    }
    let outcome = match outcome {
        Ok(answer) => Piece::End(answer),
        Err(err) => Piece::Failed(err),
    };
    if stopped {
        // The caller is gone: close the connection before handing over the end.
        drop(response);
        let _ = tx.send(outcome).await;
        return;
    }
    if tx.send(outcome).await.is_err() {
        return;
    }
    if done {
        // Whatever follows the end marker is read (bounded by the timeout) so the connection
        // can go back to the pool; nothing of it is used.
        while let Ok(Some(_)) = response.next_piece().await {}
    }
}

/// One chunk as the proxy writes it: its orjson fast path for plain text chunks, otherwise
/// `model_dump_json(exclude_none=True, exclude_unset=True)` — different key orders, and the
/// fast path drops unknown fields.
pub fn proxy_frame(chunk: &Value, model: &str, out: &mut Vec<u8>) {
    let mut chunk = chunk.clone();
    if let Some(object) = chunk.as_object_mut() {
        object.insert("model".into(), Value::from(model));
    }
    let serialized = fast_layout(&chunk).unwrap_or(chunk);
    out.extend_from_slice(b"data: ");
    // Serializing a `Value` cannot fail (string keys only).
    let _ = serde_json::to_writer(&mut *out, &serialized);
    out.extend_from_slice(b"\n\n");
}

fn fast_layout(chunk: &Value) -> Option<Value> {
    let object = chunk.as_object()?;
    if object.contains_key("system_fingerprint")
        || object.contains_key("usage")
        || object.contains_key("provider_specific_fields")
    {
        return None;
    }
    let [choice] = object.get("choices")?.as_array()?.as_slice() else {
        return None;
    };
    if choice.get("logprobs").is_some() {
        return None;
    }
    let delta = choice.get("delta")?.as_object()?;
    if delta.keys().any(|key| key != "role" && key != "content") {
        return None;
    }
    let mut fast_delta = Map::new();
    if let Some(role) = delta.get("role") {
        fast_delta.insert("role".into(), role.clone());
    }
    if let Some(content) = delta.get("content") {
        fast_delta.insert("content".into(), content.clone());
    }
    let mut fast_choice = Map::new();
    fast_choice.insert(
        "index".into(),
        choice.get("index").cloned().unwrap_or(Value::from(0)),
    );
    fast_choice.insert("delta".into(), Value::Object(fast_delta));
    if let Some(finish) = choice.get("finish_reason") {
        fast_choice.insert("finish_reason".into(), finish.clone());
    }
    let mut fast = Map::new();
    for key in ["id", "object", "created", "model", "service_tier"] {
        if let Some(value) = object.get(key) {
            fast.insert(key.into(), value.clone());
        }
    }
    fast.insert("choices".into(), json!([Value::Object(fast_choice)]));
    Some(Value::Object(fast))
}

/// The body's framing, as the transform asked for it.
enum Decoder {
    Sse(SseDecoder),
    Aws(EventStreamDecoder),
}

impl Decoder {
    fn feed(&mut self, piece: &[u8], out: &mut Vec<SseEvent>) -> Result<(), StreamError> {
        match self {
            Decoder::Sse(decoder) => Ok(decoder.feed(piece, out)?),
            Decoder::Aws(decoder) => Ok(decoder.feed(piece, out)?),
        }
    }

    fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), StreamError> {
        match self {
            Decoder::Sse(decoder) => Ok(decoder.finish(out)?),
            Decoder::Aws(decoder) => Ok(decoder.finish()?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_frames_use_the_fast_layout_only_for_plain_chunks() {
        let mut plain = Vec::new();
        proxy_frame(
            &json!({"id": "a", "created": 5, "model": "x", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": "hi"}}]}),
            "group",
            &mut plain,
        );
        assert_eq!(
            String::from_utf8(plain).unwrap(),
            "data: {\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"group\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
        );
        let mut full = Vec::new();
        proxy_frame(
            &json!({"id": "a", "created": 5, "model": "x", "object": "chat.completion.chunk",
                    "system_fingerprint": "fp",
                    "choices": [{"finish_reason": "stop", "index": 0, "delta": {}}]}),
            "group",
            &mut full,
        );
        assert!(String::from_utf8(full).unwrap().starts_with(
            "data: {\"id\":\"a\",\"created\":5,\"model\":\"group\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp\",\"choices\":[{\"finish_reason\":\"stop\""
        ));
    }
}
