//! What every request a route admits carries, from admission to its ticket and headers.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::gate::{Judged, RateAdmission, rate_reason, token_estimate};
use super::holds::Hold;
use super::ratelimit::counting::RateRefusal;
use super::ratelimit::parallel::{self, Slot};
use super::ratelimit::scopes;
use super::ratelimit::tokens;
use super::routing::PickCounted;
use super::slots::SlotHeld;
use super::state::Lane;
use super::table::LaneDeployment;
use super::tickets::{CallId, Issued, Outcome, RateCounted};
use crate::model::LaneReason;

pub(super) struct Head {
    pub model_group: String,
    pub key_hash: String,
    /// The key's spend before this request (`x-litellm-key-spend` adds its cost).
    pub key_spend: f64,
    /// The proxy's headers about the key's limits (`x-litellm-key-max-budget`...).
    pub key_headers: Vec<(String, String)>,
    /// The request's hold on its key's budget and rpm windows, handed to its ticket (the
    /// replay releases it).
    hold: Mutex<Option<Hold>>,
    /// What the key's rpm limits still need before the provider call, and then the limiter's
    /// headers for the answer.
    rates: RateAdmission,
    /// What the lane counted itself in the key's windows, gauges and token windows (in
    /// Redis): the replay's limiter leaves it counted, and its callbacks reconcile the tokens.
    counted: RateCounted,
    /// The request's slot in its key's parallel-request gauges, until the answer is complete
    /// (`release_slot`, or dropping the head: the client left, the stream ended).
    slot: Option<Slot>,
    pub deployment: Arc<LaneDeployment>,
    /// Its slot in the deployment's calls in flight, held around the provider call as the
    /// router holds it (`end_provider_call`, or dropping the head).
    deployment_slot: Mutex<Option<SlotHeld>>,
    /// Usage-based routing's count of the pick, given back unless a ticket carries it.
    pick_counted: Mutex<Option<PickCounted>>,
    /// The router's headers of its group's usage this minute, this answer counted (groups with
    /// tpm or rpm limits; set once the answer is known).
    pub group_usage: Vec<(String, String)>,
    pub call_id: CallId,
    pub received: Instant,
}

impl Head {
    pub(super) fn new(
        judged: Judged,
        model_group: String,
        headers: &http::HeaderMap,
        received: Instant,
    ) -> Head {
        let rate_limited = !matches!(judged.rates, RateAdmission::None);
        Head {
            model_group,
            key_hash: judged.key_hash,
            key_spend: judged.key_spend,
            key_headers: judged.key_headers,
            hold: Mutex::new(judged.hold),
            rates: judged.rates,
            counted: RateCounted {
                rate_limited,
                parallel_counts: judged.slot.as_ref().map(|(_, in_flight)| in_flight.clone()),
                ..RateCounted::default()
            },
            slot: judged.slot.map(|(slot, _)| slot),
            deployment: judged.deployment,
            deployment_slot: Mutex::new(judged.deployment_slot),
            pick_counted: Mutex::new(judged.pick_counted),
            group_usage: Vec::new(),
            call_id: CallId::of(headers),
            received,
        }
    }

    /// Counts the request in its key's rpm windows in Redis, where LiteLLM keeps them (see
    /// `ratelimit::scopes`), takes its slot in the key's parallel-request gauge (see
    /// `ratelimit::parallel`), then reserves the limiter's token estimate in its tpm windows
    /// (see `ratelimit::tokens`): LiteLLM's order. The reason when the proxy should decide
    /// instead, with whatever was counted given back.
    pub(super) async fn count_rates(&mut self, lane: &Lane, body: &[u8]) -> Result<(), LaneReason> {
        let RateAdmission::ToCount(rates) = &self.rates else {
            return Ok(());
        };
        let counting = lane
            .rate_counting()
            .ok_or(LaneReason::RateLimitUnverified)?;
        // The limiter's estimate first: a body it cannot be worked out for counts nothing.
        let estimate = token_estimate(rates, body)?;
        let counts = counting.count(&rates.scopes).await.map_err(rate_reason)?;
        let totals: Vec<u64> = counts.iter().map(|(_, count)| *count).collect();
        let mut headers = scopes::headers(&rates.scopes, &totals);
        if !rates.gauges.is_empty() {
            match parallel::acquire(&counting, &rates.gauges).await {
                Ok((slot, in_flight)) => {
                    headers.extend(parallel::headers(&rates.gauges, &in_flight));
                    self.slot = Some(slot);
                    self.counted.parallel_counts = Some(in_flight);
                }
                Err(refusal) => {
                    // The proxy's limiter counts the request's windows again.
                    counting.take_back(&rates.scopes).await;
                    return Err(match refusal {
                        RateRefusal::AtLimit => LaneReason::ParallelLimit,
                        unreachable => rate_reason(unreachable),
                    });
                }
            }
        }
        if let Some(estimate) = estimate {
            match tokens::reserve(&counting, &rates.tokens, estimate).await {
                Ok(reserved) => {
                    headers.extend(tokens::headers(&rates.tokens, &reserved.counts));
                    self.counted.tokens_reserved = Some(reserved);
                }
                Err(refusal) => {
                    counting.take_back(&rates.scopes).await;
                    self.release_slot().await;
                    return Err(rate_reason(refusal));
                }
            }
        }
        self.rates = RateAdmission::Held(headers);
        self.counted.rate_counts = Some(counts);
        Ok(())
    }

    /// Gives the request's parallel-request slot back, before its answer goes out (as LiteLLM's
    /// post-call hook does), so the client's next request finds it free.
    pub(super) async fn release_slot(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.release().await;
        }
    }

    /// The provider call returned (an answer read, a stream opened, or a failure): its slot in
    /// the deployment's calls in flight is free again.
    pub(super) fn end_provider_call(&self) {
        self.deployment_slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// The rate limiter's headers for the answer (none for a key without rate limits).
    pub(super) fn rate_headers(&self) -> &[(String, String)] {
        match &self.rates {
            RateAdmission::Held(headers) => headers,
            _ => &[],
        }
    }

    /// A ticket for the proxy: this request's outcome.
    pub(super) fn issue(&self, lane: &Lane, outcome: Outcome) -> Issued {
        let hold = self
            .hold
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map(Hold::keep);
        // The ticket's batch or replay counts the request for the router.
        if let Some(counted) = self
            .pick_counted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            counted.keep();
        }
        lane.tickets.issue(
            &self.deployment.id,
            self.call_id.clone(),
            outcome,
            hold,
            self.counted.clone(),
        )
    }
}

impl Drop for Head {
    /// A slot still held (a stream that ended, a client that left, an answer the proxy writes)
    /// is given back in the background.
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take().and_then(Slot::release_now)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(slot.release());
        }
    }
}
