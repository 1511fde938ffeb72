//! LiteLLM's `Usage` for the answers it converts (Anthropic's, Bedrock's): cache reads and
//! writes count as prompt tokens, and the details list every count.

use serde_json::{Value, json};

/// A converted answer's token counts.
pub struct TokenCounts {
    pub input: i64,
    pub output: i64,
    pub cache_read: i64,
    pub cache_write: i64,
    /// The provider's own total, where LiteLLM reports it (else prompt plus output).
    pub total: Option<i64>,
}

/// The usage as LiteLLM writes it, in its order; a provider's own fields go after it.
pub fn converted_usage(counts: TokenCounts) -> Value {
    let TokenCounts {
        input,
        output,
        cache_read,
        cache_write,
        total,
    } = counts;
    let prompt = input + cache_read + cache_write;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": total.unwrap_or(prompt + output),
        "completion_tokens_details": {"reasoning_tokens": 0, "text_tokens": output},
        "prompt_tokens_details": {
            "audio_tokens": null,
            "image_tokens": null,
            "video_tokens": null,
            "cache_write_tokens": cache_write,
            "cached_tokens": cache_read,
            "text_tokens": input,
            "cache_creation_tokens": cache_write,
        },
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
    })
}
