//! What a call is about, independent of any provider or wire format: the chat request as the
//! caller sent it (zero-copy `Bytes` over Python's text and media) and the reasons a request is
//! left to LiteLLM.

pub mod chat;
pub mod decline;

pub use chat::{ChatRequest, Content, ContentPart, ImageUrl, Message, Role};
pub use decline::{Decline, DeclineCode};
