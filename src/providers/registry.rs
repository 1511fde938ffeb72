//! Every provider the fast path serves, one entry each: its chat transform, and its answer to
//! each question the rest of the fast path asks a provider. A new chat provider is its folder
//! and its entry here.

use super::provider::{
    AnswerShape, ChatProvider, ChatStream, Credentials, JsonSchemaForm, MessagesApi, Provider,
    StreamAsk,
};
use super::{anthropic, bedrock, openai};

pub static REGISTRY: &[ChatProvider] = &[
    ChatProvider {
        name: "openai",
        // Forwarded as given, like LiteLLM's OpenAI handler does for non-o-series models (the
        // tool and structured-output params after the transform's checks).
        params: &[
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "stop",
            "presence_penalty",
            "frequency_penalty",
            "seed",
            "user",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "response_format",
        ],
        build_request: openai::build_request,
        parse_response: openai::parse_response,
        answer_shape: AnswerShape::OpenAi,
        json_schema: JsonSchemaForm::AsGiven,
        credentials: Credentials::ApiKey,
        chat_stream: Some(ChatStream {
            transform: |model, options| Box::new(openai::stream::OpenAiStream::new(model, options)),
            asked_by: StreamAsk::Body {
                forward_options: true,
            },
        }),
        embeddings: Some(openai::embedding::build),
        messages_api: None,
    },
    ChatProvider {
        name: "anthropic",
        // Mapped like LiteLLM's `AnthropicConfig` (`stop` -> `stop_sequences`).
        params: &[
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "stop",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "response_format",
        ],
        build_request: anthropic::build_request,
        parse_response: anthropic::parse_response,
        answer_shape: AnswerShape::Converted,
        // `output_format` for models with native structured output, a forced tool for others.
        json_schema: JsonSchemaForm::PerModel,
        credentials: Credentials::ApiKey,
        chat_stream: Some(ChatStream {
            transform: |model, options| {
                Box::new(anthropic::stream::AnthropicStream::new(model, options))
            },
            // LiteLLM never sends `stream_options` to Anthropic.
            asked_by: StreamAsk::Body {
                forward_options: false,
            },
        }),
        embeddings: None,
        messages_api: Some(MessagesApi::Anthropic),
    },
    ChatProvider {
        name: "bedrock",
        // Mapped into `inferenceConfig` and `toolConfig` like LiteLLM's `AmazonConverseConfig`.
        params: &[
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "stop",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "response_format",
        ],
        build_request: bedrock::build_request,
        parse_response: bedrock::parse_response,
        answer_shape: AnswerShape::Converted,
        // A native output format for some models, LiteLLM's forced `json_tool_call` for others.
        json_schema: JsonSchemaForm::PerModel,
        credentials: Credentials::Aws,
        chat_stream: Some(ChatStream {
            transform: |model, options| {
                Box::new(bedrock::stream::BedrockStream::new(model, options))
            },
            // The `converse` body to `converse-stream`; LiteLLM never puts `stream` into it.
            asked_by: StreamAsk::UrlSuffix("-stream"),
        }),
        embeddings: Some(bedrock::embedding::build),
        messages_api: Some(MessagesApi::BedrockInvoke),
    },
];

/// A provider of the registry, by LiteLLM's name.
pub fn find(name: &str) -> Option<Provider> {
    REGISTRY
        .iter()
        .find(|provider| provider.name == name)
        .map(Provider::new)
}
