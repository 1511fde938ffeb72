//! Bytes on the wire: the streamed JSON request body and the media inside it.

pub mod body;
mod escape;
pub mod eventstream;
pub mod media;
pub mod pyjson;
pub mod sse;
