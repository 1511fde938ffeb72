//! What the lane knows, all of it handed over by the Python layer from LiteLLM's own state: the
//! model groups it serves, the API keys LiteLLM has already judged, and the headers the proxy
//! adds. Requests only read it; Python replaces pieces of it when LiteLLM's state changes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::budget::{KeyBudget, ReservationRates};
use super::cost::Pricing;
use super::ratelimit::scopes::KeyRates;
use super::routing::{self, DeploymentUsage, PickCounted};
use super::shuffle::Shuffle;
use super::slots::DeploymentSlots;
use super::usage::GroupUsage;
use crate::providers::Deployment;

/// One deployment of a lane group, with what the proxy says about it in its headers.
#[derive(Debug)]
pub struct LaneDeployment {
    /// The router's id for it (`x-litellm-model-id`).
    pub id: String,
    pub deployment: Arc<Deployment>,
    /// Request params from the deployment's `litellm_params` (a request's own params win).
    pub params: Map<String, Value>,
    pub timeout: Duration,
    /// Headers the proxy sends for every answer of this deployment (model id, name, API base).
    pub headers: Vec<(String, String)>,
    /// LiteLLM's price per prompt and per completion token, when its cost is linear in them.
    pub pricing: Option<Pricing>,
    /// How the lane streams from it (None: its streams go to the proxy).
    pub streams: Option<LaneStreams>,
    /// How the lane calls it for `/v1/messages` (None: those requests go to the proxy).
    pub messages: Option<LaneMessages>,
    /// Its slots for calls in flight, shared with LiteLLM's router (None: it has none).
    pub slots: Option<Arc<DeploymentSlots>>,
    /// Its group's usage this minute, where the router's answers carry it (tpm or rpm limits).
    pub usage: Option<Arc<GroupUsage>>,
    /// Its usage this minute for usage-based routing's pick (None: the router shuffles).
    pub routing: Option<Arc<DeploymentUsage>>,
}

/// A deployment's `/v1/messages` calls as LiteLLM makes them, worked out by the Python layer
/// from LiteLLM's own functions for requests without thinking, sampling params or betas.
#[derive(Clone, Debug)]
pub struct LaneMessages {
    pub deployment: Arc<Deployment>,
    /// The headers LiteLLM sends besides the credential (`anthropic-version`, betas).
    pub headers: MessagesHeaders,
    /// The same when the client sent `anthropic-version: 2023-06-01` (the proxy passes it on).
    pub versioned_headers: MessagesHeaders,
    pub timeout: Duration,
    /// Its streams; None when they go to the proxy.
    pub streams: Option<MessagesStreams>,
    /// The API base the proxy names on its streams (`x-litellm-model-api-base`), if any.
    pub api_base: Option<String>,
}

