//! Why a request stays on LiteLLM's Python path ([`DeclineCode`]), and why the fast lane sends
//! a request to the proxy rather than answering it ([`LaneReason`]): one enum each, in Rust and
//! Python.
//!
//! The names are what the counters count (`litellm_fastpath.decline_counts()`, the lane's
//! counts), what the debug log says and what the docs' tables list (tests keep those tables
//! equal to [`DeclineCode::ALL`] and [`LaneReason::ALL`]).

/// Declares a set of reasons once: the enum, its variants and their wire names.
macro_rules! named_reasons {
    ($(#[$enum_doc:meta])* $enum:ident { $($(#[$doc:meta])* $variant:ident => $name:literal,)* }) => {
        $(#[$enum_doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $enum {
            $($(#[$doc])* $variant,)*
        }

        impl $enum {
            /// Every reason, in declaration order.
            pub const ALL: &'static [$enum] = &[$($enum::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($enum::$variant => $name,)*
                }
            }

            pub fn parse(name: &str) -> Option<$enum> {
                match name {
                    $($name => Some($enum::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

named_reasons! {
    /// A bounded set of decline reasons (counted per code).
    DeclineCode {
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
        /// A configured callback's per-deployment hook LiteLLM runs around the provider call
        /// (chat, embeddings, transcription).
        DeploymentHook => "deployment_hook",
        /// A check LiteLLM's `client` wrapper makes in Python: its global budget, pre- or
        /// post-call rules, JSON schema validation of the answer.
        ClientChecks => "client_checks",
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
}

named_reasons! {
    /// Why the fast lane sends a request to the proxy rather than answering it itself (counted
    /// per reason, next to `served` and `replayed`).
    LaneReason {
        /// The lane is switched off, or the proxy's settings are ones it does not reproduce.
        Off => "lane_off",
        /// A body the lane does not read (a field, type or shape outside its subset).
        Body => "lane_body",
        /// The key comes another way, or LiteLLM has no valid verdict on it yet.
        Auth => "lane_auth",
        /// A model group (or, on `/v1/messages`, a deployment) the lane does not serve.
        Model => "lane_model",
        /// The key may not call the group.
        Access => "lane_access",
        /// A deployment of the group is cooling down.
        Cooldown => "lane_cooldown",
        /// Too many served requests wait for their replay.
        Backlog => "lane_backlog",
        /// The fast path's transform does not admit the request as the lane sends it.
        Param => "lane_param",
        /// A header through which the caller asks the proxy for something.
        Header => "lane_header",
        /// A stream the lane leaves to the proxy.
        Stream => "lane_stream",
        /// `/v1/messages` with thinking, sampling params or `anthropic-*` headers the lane has not
        /// seen LiteLLM treat yet for the deployment (the proxy's path teaches it).
        Unseen => "lane_unseen",
        /// A request naming an end user (`/v1/messages` `metadata.user_id`) on a proxy with a
        /// database, where LiteLLM checks the end user's budget, limits and model access.
        EndUser => "lane_end_user",
        /// A key with a budget whose headroom (less what its requests not yet replayed hold)
        /// does not leave room for this request with a margin, or a group or body whose
        /// reservation the lane cannot bound: the proxy decides, once the key's replays reserved.
        Budget => "lane_budget",
        /// A key with rpm limits whose window (less what its requests not yet replayed hold) is
        /// at its limit, near its end or not started, or, with Redis, past its limit once the
        /// lane counted the request there: the proxy decides, once the key's replays counted.
        RateLimit => "lane_rate_limit",
        /// A key with rpm limits counted in Redis, and Redis did not answer the lane.
        RateLimitUnverified => "lane_rate_limit_unverified",
        /// A key whose parallel-request gauge has no slot for the request (the lane's requests
        /// in flight and the proxy's): the proxy decides at once, counting the lane's slots.
        ParallelLimit => "lane_parallel_limit",
        /// The picked deployment's slots for calls in flight are all in use (the lane's calls
        /// and the proxy's): the proxy's router picks again and refuses it if that pick is full.
        DeploymentSlots => "lane_deployment_slots",
        /// Usage-based routing where a deployment of the group is near its rpm or tpm limit this
        /// minute, or the prompt's tokens cannot be bounded against a tpm limit: the proxy's
        /// router picks, once it counted what the lane picked.
        RoutingLimit => "lane_routing_limit",
    }
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
        for &reason in LaneReason::ALL {
            assert_eq!(LaneReason::parse(reason.as_str()), Some(reason));
            assert!(seen.insert(reason.as_str()), "{} twice", reason.as_str());
        }
        assert_eq!(DeclineCode::parse("no_such_code"), None);
        assert_eq!(LaneReason::parse("lane_nothing"), None);
    }
}
