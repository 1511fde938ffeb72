//! The Messages route (`/v1/messages`) for `anthropic/…` and Bedrock Invoke deployments: a
//! body the lane reads (`request`), sent as LiteLLM sends it with the headers LiteLLM chose for
//! such requests, answered as the proxy answers (`answer`; streams: `stream`, whose first event
//! `restamp` rewrites as the proxy does).

mod answer;
mod request;
mod restamp;
mod stream;

use std::time::Instant;

use super::gate::{Route, gate, judge};
use super::head::Head;
use super::headers::HeaderSet;
use super::served::{ClientRequest, Served};
use super::state::Serving;
use super::unary::{self, Written};
use crate::call::{Completion, ResponseShape};
use crate::http::UpstreamRequest;
use crate::model::LaneReason;
use crate::providers::messages::{MessagesRequest, prepare};

/// The `anthropic-version` the lane passes on (the only one there is).
const ANTHROPIC_VERSION: &str = "2023-06-01";

pub(super) async fn serve(request: ClientRequest<'_>) -> Served {
    let received = Instant::now();
    let (mut head, upstream, stream) = match admit(request, received) {
        Ok(admitted) => admitted,
        Err(why) => return Served::ToProxy(why),
    };
    if let Err(why) = head.count_rates(request.lane, request.body).await {
        return Served::ToProxy(why);
    }
    let serving = Serving::new(request.lane);
    if let Some(stream) = stream {
        return stream::serve(request, head, upstream, stream, serving).await;
    }
    let pricing = head.deployment.pricing;
    let model_group = head.model_group.clone();
    // An answer the lane does not write, or one whose cost it cannot work out: the proxy's.
    let write = |completion: &mut Completion| {
        let (body, usage) = answer::answer_body(completion.raw.as_deref()?, &model_group)?;
        let cost = usage.cost(pricing?)?;
        Some(Written {
            body,
            cost: Some(cost),
            // As the router counts an answer without a total (`response_total_token_count`).
            total_tokens: usage.input + usage.output,
        })
    };
    let (shape, set) = (ResponseShape::Raw, HeaderSet::Messages);
    unary::serve(request, head, upstream, shape, set, serving, write).await
}

/// Everything the lane checks before any I/O: the request, its upstream request, and for a
/// stream how the lane writes it; the reason (counted) when the proxy should serve.
fn admit(
    request: ClientRequest<'_>,
    received: Instant,
) -> Result<(Head, UpstreamRequest, Option<stream::MessagesStream>), LaneReason> {
    let lane = request.lane;
    let key_hash = gate(lane, request.parts, Route::Messages)?;
    let parsed = request::parse(request.body).map_err(|_| LaneReason::Body)?;
    if parsed.end_user && lane.table.settings().end_users {
        return Err(LaneReason::EndUser);
    }
    let client_headers =
        request::client_headers(&request.parts.headers).ok_or(LaneReason::Header)?;
    let judged = judge(lane, key_hash, &parsed.model, request.body)?;
    let deployment = &judged.deployment;
    let route = deployment.messages.as_ref().ok_or(LaneReason::Model)?;
    let (timeout, held) = match (parsed.stream, route.streams) {
        (false, _) => (route.timeout, false),
        (true, Some(streams)) => (streams.timeout, streams.held),
        (true, None) => return Err(LaneReason::Stream),
    };
    // The client's `anthropic-*` headers reach LiteLLM's header merge with the small params.
    let version = client_headers.get("anthropic-version");
    let usual = parsed.small_params.is_none()
        && !client_headers.contains_key("anthropic-beta")
        && version.is_none_or(|version| version == ANTHROPIC_VERSION);
    let headers = if usual && version.is_some() {
        route.versioned_headers.clone()
    } else if usual {
        route.headers.clone()
    } else {
        let key = request::decision_key(parsed.small_params.as_deref(), &client_headers);
        let learned = lane.table.messages_headers(&deployment.id, &key);
        learned.ok_or(LaneReason::Unseen)?.as_ref().clone()
    };
    let messages_request = MessagesRequest {
        fields: parsed.fields,
        stream: parsed.stream,
        headers,
    };
    let prepared = prepare(&route.deployment, messages_request).map_err(|_| LaneReason::Param)?;
    let mut upstream = prepared.upstream;
    upstream.timeout = timeout;
    let stream = parsed.stream.then(|| stream::MessagesStream {
        api: prepared.api,
        held,
        api_base: route.api_base.clone(),
    });
    let head = Head::new(judged, parsed.model, &request.parts.headers, received);
    Ok((head, upstream, stream))
}
