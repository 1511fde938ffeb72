//! Where Anthropic's Messages API is, for chat and `/v1/messages` calls alike.

pub const DEFAULT_API_BASE: &str = "https://api.anthropic.com";
const MESSAGES_PATH: &str = "/v1/messages";
pub const API_VERSION: &str = "2023-06-01";

/// `{base}/v1/messages`, or the base itself when it already ends with that path (LiteLLM's rule).
pub fn messages_url(base: &str) -> String {
    if base.ends_with(MESSAGES_PATH) {
        base.to_string()
    } else {
        format!("{base}{MESSAGES_PATH}")
    }
}
