//! litellm-fastpath: LiteLLM chat calls served in Rust.
//!
//! The core (everything but `py`) is free of PyO3 so `cargo test` exercises it without an
//! interpreter; `py` only converts between Python objects and these types.

pub mod call;
pub mod http;
pub mod lane;
pub mod model;
pub mod providers;
pub mod runtime;
pub mod stream;
pub mod wire;

#[cfg(feature = "python")]
mod py;
