//! The gate: which requests are the lane's to try (the route, the settings, headers that ask
//! the proxy for something, the key as the lane reads it), and after the body is read, the
//! checks every route shares (the group, the key's verdict, cooldowns, the backlog) and the
//! router's pick of a deployment.

use std::sync::Arc;
use std::time::SystemTime;

use http::Method;
use http::header::{AUTHORIZATION, CONTENT_LENGTH};
use sha2::{Digest, Sha256};

use super::holds::Hold;
use super::ratelimit::counting::RateRefusal;
use super::ratelimit::parallel::{self, Slot};
use super::ratelimit::scopes::{Counting, KeyRates};
use super::ratelimit::tokens::{self, EstimateRefusal};
use super::routing::PickCounted;
use super::slots::SlotHeld;
use super::state::Lane;
use super::table::{KeyRefusal, LaneDeployment};
use crate::model::LaneReason;

/// Routes the lane serves: the proxy's chat completion routes, and its Messages route.
const CHAT_PATHS: &[&str] = &["/chat/completions", "/v1/chat/completions"];
const MESSAGES_PATH: &str = "/v1/messages";
/// Larger bodies go to the proxy as they stream in (the lane reads a body whole).
const MAX_BODY_BYTES: u64 = 1 << 20;
/// Anthropic OAuth tokens, which the proxy passes on to the provider as its credential.
const ANTHROPIC_OAUTH_PREFIX: &str = "sk-ant-oat";
/// LiteLLM reads its key from these headers too; a request carrying one goes to the proxy.
const OTHER_KEY_HEADERS: &[&str] = &[
    "x-litellm-api-key",
    "api-key",
    "x-api-key",
    "x-goog-api-key",
    "ocp-apim-subscription-key",
];
/// Client headers the proxy passes on to Anthropic-family providers (its
/// `add_provider_specific_headers_to_request`), as `typesafe-danger-zone-*` ones to others.
pub(super) const PROVIDER_HEADERS: &[&str] = &["anthropic-version", "anthropic-beta"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    Chat,
    Messages,
}

impl Route {
    /// The route's name in the lane's served tallies (the proxy metrics' `route` label).
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Route::Chat => "chat",
            Route::Messages => "messages",
        }
    }
}

