//! litellm-fastpath: LiteLLM chat calls served in Rust.
//!
//! The core (everything but `py`) is free of PyO3 so `cargo test` exercises it without an
//! interpreter; `py` only converts between Python objects and these types.

pub mod body;
pub mod call;
pub mod chat;
pub mod providers;
pub mod runtime;
pub mod signing;
pub mod transport;

#[cfg(feature = "python")]
mod py;
