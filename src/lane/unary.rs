//! The serve path every route shares for an answer that is not a stream: call the provider
//! once (while watching for the client leaving), write the proxy's answer when the route can,
//! and queue the replay; otherwise the proxy answers with the call's outcome.

use std::time::Instant;

use bytes::Bytes;

use super::cost::Cost;
use super::gate::Route;
use super::head::Head;
use super::headers::{CostHeaders, HeaderSet, answer_headers};
use super::response::{answer, full};
use super::served::{ClientRequest, Served};
use super::state::Serving;
use super::tickets::Outcome;
use crate::call::{self, Completion, ResponseShape};
use crate::http::UpstreamRequest;

/// The proxy's body for an answer, and what it cost (None: no linear price, no cost headers).
pub(super) struct Written {
    pub body: Vec<u8>,
    pub cost: Option<Cost>,
    /// The answer's total tokens, as the router counts them (chat).
    pub total_tokens: u64,
}

/// `write` turns the provider's answer into the proxy's body, or says None: the proxy answers.
pub(super) async fn serve(
    request: ClientRequest<'_>,
    mut head: Head,
    upstream: UpstreamRequest,
    shape: ResponseShape,
    set: HeaderSet<'_>,
    _serving: Serving,
    write: impl FnOnce(&mut Completion) -> Option<Written>,
) -> Served {
    let lane = request.lane;
    let called = Instant::now();
    let outcome = tokio::select! {
        outcome = call::run(&lane.engine.transport, vec![upstream], &shape) => outcome,
        // Dropping the call closes the provider connection; nobody is left to answer.
        () = request.connection.closed() => return Served::Gone,
    };
    let upstream = called.elapsed();
    head.end_provider_call();
    let upstream_ms = upstream.as_secs_f64() * 1000.0;
    let mut completion = match outcome {
        Ok(completion) => completion,
        Err(err) => return request.with_ticket(&head, Err(err)),
    };
    // An answer of a shape the lane does not write, or whose cost it cannot work out.
    let Some(written) = write(&mut completion) else {
        return request.with_ticket(&head, Ok(completion));
    };
    let cost = CostHeaders::from(written.cost);
    let total_tokens = i64::try_from(written.total_tokens).unwrap_or(i64::MAX);
    if let Some(usage) = &head.deployment.usage {
        head.group_usage = usage.serve(total_tokens);
    }
    // Usage-based routing's pick reads a chat answer's tokens (LiteLLM counts a `/v1/messages`
    // answer's under no model, where its pick never reads them).
    if let Some(routing) = &head.deployment.routing
        && request.route == Route::Chat
    {
        routing.answered(total_tokens);
    }
    let headers = answer_headers(
        &lane.table.settings(),
        &head,
        set,
        cost,
        upstream_ms,
        &completion.headers,
    );
    if let Some(cost) = written.cost {
        lane.table.add_spend(&head.key_hash, cost.total);
    }
    let response = answer(full(Bytes::from(written.body)), headers);
    head.release_slot().await;
    let issued = head.issue(lane, Outcome::Call(Ok(completion)));
    lane.replays
        .enqueue(request.pending_replay(), issued, false);
    lane.count_served(request.route.as_str(), &head.model_group, upstream);
    Served::Answer(response)
}