/// Why a body stays with the proxy (counted as `lane_body`).
#[derive(Debug, PartialEq, Eq)]
pub struct NotForLane(pub &'static str);

/// A POST to a route the lane serves, with a sized body the lane may read whole.
pub(super) fn lane_route(parts: &http::request::Parts) -> Option<Route> {
    let sized = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
        .is_some_and(|length| length <= MAX_BODY_BYTES);
    if parts.method != Method::POST || parts.uri.query().is_some() || !sized {
        return None;
    }
    let path = parts.uri.path();
    if CHAT_PATHS.contains(&path) {
        Some(Route::Chat)
    } else if path == MESSAGES_PATH {
        Some(Route::Messages)
    } else {
        None
    }
}

/// The checks every route shares before the body is read: the lane is on, no header asks the
/// proxy for something, and the key comes the way the lane reads it (its hash).
pub(super) fn gate(
    lane: &Lane,
    parts: &http::request::Parts,
    route: Route,
) -> Result<String, LaneReason> {
    if let Some(why) = &lane.table.settings().off {
        lane.count_off(why);
        return Err(LaneReason::Off);
    }
    if has_proxy_options(&parts.headers, route) {
        return Err(LaneReason::Header);
    }
    key_hash(&parts.headers, route).ok_or(LaneReason::Auth)
}

/// A request past every shared check: its key, the key's spend and limit headers, its hold on
/// the key's budget and rpm windows, and the deployment picked.
pub(super) struct Judged {
    pub key_hash: String,
    pub key_spend: f64,
    pub key_headers: Vec<(String, String)>,
    pub hold: Option<Hold>,
    /// The limiter's headers (worker counting), or the windows to count in Redis.
    pub rates: RateAdmission,
    /// The request's slot in the key's gauges the worker keeps, with each gauge's slots in
    /// flight with it.
    pub slot: Option<(Slot, Vec<u64>)>,
    pub deployment: Arc<LaneDeployment>,
    /// The request's slot in the deployment's calls in flight, if it has slots.
    pub deployment_slot: Option<SlotHeld>,
    /// Usage-based routing's count of the pick (its ticket keeps it).
    pub pick_counted: Option<PickCounted>,
}

/// What an admitted request's rpm limits still need.
pub(super) enum RateAdmission {
    None,
    /// Held in the worker: the limiter's headers are known.
    Held(Vec<(String, String)>),
    /// To count in Redis before the provider call (see `ratelimit::scopes`).
    ToCount(KeyRates),
}

/// The checks every route shares, after the request is read: the model group, the key's
/// verdict for it, cooldowns, the backlog, the key's budget (see `budget`) and rpm limits (see
/// `ratelimit`); then the deployment (picked as the router picks) and the key's spend.
pub(super) fn judge(
    lane: &Lane,
    key_hash: String,
    model_group: &str,
    body: &[u8],
) -> Result<Judged, LaneReason> {
    let group = lane.table.group(model_group).ok_or(LaneReason::Model)?;
    let readings = lane.admitting();
    let verdict = lane.table.verdict(&key_hash).ok_or(LaneReason::Auth)?;
    let now = SystemTime::now();
    verdict
        .admits(model_group, now)
        .map_err(|refusal| match refusal {
            KeyRefusal::Model => LaneReason::Access,
            KeyRefusal::Stale | KeyRefusal::Expired => LaneReason::Auth,
        })?;
    if lane.table.is_cooling(model_group) {
        return Err(LaneReason::Cooldown);
    }
    if lane.backlog_full() {
        return Err(LaneReason::Backlog);
    }
    let key_spend = verdict.current_spend();
    let mut claims = Vec::new();
    if let Some(budget) = &verdict.budget {
        let bound = group
            .reservation
            .and_then(|rates| rates.bound(body))
            .ok_or(LaneReason::Budget)?;
        claims.push(budget.claim(&key_hash, bound));
    }
    let budget_claims = claims.len();
    let mut window_claims = Vec::new();
    if let Some(rates) = &verdict.rates {
        if rates.counting == Counting::Redis && rates.spent() {
            return Err(LaneReason::RateLimit);
        }
        let tokens = match rates.counting {
            Counting::Worker => token_estimate(rates, body)?,
            Counting::Redis => None,
        };
        window_claims = rates
            .claims(now, tokens, &readings)
            .map_err(|_| LaneReason::RateLimit)?;
        claims.extend(window_claims.iter().map(|found| found.claim.clone()));
    }
    let (hold, held) = if claims.is_empty() {
        (None, Vec::new())
    } else {
        let (hold, held) = lane.holds.try_hold(&claims).map_err(|refused| {
            if refused < budget_claims {
                LaneReason::Budget
            } else {
                LaneReason::RateLimit
            }
        })?;
        (Some(hold), held)
    };
    let mut slot = None;
    let rates = match verdict.rates {
        None => RateAdmission::None,
        Some(rates) if rates.counting == Counting::Redis => RateAdmission::ToCount(rates),
        Some(rates) => {
            // Each window's count once the replays held so far (this one included) are counted.
            let counts: Vec<u64> = window_claims
                .iter()
                .zip(&held[budget_claims..])
                .map(|(found, held)| found.counted + *held as u64)
                .collect();
            if !rates.gauges.is_empty() {
                // A full gauge drops the request's holds with it.
                let held_slot = parallel::hold_in_worker(&lane.holds, &rates.gauges, &readings)
                    .map_err(|_| LaneReason::ParallelLimit)?;
                slot = Some(held_slot);
            }
            let in_flight = slot.as_ref().map_or(&[][..], |(_, in_flight)| in_flight);
            RateAdmission::Held(rates.worker_headers(&counts, in_flight))
        }
    };
    // The router's pick, then its slot: a pick with every slot in use goes to the proxy, whose
    // router refuses it (429) or, among several deployments, may pick another (deliberate
    // difference 15 with the lane on).
    let (deployment, pick_counted) = lane
        .table
        .pick(&group, body)
        .ok_or(LaneReason::RoutingLimit)?;
    let deployment_slot = match &deployment.slots {
        None => None,
        Some(slots) => Some(slots.hold().ok_or(LaneReason::DeploymentSlots)?),
    };
    Ok(Judged {
        key_spend,
        key_hash,
        key_headers: verdict.key_headers,
        hold,
        rates,
        slot,
        deployment,
        deployment_slot,
        pick_counted,
    })
}

/// The counters a request refused for `why` waits on before the proxy decides: those the lane
/// holds for the key's budget or rate-limit windows, until the replays holding them are counted.
pub(super) fn drain_counters(lane: &Lane, key_hash: &str, why: LaneReason) -> Vec<String> {
    match why {
        LaneReason::Budget => vec![key_hash.to_string()],
        LaneReason::RateLimit => lane
            .table
            .verdict(key_hash)
            .and_then(|verdict| verdict.rates)
            .map(|rates| rates.held_counters())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The limiter's token estimate for a request of a key with tpm limits (None: no tpm limits),
/// or the reason the proxy takes the request (see `ratelimit::tokens::estimate`).
pub(super) fn token_estimate(rates: &KeyRates, body: &[u8]) -> Result<Option<u64>, LaneReason> {
    let Some(min_limit) = rates.tokens.iter().map(|scope| scope.limit).min() else {
        return Ok(None);
    };
    tokens::estimate(body, min_limit)
        .map(Some)
        .map_err(|refusal| match refusal {
            EstimateRefusal::ImplicitCap => LaneReason::RateLimit,
            EstimateRefusal::Unusual => LaneReason::Body,
        })
}

/// A refusal of the windows' counts in Redis, as the reason the proxy serves the request.
pub(super) fn rate_reason(refusal: RateRefusal) -> LaneReason {
    match refusal {
        RateRefusal::AtLimit => LaneReason::RateLimit,
        RateRefusal::Unreachable => LaneReason::RateLimitUnverified,
    }
}

/// Headers through which a caller asks the proxy for something (sessions, tags, end users,
/// CORS, headers for the provider): their requests go to the proxy. Only the call id
/// (`x-litellm-call-id`) is taken, and on `/v1/messages` the `anthropic-*` headers (see
/// `messages::request::client_headers`).
pub(super) fn has_proxy_options(headers: &http::HeaderMap, route: Route) -> bool {
    headers.keys().any(|name| {
        let name = name.as_str();
        (name.starts_with("x-litellm-") && name != "x-litellm-call-id")
            || name.starts_with("litellm-")
            || name == "origin"
            || (PROVIDER_HEADERS.contains(&name) && route == Route::Chat)
            || name.starts_with("typesafe-danger-zone-")
    })
}

/// SHA-256 (hex) of the caller's key, as LiteLLM's `hash_token`: the bearer key, or on
/// `/v1/messages` an `x-api-key` sent alone; None when the request carries its key any other
/// way (or one the proxy passes on to the provider).
pub(super) fn key_hash(headers: &http::HeaderMap, route: Route) -> Option<String> {
    let api_key_taken = route == Route::Messages && !headers.contains_key(AUTHORIZATION);
    if OTHER_KEY_HEADERS
        .iter()
        .any(|name| headers.contains_key(*name) && !(api_key_taken && *name == "x-api-key"))
    {
        return None;
    }
    let (name, prefix) = if api_key_taken {
        ("x-api-key", "")
    } else {
        (AUTHORIZATION.as_str(), "Bearer ")
    };
    let mut values = headers.get_all(name).iter();
    let value = values.next()?.to_str().ok()?;
    if values.next().is_some() {
        return None;
    }
    let key = value.strip_prefix(prefix)?;
    if key.is_empty() || key.trim() != key || key.starts_with(ANTHROPIC_OAUTH_PREFIX) {
        return None;
    }
    let digest = Sha256::digest(key.as_bytes());
    Some(digest.iter().map(|byte| format!("{byte:02x}")).collect())
}
