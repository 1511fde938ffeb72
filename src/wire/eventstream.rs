//! AWS event streams (`application/vnd.amazon.eventstream`, Bedrock's `converse-stream`) off
//! the wire: binary messages (prelude, headers, payload, both CRCs checked by
//! `aws-smithy-eventstream`) in whatever pieces TCP delivers them, events out.
//!
//! Each message becomes an [`SseEvent`]-shaped event so the stream transforms see one event
//! type: `event` is the `:event-type` header, or `exception:<type>` for a message whose
//! `:message-type` is `exception` or `error`; `data` is the payload.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::Message;
use bytes::BytesMut;

use crate::wire::sse::SseEvent;

#[derive(Debug, thiserror::Error)]
pub enum EventStreamError {
    #[error("the provider sent an invalid event stream message: {0}")]
    Invalid(String),
    #[error("Bedrock stream ended with {0} undecoded bytes after {1} events")]
    Truncated(usize, usize),
}

#[derive(Default)]
pub struct EventStreamDecoder {
    buffer: BytesMut,
    frames: MessageFrameDecoder,
    decoded: usize,
}

/// Exception-ish messages are named `exception:<type>`.
pub const EXCEPTION_PREFIX: &str = "exception:";

impl EventStreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, piece: &[u8], out: &mut Vec<SseEvent>) -> Result<(), EventStreamError> {
        self.buffer.extend_from_slice(piece);
        loop {
            match self
                .frames
                .decode_frame(&mut self.buffer)
                .map_err(|err| EventStreamError::Invalid(err.to_string()))?
            {
                DecodedFrame::Complete(message) => {
                    self.decoded += 1;
                    out.push(event_of(&message));
                }
                DecodedFrame::Incomplete => return Ok(()),
            }
        }
    }

    /// The body ended: bytes of an unfinished message are an error (LiteLLM's too).
    pub fn finish(&mut self) -> Result<(), EventStreamError> {
        if self.buffer.is_empty() {
            Ok(())
        } else {
            Err(EventStreamError::Truncated(self.buffer.len(), self.decoded))
        }
    }
}

fn header<'a>(message: &'a Message, name: &str) -> Option<&'a str> {
    message
        .headers()
        .iter()
        .find(|header| header.name().as_str() == name)
        .and_then(|header| header.value().as_string().ok())
        .map(|value| value.as_str())
}

fn event_of(message: &Message) -> SseEvent {
    let name = match header(message, ":message-type") {
        Some("exception" | "error") => {
            let kind = header(message, ":exception-type")
                .or_else(|| header(message, ":error-code"))
                .unwrap_or("unknownException");
            format!("{EXCEPTION_PREFIX}{kind}")
        }
        _ => header(message, ":event-type").unwrap_or("").to_string(),
    };
    SseEvent {
        event: Some(name),
        data: message.payload().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event-stream message with string headers, as AWS frames it.
    pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        let mut head = Vec::new();
        for (name, value) in headers {
            head.push(name.len() as u8);
            head.extend_from_slice(name.as_bytes());
            head.push(7);
            head.extend_from_slice(&(value.len() as u16).to_be_bytes());
            head.extend_from_slice(value.as_bytes());
        }
        let total = 12 + head.len() + payload.len() + 4;
        let mut out = Vec::new();
        out.extend_from_slice(&(total as u32).to_be_bytes());
        out.extend_from_slice(&(head.len() as u32).to_be_bytes());
        let prelude_crc = crc32fast::hash(&out);
        out.extend_from_slice(&prelude_crc.to_be_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(payload);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    fn body() -> Vec<u8> {
        let mut body = frame(
            &[
                (":event-type", "contentBlockDelta"),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            br#"{"contentBlockIndex":0,"delta":{"text":"h\xc3\xa9"}}"#,
        );
        body.extend(frame(
            &[
                (":exception-type", "throttlingException"),
                (":message-type", "exception"),
            ],
            br#"{"message":"slow down"}"#,
        ));
        body
    }

    #[test]
    fn messages_split_at_every_byte_boundary() {
        let body = body();
        for cut in 0..=body.len() {
            let mut decoder = EventStreamDecoder::new();
            let mut out = Vec::new();
            decoder.feed(&body[..cut], &mut out).unwrap();
            decoder.feed(&body[cut..], &mut out).unwrap();
            decoder.finish().unwrap();
            assert_eq!(out.len(), 2, "cut at {cut}");
            assert_eq!(out[0].event.as_deref(), Some("contentBlockDelta"));
            assert_eq!(
                out[1].event.as_deref(),
                Some("exception:throttlingException")
            );
            assert_eq!(out[1].data, br#"{"message":"slow down"}"#);
        }
    }

    #[test]
    fn a_corrupted_message_is_an_error() {
        let mut body = body();
        let last = body.len() - 1;
        body[last] ^= 0xff;
        let mut decoder = EventStreamDecoder::new();
        assert!(decoder.feed(&body, &mut Vec::new()).is_err());
    }

    #[test]
    fn a_truncated_stream_is_an_error() {
        let body = body();
        let mut decoder = EventStreamDecoder::new();
        let mut out = Vec::new();
        decoder.feed(&body[..body.len() - 3], &mut out).unwrap();
        assert!(matches!(
            decoder.finish(),
            Err(EventStreamError::Truncated(_, 1))
        ));
    }
}
