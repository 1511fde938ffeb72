//! The proxy's headers for an answer the lane writes: its `x-litellm-*` headers (call id,
//! deployment, cost split, key spend, durations), the provider's headers as LiteLLM passes them
//! on, and the proxy-wide ones, in the proxy's order; each route's differences from the chat
//! routes' set included.

use http::HeaderMap;

use super::cost::Cost;
use super::head::Head;
use super::table::Settings;
use crate::wire::pyjson::python_float;

const API_BASE: &str = "x-litellm-model-api-base";
const CALLBACK_DURATION: &str = "x-litellm-callback-duration-ms";

/// Which of the proxy's headers a route's answer carries.
#[derive(Clone, Copy, Debug)]
pub(super) enum HeaderSet<'a> {
    /// The chat routes': every header, the provider's included.
    Chat,
    /// A `/v1/messages` answer: the chat answer's, less what the proxy's Messages route leaves
    /// out (the provider's headers, the API base, the callback duration).
    Messages,
    /// A `/v1/messages` stream: the chat answer's, naming the API base of the Messages route
    /// (if it has one) rather than the chat route's.
    MessagesStream(Option<&'a str>),
}

/// The cost headers of an answer.
#[derive(Clone, Copy, Debug)]
pub enum CostHeaders {
    /// Unknown (no linear price): none.
    Unknown,
    Known(Cost),
    /// A stream: the proxy writes its headers before any cost is known (zeros, and no total).
    Stream,
}

impl From<Option<Cost>> for CostHeaders {
    fn from(cost: Option<Cost>) -> Self {
        cost.map_or(CostHeaders::Unknown, CostHeaders::Known)
    }
}

/// Where LiteLLM looks for the provider's request id, first found first.
const REQUEST_ID_HEADERS: [&str; 4] = [
    "request-id",
    "x-request-id",
    "llm_provider-request-id",
    "llm_provider-x-request-id",
];

/// Every header the proxy sends with the answer to `head`, in the proxy's order.
pub(super) fn answer_headers(
    settings: &Settings,
    head: &Head,
    set: HeaderSet<'_>,
    cost: CostHeaders,
    upstream_ms: f64,
    provider_headers: &HeaderMap,
) -> Vec<(String, String)> {
    let provider_headers = match set {
        HeaderSet::Messages => &HeaderMap::new(),
        HeaderSet::Chat | HeaderSet::MessagesStream(_) => provider_headers,
    };
    let mut out = chat_headers(settings, head, cost, upstream_ms, provider_headers);
    match set {
        HeaderSet::Chat => {}
        HeaderSet::Messages => {
            out.retain(|(name, _)| name != API_BASE && name != CALLBACK_DURATION)
        }
        HeaderSet::MessagesStream(api_base) => {
            out.retain(|(name, _)| name != API_BASE);
            if let Some(api_base) = api_base {
                out.push((API_BASE.to_string(), api_base.to_string()));
            }
        }
    }
    out
}

