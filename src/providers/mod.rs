//! Provider transforms: chat request -> upstream HTTP request, upstream response ->
//! chat.completion, and the same for streams, embeddings and `/v1/messages`.
//!
//! Each provider module mirrors what LiteLLM 1.106.12's Python path sends and returns; the
//! differential tests in `tests/` hold them to it.
//!
//! Where things are:
//! - `provider`: what a provider answers (`ChatProvider`: its transforms, streams, `json_schema`
//!   form, embeddings, `/v1/messages` API, the lane's answer shape, credentials) and the
//!   `Deployment` a call goes to; `registry`: every provider, one entry each.
//! - One folder per provider (`openai`, `anthropic`, `bedrock`): its chat transform in
//!   `mod.rs`, its endpoint, stream, tools and embeddings beside it.
//! - `prepare`: admission and the transform of every call, asking the deployment's provider.
//! - Shared by the transforms: `rules` (admission), `turns`, `tools` and `usage` (what Anthropic
//!   and Bedrock shape alike), `chunks` and `stream` (LiteLLM's chunk rules, the stream
//!   transform trait), `embedding` (the embeddings call and its params), `parts` (headers,
//!   POSTs, JSON answers), `error`.
//! - `messages`: the Anthropic Messages API (`/v1/messages`) to Anthropic or Bedrock Invoke.

pub mod anthropic;
pub mod bedrock;
pub mod chunks;
pub mod embedding;
pub mod error;
pub mod messages;
pub mod openai;
pub mod parts;
pub mod prepare;
pub mod provider;
pub mod registry;
pub mod rules;
pub mod stream;
pub mod tools;
pub mod turns;
pub mod usage;

pub use error::{Refusal, TransformError};
pub use prepare::{parse_response, prepare, prepare_embedding, prepare_stream};
pub use provider::{AnswerShape, AwsAuth, AwsSettings, Credentials, Deployment, MessagesApi};
