//! What a call is about, independent of any provider or wire format: the chat request as the
//! caller sent it (zero-copy `Bytes` over Python's text and media), the embeddings request, and
//! the reasons a request is left to LiteLLM (or, by the fast lane, to the proxy).

pub mod chat;
pub mod decline;
pub mod embedding;

pub use chat::{ChatRequest, Content, ContentPart, ImageUrl, Message, Role};
pub use decline::{Decline, DeclineCode, LaneReason};
pub use embedding::{EmbeddingInput, EmbeddingRequest};
