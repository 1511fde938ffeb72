//! Every provider the fast path serves, one line each.

use super::anthropic::Anthropic;
use super::bedrock::Bedrock;
use super::openai::OpenAi;
use super::provider::{ChatProvider, Provider};

pub static REGISTRY: &[&dyn ChatProvider] = &[&OpenAi, &Anthropic, &Bedrock];

/// A provider of the registry, by LiteLLM's name.
pub fn find(name: &str) -> Option<Provider> {
    REGISTRY
        .iter()
        .find(|provider| provider.name() == name)
        .map(|provider| Provider::new(*provider))
}
