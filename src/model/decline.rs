//! Why a request stays on LiteLLM's Python path: one enum for every reason, in Rust and Python.
//!
//! The names are what `litellm_fastpath.decline_counts()` counts, what the debug log says and
//! what the README's table lists (a test keeps that table equal to [`DeclineCode::ALL`]).

/// Declares the codes once: variant, wire name.
macro_rules! decline_codes {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// A bounded set of decline reasons (counted per code).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DeclineCode {
            $($(#[$doc])* $variant,)*
        }

        impl DeclineCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [DeclineCode] = &[$(DeclineCode::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(DeclineCode::$variant => $name,)*
                }
            }

            pub fn parse(name: &str) -> Option<DeclineCode> {
                match name {
                    $($name => Some(DeclineCode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

decline_codes! {
    // A request param that asks for behaviour the fast path does not reproduce (its own code,
    // so an operator sees what keeps traffic off the fast path).
    Stream => "stream",
    ResponseFormat => "response_format",
    N => "n",
    TopK => "top_k",
    Tools => "tools",
    ToolChoice => "tool_choice",
    Functions => "functions",
    FunctionCall => "function_call",
    ParallelToolCalls => "parallel_tool_calls",
    Logprobs => "logprobs",
    TopLogprobs => "top_logprobs",
    ReasoningEffort => "reasoning_effort",
    Thinking => "thinking",
    Audio => "audio",
    Modalities => "modalities",
    WebSearchOptions => "web_search_options",
    ExtraBody => "extra_body",
    // LiteLLM options that change LiteLLM's own behaviour.
    MockResponse => "mock_response",
    Fallbacks => "fallbacks",
    NumRetries => "num_retries",
    Caching => "caching",
    Cache => "cache",
    LitellmOption => "litellm_option",
    /// A param this provider's allowlist does not hold.
    UnsupportedParam => "unsupported_param",
    /// An allowed param with a JSON type LiteLLM coerces, drops or forwards per provider.
    ParamType => "param_type",
    // Messages LiteLLM treats in its own way.
    MalformedMessage => "malformed_message",
    MessageRole => "message_role",
    MessageField => "message_field",
    MessageWithoutContent => "message_without_content",
    EmptyContent => "empty_content",
    ContentPart => "content_part",
    ContentPartField => "content_part_field",
    /// Empty or whitespace-only text, or a final assistant turn ending in whitespace.
    BlankText => "blank_text",
    /// No user or assistant message.
    SystemOnly => "system_only",
    SystemImage => "system_image",
    AssistantImage => "assistant_image",
    ImageUrlRemote => "image_url_remote",
    ImageType => "image_type",
    // Deployments the fast path does not serve exactly like LiteLLM (decided in Python).
    Provider => "provider",
    Model => "model",
    ModelSpecific => "model_specific",
    BedrockRoute => "bedrock_route",
    Credentials => "credentials",
    Deployment => "deployment",
    ExtraHeaders => "extra_headers",
    Timeout => "timeout",
    // Transcription inputs LiteLLM reads itself.
    AudioSource => "audio_source",
    /// Embeddings `input` LiteLLM forwards as given (empty lists, mixed or nested shapes, token
    /// ids for Bedrock, data URLs for Cohere) or its proxy rewrites.
    EmbeddingInput => "embedding_input",
    // `/v1/messages` requests LiteLLM rewrites in ways the fast path does not reproduce.
    /// A top-level field (server features, thinking or sampling LiteLLM changes per model).
    MessagesParam => "messages_param",
    /// A content block LiteLLM rewrites, flattens or strips (server tool blocks, tool ids it
    /// sanitizes, encrypted reasoning, Bedrock cache-control forms).
    MessagesBlock => "messages_block",
    /// A tool LiteLLM treats itself (server tools, Bedrock schema and name fix-ups).
    MessagesTool => "messages_tool",
    /// A hook, interceptor or setting that sees or changes `/v1/messages` requests in Python.
    MessagesHook => "messages_hook",
}

/// Why a request stays on LiteLLM's Python path. `detail` names the offending field for the
/// debug log and never carries request content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decline {
    pub code: DeclineCode,
    pub detail: String,
}

impl Decline {
    pub fn new(code: DeclineCode, detail: impl Into<String>) -> Self {
        Decline {
            code,
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &code in DeclineCode::ALL {
            assert_eq!(DeclineCode::parse(code.as_str()), Some(code));
            assert!(seen.insert(code.as_str()), "{} twice", code.as_str());
        }
        assert_eq!(DeclineCode::parse("no_such_code"), None);
    }
}