fn chat_headers(
    settings: &Settings,
    head: &Head,
    cost: CostHeaders,
    upstream_ms: f64,
    provider_headers: &HeaderMap,
) -> Vec<(String, String)> {
    let total_ms = head.received.elapsed().as_secs_f64() * 1000.0;
    let mut out: Vec<(String, String)> = Vec::with_capacity(40);
    let mut push = |name: &str, value: String| out.push((name.to_string(), value));
    if let CostHeaders::Stream = cost {
        push("content-type", "text/event-stream; charset=utf-8".into());
        push("cache-control", "no-cache".into());
        push("x-accel-buffering", "no".into());
    } else {
        push("content-type", "application/json".into());
    }
    push("x-litellm-call-id", head.call_id.id.clone());
    for (name, value) in &head.deployment.headers {
        push(name, value.clone());
    }
    let zero = || "0.0".to_string();
    let breakdown = match cost {
        CostHeaders::Unknown => None,
        CostHeaders::Known(cost) => {
            push("x-litellm-response-cost", python_float(cost.total));
            Some(cost)
        }
        CostHeaders::Stream => Some(Cost {
            input: 0.0,
            output: 0.0,
            total: 0.0,
            reasoning: 0.0,
            cache_read: 0.0,
            cache_creation: 0.0,
        }),
    };
    if let Some(cost) = breakdown {
        push("x-litellm-response-cost-original", python_float(cost.total));
        push("x-litellm-response-cost-discount-amount", zero());
        push("x-litellm-response-cost-margin-amount", zero());
        push("x-litellm-response-cost-margin-percent", zero());
        push("x-litellm-response-cost-input", python_float(cost.input));
        push("x-litellm-response-cost-output", python_float(cost.output));
        if cost.cache_read > 0.0 {
            push(
                "x-litellm-response-cost-cache-read",
                python_float(cost.cache_read),
            );
        }
        if cost.cache_creation > 0.0 {
            push(
                "x-litellm-response-cost-cache-creation",
                python_float(cost.cache_creation),
            );
        }
        if cost.reasoning > 0.0 {
            push(
                "x-litellm-response-cost-reasoning",
                python_float(cost.reasoning),
            );
        }
        push("x-litellm-response-cost-tool-usage", zero());
    }
    let spent = breakdown.map_or(0.0, |cost| cost.total);
    let updated = if spent > 0.0 {
        head.key_spend + spent
    } else {
        head.key_spend
    };
    for (name, value) in &head.key_headers {
        push(name, value.clone());
    }
    push("x-litellm-key-spend", python_float(updated));
    // The limiter adds its headers to a whole answer's (its post-call hook); a stream's headers
    // are written before.
    if !matches!(cost, CostHeaders::Stream) {
        for (name, value) in head.rate_headers() {
            push(name, value.clone());
        }
    }
    push("x-litellm-response-duration-ms", python_float(total_ms));
    let overhead = ((total_ms - upstream_ms) * 10_000.0).round() / 10_000.0;
    push("x-litellm-overhead-duration-ms", python_float(overhead));
    push(CALLBACK_DURATION, "0.0".into());
    // LiteLLM's `process_response_headers`: OpenAI's own headers as they are, then every
    // provider header under `llm_provider-`.
    let text = |value: &http::HeaderValue| value.to_str().ok().map(str::to_string);
    for (name, value) in provider_headers {
        if settings.openai_headers.contains(name.as_str())
            && let Some(value) = text(value)
        {
            push(name.as_str(), value);
        }
    }
    // LiteLLM names the provider's request id `request-id` (`get_provider_request_id`), and the
    // proxy's second pass over those headers puts it under `llm_provider-request-id` as well.
    let request_id = REQUEST_ID_HEADERS.iter().find_map(|name| {
        provider_headers
            .get(*name)
            .and_then(text)
            .filter(|id| !id.is_empty())
    });
    for (name, value) in provider_headers {
        if let Some(value) = text(value) {
            let name = name.as_str();
            if request_id.is_some() && matches!(name, "request-id" | "llm_provider-request-id") {
                continue;
            }
            if name.starts_with("llm_provider-") {
                push(name, value);
            } else {
                push(&format!("llm_provider-{name}"), value);
            }
        }
    }
    if let Some(id) = request_id {
        push("llm_provider-request-id", id.clone());
        push("request-id", id);
    }
    for (name, value) in &settings.headers {
        push(name, value.clone());
    }
    push("x-litellm-model-group", head.model_group.clone());
    push("x-litellm-attempted-retries", "0".into());
    push("x-litellm-attempted-fallbacks", "0".into());
    // The router's usage of the group this minute, where the provider sent none of the same name
    // (`apply_remaining_usage_headers`).
    for (name, value) in &head.group_usage {
        if !out.iter().any(|(present, _)| present == name) {
            out.push((name.clone(), value.clone()));
        }
    }
    out
}
