//! What every provider's stream transform provides (upstream events in, LiteLLM's
//! `chat.completion.chunk`s out), and how a stream fails. The pump that drives them is
//! the top-level `stream` module.

use serde_json::Value;

use crate::http::client::TransportError;
use crate::providers::error::TransformError;
use crate::wire::eventstream::EventStreamError;
use crate::wire::sse::{SseError, SseEvent};

/// A provider's stream rules: upstream events in, LiteLLM's `chat.completion.chunk`s out.
pub trait StreamTransform: Send + 'static {
    /// One upstream event; chunks to emit are appended to `out`.
    fn event(&mut self, event: SseEvent, out: &mut Vec<Value>) -> Result<Flow, StreamError>;
    /// The upstream ended (its end marker or EOF): the last chunks, and the whole answer
    /// assembled as a `chat.completion` (what LiteLLM logs for the stream).
    fn finish(&mut self, out: &mut Vec<Value>) -> Result<Value, StreamError>;
    /// A finish reason arrived: a connection dropped after it ends the stream normally (as
    /// LiteLLM treats a read error then).
    fn saw_finish(&self) -> bool;
    /// How the body is framed.
    fn framing(&self) -> Framing {
        Framing::Sse
    }
    /// The body goes to the caller as the provider sent it (`/v1/messages`): every read is
    /// forwarded before its events reach the transform.
    fn forwards_raw(&self) -> bool {
        false
    }
}

/// How a stream's body is cut into events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events (OpenAI, Anthropic).
    Sse,
    /// AWS binary event stream (Bedrock).
    AwsEventStream,
}

/// Whether the upstream said its stream is over (`[DONE]`, `message_stop`).
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    More,
    Done,
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Sse(#[from] SseError),
    #[error(transparent)]
    EventStream(#[from] EventStreamError),
    #[error(transparent)]
    Transform(#[from] TransformError),
    /// The provider reported an error inside the stream (its error object, verbatim).
    #[error("the provider sent an error event mid-stream")]
    Provider(Value),
    /// LiteLLM's guard against a model stuck repeating one chunk.
    #[error("The model is repeating the same chunk = {0}.")]
    Repetition(String),
}