#[derive(Clone, Copy, Debug)]
pub struct MessagesStreams {
    pub timeout: Duration,
    /// The router holds their frames until the first content (a retry could take them over).
    pub held: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct LaneStreams {
    /// Whether the proxy asks this model for usage on every stream (it then adds
    /// `include_usage` and drops the usage chunk the client did not ask for).
    pub usage: StreamUsage,
    /// The router's timeout for its streams (`stream_timeout`, else the other calls').
    pub timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamUsage {
    AsAsked,
    AlwaysAsked,
}

/// A model group the lane serves: every deployment in it is one the lane can call.
#[derive(Debug)]
pub struct Group {
    pub deployments: Vec<Arc<LaneDeployment>>,
    /// LiteLLM's simple-shuffle weights, one per deployment (empty: uniform).
    pub weights: Vec<f64>,
    /// The prices LiteLLM's budget reservation reads for the group (None: requests of keys with
    /// a budget go to the proxy).
    pub reservation: Option<ReservationRates>,
}

/// What LiteLLM decided about an API key, valid until `valid_until` (LiteLLM's key cache TTL).
#[derive(Clone, Debug)]
pub struct Verdict {
    /// Groups the key may call (None: every group).
    pub groups: Option<HashSet<String>>,
    /// The key's own expiry (`expires`), if any.
    pub expires_at: Option<SystemTime>,
    pub valid_until: SystemTime,
    /// The key's spend as LiteLLM last reported it (`x-litellm-key-spend` adds each answer's
    /// cost to it, as the proxy does).
    pub spend: f64,
    /// What the lane served on the key since (its replays bring LiteLLM's figure up to date).
    pub spend_since: f64,
    /// The key's budgets (its own, its user's, team's, team membership's), if any.
    pub budget: Option<KeyBudget>,
    /// The key's rpm limits (its own, its user's, team's, team membership's), if any.
    pub rates: Option<KeyRates>,
    /// The proxy's headers about the key's limits (`x-litellm-key-rpm-limit`,
    /// `x-litellm-key-max-budget`), as it writes them.
    pub key_headers: Vec<(String, String)>,
}

impl Verdict {
    pub fn admits(&self, group: &str, now: SystemTime) -> Result<(), KeyRefusal> {
        if now >= self.valid_until {
            return Err(KeyRefusal::Stale);
        }
        if self.expires_at.is_some_and(|expires| now >= expires) {
            return Err(KeyRefusal::Expired);
        }
        if let Some(groups) = &self.groups
            && !groups.contains(group)
        {
            return Err(KeyRefusal::Model);
        }
        Ok(())
    }

    /// The key's spend with what the lane served since LiteLLM last reported it.
    pub fn current_spend(&self) -> f64 {
        self.spend + self.spend_since
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRefusal {
    Stale,
    Expired,
    Model,
}

/// The proxy-wide part: headers every answer carries.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Added to every answer (version, the app's security and CORS headers, the fast path's).
    pub headers: Vec<(String, String)>,
    /// Provider headers LiteLLM passes on under their own name (OpenAI's rate-limit headers);
    /// every provider header is passed on as `llm_provider-<name>` too.
    pub openai_headers: HashSet<String>,
    /// Why no request may take the lane (the setting that turns it off, never its value); None
    /// when requests may take it.
    pub off: Option<String>,
    /// LiteLLM keeps end users (the proxy has a database): requests naming one go to the proxy.
    pub end_users: bool,
}

#[derive(Default)]
pub struct Table {
    groups: RwLock<Arc<HashMap<String, Arc<Group>>>>,
    cooling: RwLock<Arc<HashSet<String>>>,
    keys: RwLock<HashMap<String, Verdict>>,
    /// `/v1/messages` headers LiteLLM chose for a deployment (by id) and a request's thinking,
    /// sampling params and client headers (by the Messages route's `decision_key`): what the fast path
    /// learned on the proxy's path, for the lane to reuse.
    messages_headers: RwLock<HashMap<(String, String), Arc<MessagesHeaders>>>,
    settings: RwLock<Arc<Settings>>,
    shuffle: Shuffle,
}

impl Table {
    pub fn set_groups(&self, groups: HashMap<String, Arc<Group>>) {
        *write(&self.groups) = Arc::new(groups);
        write(&self.messages_headers).clear();
    }

    /// What LiteLLM sends for a `/v1/messages` request of this kind to this deployment.
    pub fn learn_messages_headers(
        &self,
        deployment_id: String,
        key: String,
        headers: MessagesHeaders,
    ) {
        let mut learned = write(&self.messages_headers);
        // Bounded: a full table starts over (the proxy's path teaches it again).
        if learned.len() >= MAX_MESSAGES_DECISIONS {
            learned.clear();
        }
        learned.insert((deployment_id, key), Arc::new(headers));
    }

    pub fn messages_headers(&self, deployment_id: &str, key: &str) -> Option<Arc<MessagesHeaders>> {
        read(&self.messages_headers)
            .get(&(deployment_id.to_string(), key.to_string()))
            .cloned()
    }

    pub fn set_cooling(&self, groups: HashSet<String>) {
        *write(&self.cooling) = Arc::new(groups);
    }

    pub fn set_settings(&self, settings: Settings) {
        *write(&self.settings) = Arc::new(settings);
    }

    pub fn settings(&self) -> Arc<Settings> {
        Arc::clone(&read(&self.settings))
    }

    pub fn group(&self, name: &str) -> Option<Arc<Group>> {
        read(&self.groups).get(name).cloned()
    }

    pub fn is_cooling(&self, name: &str) -> bool {
        read(&self.cooling).contains(name)
    }

    /// Keys are stored by their SHA-256 (hex), as LiteLLM stores them.
    pub fn set_key(&self, hash: String, verdict: Verdict) {
        let mut keys = write(&self.keys);
        // Bounded: stale verdicts go first, and a full table starts over (LiteLLM re-judges).
        if keys.len() >= MAX_KEYS {
            let now = SystemTime::now();
            keys.retain(|_, verdict| verdict.valid_until > now);
            if keys.len() >= MAX_KEYS {
                keys.clear();
            }
        }
        keys.insert(hash, verdict);
    }

    /// Forgets the verdicts that list the groups a key may call (worked out against the groups
    /// served then); verdicts for keys that may call every group stay.
    pub fn forget_group_lists(&self) {
        write(&self.keys).retain(|_, verdict| verdict.groups.is_none());
    }

    pub fn verdict(&self, hash: &str) -> Option<Verdict> {
        read(&self.keys).get(hash).cloned()
    }

    /// Adds an answer's cost to the key's spend, until LiteLLM reports the key again.
    pub fn add_spend(&self, hash: &str, cost: f64) {
        if let Some(verdict) = write(&self.keys).get_mut(hash) {
            verdict.spend_since += cost;
        }
    }

    /// The router's pick: by usage (see `routing`; None where the router decides) when the
    /// group's deployments carry it, else its simple shuffle (weighted when weights are set).
    pub fn pick(
        &self,
        group: &Group,
        body: &[u8],
    ) -> Option<(Arc<LaneDeployment>, Option<PickCounted>)> {
        let usages: Option<Vec<&Arc<DeploymentUsage>>> = group
            .deployments
            .iter()
            .map(|deployment| deployment.routing.as_ref())
            .collect();
        match usages {
            Some(usages) if !usages.is_empty() => {
                let (index, counted) = routing::pick(&usages, body, &self.shuffle)?;
                Some((Arc::clone(&group.deployments[index]), Some(counted)))
            }
            _ => {
                let index = self.shuffle.pick(group.deployments.len(), &group.weights);
                Some((Arc::clone(&group.deployments[index]), None))
            }
        }
    }

    pub fn new() -> Table {
        Table::default()
    }
}

const MAX_KEYS: usize = 100_000;
const MAX_MESSAGES_DECISIONS: usize = 4096;

/// The headers LiteLLM sends on a `/v1/messages` call besides the credential.
pub type MessagesHeaders = Vec<(HeaderName, HeaderValue)>;

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
