//! What every request a route admits carries, from admission to its ticket and headers.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::gate::{Judged, RateAdmission, rate_reason};
use super::holds::Hold;
use super::ratelimit::scopes;
use super::state::Lane;
use super::table::LaneDeployment;
use super::tickets::{CallId, Issued, Outcome};
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
    /// Each rpm window's start and count with the request, where the lane counted it itself
    /// (in Redis): the replay's limiter leaves it counted.
    rate_counts: Option<Vec<(u64, u64)>>,
    pub deployment: Arc<LaneDeployment>,
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
        Head {
            model_group,
            key_hash: judged.key_hash,
            key_spend: judged.key_spend,
            key_headers: judged.key_headers,
            hold: Mutex::new(judged.hold),
            rates: judged.rates,
            rate_counts: None,
            deployment: judged.deployment,
            call_id: CallId::of(headers),
            received,
        }
    }

    /// Counts the request in its key's rpm windows in Redis, where LiteLLM keeps them (see
    /// `ratelimit::scopes`); the reason when the proxy should decide instead.
    pub(super) async fn count_rates(&mut self, lane: &Lane) -> Result<(), LaneReason> {
        let RateAdmission::ToCount(rates) = &self.rates else {
            return Ok(());
        };
        let counting = lane
            .rate_counting()
            .ok_or(LaneReason::RateLimitUnverified)?;
        let counts = counting.count(&rates.scopes).await.map_err(rate_reason)?;
        let totals: Vec<u64> = counts.iter().map(|(_, count)| *count).collect();
        self.rates = RateAdmission::Held(scopes::headers(&rates.scopes, &totals));
        self.rate_counts = Some(counts);
        Ok(())
    }

    /// The rate limiter's headers for the answer (none for a key without rpm limits).
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
        lane.tickets.issue(
            &self.deployment.id,
            self.call_id.clone(),
            outcome,
            hold,
            self.rate_counts.clone(),
        )
    }
}
