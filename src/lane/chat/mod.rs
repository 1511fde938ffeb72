//! The chat completion routes (`/chat/completions`, `/v1/chat/completions`): a request the
//! lane reads (`request`), admitted for a deployment the fast path calls, answered as the proxy
//! answers (`answer`; streams: `stream`).

mod answer;
mod request;
mod stream;

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::gate::{Route, gate, judge};
use super::head::Head;
use super::headers::HeaderSet;
use super::served::{ClientRequest, Served};
use super::state::Serving;
use super::table::StreamUsage;
use super::tickets::uuid4;
use super::unary::{self, Written};
use crate::call::{Completion, ResponseShape};
use crate::http::UpstreamRequest;
use crate::model::LaneReason;
use crate::providers::chunks::{REPEATED_CHUNK_LIMIT, StreamOptions};
use crate::providers::{prepare, prepare_stream};
use crate::stream::StreamTransform;

/// The provider call an admitted request makes.
enum Plan {
    Call(UpstreamRequest),
    Stream {
        upstream: UpstreamRequest,
        transform: Box<dyn StreamTransform>,
        /// The client asked for the usage chunk (the proxy writes it; see `stream`).
        usage_chunk: bool,
    },
}

pub(super) async fn serve(request: ClientRequest<'_>) -> Served {
    let received = Instant::now();
    let (mut head, plan) = match admit(request, received) {
        Ok(admitted) => admitted,
        Err(why) => return Served::ToProxy(why),
    };
    if let Err(why) = head.count_rates(request.lane, request.body).await {
        return Served::ToProxy(why);
    }
    let serving = Serving::new(request.lane);
    match plan {
        Plan::Call(upstream) => {
            let shape = ResponseShape::ChatCompletion(Arc::clone(&head.deployment.deployment));
            let answer_shape = head.deployment.deployment.provider.answer_shape;
            let pricing = head.deployment.pricing;
            let model_group = head.model_group.clone();
            let write = |completion: &mut Completion| {
                let (id, created) = mint_id(completion);
                let (body, usage) = answer::chat_body(
                    answer_shape,
                    &completion.body,
                    &model_group,
                    (&id, created),
                )?;
                let cost = match pricing.map(|pricing| usage.cost(pricing)) {
                    // A price the lane does not know (cached tokens): the proxy answers.
                    Some(None) => return None,
                    Some(Some(cost)) => Some(cost),
                    None => None,
                };
                Some(Written {
                    body,
                    cost,
                    total_tokens: usage.total_tokens,
                })
            };
            let set = HeaderSet::Chat;
            unary::serve(request, head, upstream, shape, set, serving, write).await
        }
        Plan::Stream {
            upstream,
            transform,
            usage_chunk,
        } => stream::serve(request, head, upstream, transform, usage_chunk, serving).await,
    }
}

/// Everything the lane checks before any I/O; the reason (counted) when the proxy should serve.
fn admit(request: ClientRequest<'_>, received: Instant) -> Result<(Head, Plan), LaneReason> {
    let lane = request.lane;
    let key_hash = gate(lane, request.parts, Route::Chat)?;
    let parsed = request::parse(request.body).map_err(|_| LaneReason::Body)?;
    let judged = judge(lane, key_hash, &parsed.model, request.body)?;
    let deployment = &judged.deployment;
    let mut chat = parsed.chat;
    for (name, value) in &deployment.params {
        chat.params
            .entry(name.clone())
            .or_insert_with(|| value.clone());
    }
    // Where LiteLLM's form of a `json_schema` depends on the model (the Python layer decides
    // it per call), the lane leaves it to the proxy.
    if deployment
        .deployment
        .provider
        .json_schema_per_model(&chat.params)
    {
        return Err(LaneReason::Param);
    }
    // Declined or invalid: the proxy's own path answers (with LiteLLM's 400 if invalid).
    let plan = match parsed.stream {
        None => {
            let mut upstream =
                prepare(&deployment.deployment, &chat).map_err(|_| LaneReason::Param)?;
            upstream.timeout = deployment.timeout;
            Plan::Call(upstream)
        }
        Some(stream) => {
            let streams = deployment.streams.ok_or(LaneReason::Stream)?;
            let (options_value, options) = stream_options(&stream, streams.usage);
            let (mut upstream, transform) =
                prepare_stream(&deployment.deployment, &chat, options_value, options)
                    .map_err(|_| LaneReason::Stream)?;
            upstream.timeout = streams.timeout;
            Plan::Stream {
                upstream,
                transform,
                usage_chunk: stream.include_usage,
            }
        }
    };
    let head = Head::new(judged, parsed.model, &request.parts.headers, received);
    Ok((head, plan))
}

/// The `stream_options` the proxy would send, and the chunk rules they imply: unless the client
/// asked for usage, the proxy asks for it itself on models that take `stream_options`, and
/// drops the usage chunk that brings (`_stream_usage_tracking_updates` in LiteLLM).
fn stream_options(
    stream: &request::StreamRequest,
    usage: StreamUsage,
) -> (Option<serde_json::Value>, StreamOptions) {
    let asked = |include: bool| serde_json::json!({ "include_usage": include });
    let mut options = StreamOptions {
        given: stream.options_given,
        include_usage: stream.include_usage,
        strip_usage_artifacts: false,
        repeat_limit: REPEATED_CHUNK_LIMIT,
    };
    if stream.include_usage {
        return (Some(asked(true)), options);
    }
    if usage == StreamUsage::AlwaysAsked {
        options.given = true;
        options.include_usage = true;
        options.strip_usage_artifacts = true;
        return (Some(asked(true)), options);
    }
    let given = stream.options_given.then(|| {
        if stream.explicit_usage {
            asked(false)
        } else {
            serde_json::json!({})
        }
    });
    (given, options)
}

/// The id and time of an answer: the provider's (OpenAI), else new ones as LiteLLM makes them
/// (`chatcmpl-<uuid4>`, now), also put into the completion so the proxy's replay logs them.
fn mint_id(completion: &mut Completion) -> (String, i64) {
    let given = |name: &str| completion.body.get(name).cloned();
    if let (Some(serde_json::Value::String(id)), Some(created)) = (given("id"), given("created"))
        && let Some(created) = created.as_i64()
    {
        return (id, created);
    }
    let id = format!("chatcmpl-{}", uuid4());
    let created = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64);
    if let serde_json::Value::Object(body) = &mut completion.body {
        body.insert("id".into(), id.clone().into());
        body.insert("created".into(), created.into());
    }
    (id, created)
}
