//! What every request a route admits carries, from admission to its ticket and headers.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::budget::Hold;
use super::gate::Judged;
use super::state::Lane;
use super::table::LaneDeployment;
use super::tickets::{CallId, Issued, Outcome};

pub(super) struct Head {
    pub model_group: String,
    pub key_hash: String,
    /// The key's spend before this request (`x-litellm-key-spend` adds its cost).
    pub key_spend: f64,
    /// `x-litellm-key-max-budget`, for a key with a budget.
    pub max_budget_header: Option<String>,
    /// The request's hold on its key's budget, handed to its ticket (the replay releases it).
    hold: Mutex<Option<Hold>>,
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
            max_budget_header: judged.max_budget_header,
            hold: Mutex::new(judged.hold),
            deployment: judged.deployment,
            call_id: CallId::of(headers),
            received,
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
        lane.tickets
            .issue(&self.deployment.id, self.call_id.clone(), outcome, hold)
    }
}
