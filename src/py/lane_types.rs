//! What Python hands the lane (a deployment of a group, its prices, streams and `/v1/messages`
//! calls) and what the lane hands back (a served request to replay, a claimed outcome, a cost):
//! frozen classes with named fields, checked when they are built.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use serde_json::{Map, Value};

use super::deployment::Deployment;
use super::errors::InvalidRequestError;
use super::headers::header_list;
use crate::lane::{self, CachePrices, Pricing, StreamUsage};

fn positive_seconds(seconds: f64) -> PyResult<Duration> {
    if seconds > 0.0 && seconds.is_finite() {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(InvalidRequestError::new_err("timeout must be positive"))
    }
}

/// Anthropic's prompt-cache prices per token: reads, and writes that live 5 minutes or 1 hour.
#[pyclass(frozen, get_all, module = "litellm_fastpath._native")]
pub struct LaneCachePrices {
    read: f64,
    write_5m: f64,
    write_1h: f64,
}

#[pymethods]
impl LaneCachePrices {
    #[new]
    #[pyo3(signature = (*, read, write_5m, write_1h))]
    fn new(read: f64, write_5m: f64, write_1h: f64) -> Self {
        LaneCachePrices {
            read,
            write_5m,
            write_1h,
        }
    }
}

/// LiteLLM's prices per token where its cost is linear in the token counts: input, output,
/// OpenAI's cached input and Anthropic's prompt cache (None: answers with those go to the
/// proxy).
#[pyclass(frozen, get_all, module = "litellm_fastpath._native")]
pub struct LanePricing {
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    anthropic_cache: Option<Py<LaneCachePrices>>,
}

#[pymethods]
impl LanePricing {
    #[new]
    #[pyo3(signature = (*, input, output, cache_read=None, anthropic_cache=None))]
    fn new(
        input: f64,
        output: f64,
        cache_read: Option<f64>,
        anthropic_cache: Option<Py<LaneCachePrices>>,
    ) -> Self {
        LanePricing {
            input,
            output,
            cache_read,
            anthropic_cache,
        }
    }
}

impl LanePricing {
    pub(crate) fn pricing(&self) -> Pricing {
        Pricing {
            input_per_token: self.input,
            output_per_token: self.output,
            cache_read_per_token: self.cache_read,
            anthropic_cache: self.anthropic_cache.as_ref().map(|prices| {
                let prices = prices.get();
                CachePrices {
                    read: prices.read,
                    write_5m: prices.write_5m,
                    write_1h: prices.write_1h,
                }
            }),
        }
    }
}

/// How the lane streams from a deployment: the router's timeout for its streams, and whether
/// the proxy asks the model for usage on every stream (it then adds `include_usage` and drops
/// the usage chunk the client did not ask for).
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct LaneStreams {
    inner: lane::LaneStreams,
}

#[pymethods]
impl LaneStreams {
    #[new]
    #[pyo3(signature = (*, timeout, asks_usage))]
    fn new(timeout: f64, asks_usage: bool) -> PyResult<Self> {
        let usage = if asks_usage {
            StreamUsage::AlwaysAsked
        } else {
            StreamUsage::AsAsked
        };
        Ok(LaneStreams {
            inner: lane::LaneStreams {
                usage,
                timeout: positive_seconds(timeout)?,
            },
        })
    }
}

/// How the lane streams a deployment's `/v1/messages` calls: their timeout, and whether the
/// router holds their frames until the first content (a retry could take them over).
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct LaneMessagesStreams {
    inner: lane::MessagesStreams,
}

#[pymethods]
impl LaneMessagesStreams {
    #[new]
    #[pyo3(signature = (*, timeout, held))]
    fn new(timeout: f64, held: bool) -> PyResult<Self> {
        Ok(LaneMessagesStreams {
            inner: lane::MessagesStreams {
                timeout: positive_seconds(timeout)?,
                held,
            },
        })
    }
}

/// A deployment's `/v1/messages` calls as LiteLLM makes them: the deployment, the headers it
/// sends besides the credential (and the same when the client sent `anthropic-version`), the
/// timeout, its streams (None: they go to the proxy), and the API base the proxy names on
/// streams.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct LaneMessages {
    inner: lane::LaneMessages,
}

#[pymethods]
impl LaneMessages {
    #[new]
    #[pyo3(signature = (
        deployment, *, headers, versioned_headers, timeout, streams=None, api_base=None,
    ))]
    fn new(
        deployment: &Deployment,
        headers: Vec<(String, String)>,
        versioned_headers: Vec<(String, String)>,
        timeout: f64,
        streams: Option<&LaneMessagesStreams>,
        api_base: Option<String>,
    ) -> PyResult<Self> {
        Ok(LaneMessages {
            inner: lane::LaneMessages {
                deployment: Arc::clone(&deployment.inner),
                headers: header_list(headers)?,
                versioned_headers: header_list(versioned_headers)?,
                timeout: positive_seconds(timeout)?,
                streams: streams.map(|streams| streams.inner),
                api_base,
            },
        })
    }
}

/// One deployment of a group the lane serves: the fast path's deployment, the router's id for
/// it, the params from its `litellm_params`, the router's timeout, the headers the proxy sends
/// for it, its prices, its streams and `/v1/messages` calls (None: the proxy serves those), and
/// its simple-shuffle weight (None on any deployment of a group: uniform).
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct LaneDeployment {
    pub(crate) inner: Arc<lane::LaneDeployment>,
    pub(crate) weight: Option<f64>,
}

#[pymethods]
impl LaneDeployment {
    #[new]
    #[pyo3(signature = (
        deployment, *, id, params, timeout, headers, pricing=None, streams=None, messages=None,
        weight=None, slots=None, usage=None, routing=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        deployment: &Deployment,
        id: String,
        params: &Bound<'_, PyDict>,
        timeout: f64,
        headers: Vec<(String, String)>,
        pricing: Option<&LanePricing>,
        streams: Option<&LaneStreams>,
        messages: Option<&LaneMessages>,
        weight: Option<f64>,
        slots: Option<&DeploymentSlots>,
        usage: Option<&GroupUsage>,
        routing: Option<&DeploymentUsage>,
    ) -> PyResult<Self> {
        let params: Map<String, Value> = pythonize::depythonize(params.as_any())
            .map_err(|err| InvalidRequestError::new_err(format!("params: {err}")))?;
        let inner = lane::LaneDeployment {
            id,
            deployment: Arc::clone(&deployment.inner),
            params,
            timeout: positive_seconds(timeout)?,
            headers,
            pricing: pricing.map(LanePricing::pricing),
            streams: streams.map(|streams| streams.inner),
            messages: messages.map(|messages| messages.inner.clone()),
            slots: slots.map(|slots| Arc::clone(&slots.inner)),
            usage: usage.map(|usage| Arc::clone(&usage.inner)),
            routing: routing.map(|routing| Arc::clone(&routing.inner)),
        };
        Ok(LaneDeployment {
            inner: Arc::new(inner),
            weight,
        })
    }
}

/// A deployment's slots for calls in flight (see `lane::slots`): one count for the lane and
/// for LiteLLM's router, which takes and gives back its slots through this object.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct DeploymentSlots {
    inner: Arc<lane::slots::DeploymentSlots>,
}

#[pymethods]
impl DeploymentSlots {
    #[new]
    fn new(limit: u64) -> PyResult<Self> {
        if limit == 0 {
            return Err(InvalidRequestError::new_err("limit must be positive"));
        }
        Ok(DeploymentSlots {
            inner: lane::slots::DeploymentSlots::new(limit),
        })
    }

    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit()
    }

    #[getter]
    fn in_flight(&self) -> u64 {
        self.inner.in_flight()
    }

    /// Takes a slot if one is free (False: every slot is in use).
    fn take(&self) -> bool {
        self.inner.try_take()
    }

    /// Gives back a slot taken with `take`.
    fn give_back(&self) {
        self.inner.give_back();
    }
}

/// A model group's usage this minute for the router's headers (see `lane::usage`): the Python
/// layer hands it the router's counters as it reads them, and the requests its replays count.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct GroupUsage {
    inner: Arc<lane::usage::GroupUsage>,
}

#[pymethods]
impl GroupUsage {
    #[new]
    #[pyo3(signature = (*, rpm_limit, tpm_limit))]
    fn new(rpm_limit: Option<i64>, tpm_limit: Option<i64>) -> Self {
        GroupUsage {
            inner: Arc::new(lane::usage::GroupUsage::new(rpm_limit, tpm_limit)),
        }
    }

    /// The router's counters for the group this minute (`minute`: minutes since the epoch).
    fn read(&self, minute: u64, rpm: i64, tpm: i64) {
        self.inner.read(minute, rpm, tpm);
    }

    /// The router counted requests and tokens the lane served (a replay's).
    fn counted(&self, rpm: i64, tokens: i64) {
        self.inner.counted(rpm, tokens);
    }
}

/// A deployment's usage this minute for usage-based routing's pick (see `lane::routing`): the
/// Python layer hands it the router's counters as it reads them, and what the router counted
/// of the lane's requests.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct DeploymentUsage {
    inner: Arc<lane::routing::DeploymentUsage>,
}

#[pymethods]
impl DeploymentUsage {
    #[new]
    #[pyo3(signature = (*, tpm_limit, rpm_limit))]
    fn new(tpm_limit: Option<i64>, rpm_limit: Option<i64>) -> Self {
        DeploymentUsage {
            inner: Arc::new(lane::routing::DeploymentUsage::new(tpm_limit, rpm_limit)),
        }
    }

    /// The router's counters for the deployment this minute (`minute`: minutes since the epoch).
    fn read(&self, minute: u64, tpm: i64, rpm: i64) {
        self.inner.read(minute, tpm, rpm);
    }

    /// The router counted requests and tokens the lane picked or answered.
    fn counted(&self, rpm: i64, tokens: i64) {
        self.inner.counted(rpm, tokens);
    }

    /// Whether the lane picked or answered requests the router has not counted yet.
    fn pending(&self) -> bool {
        self.inner.pending()
    }
}

/// A request the lane served, for the proxy to replay in-process: its path, headers and body
/// as the client sent them (plus the call id the lane chose), the client's and the server's
/// address as `(host, port)`, and its ticket.
#[pyclass(frozen, get_all, module = "litellm_fastpath._native")]
pub struct LaneReplay {
    path: String,
    headers: Vec<(String, String)>,
    body: Py<PyBytes>,
    client: Option<(String, u16)>,
    server: Option<(String, u16)>,
    ticket: String,
}

impl LaneReplay {
    pub(crate) fn new(py: Python<'_>, replay: lane::Replay) -> Self {
        let address = |address: Option<std::net::SocketAddr>| {
            address.map(|address| (address.ip().to_string(), address.port()))
        };
        LaneReplay {
            path: replay.path,
            headers: replay.headers,
            body: PyBytes::new(py, &replay.body).unbind(),
            client: address(replay.client),
            server: address(replay.server),
            ticket: replay.ticket,
        }
    }
}

/// The outcome behind a ticket: the deployment the lane called (the replay's router must pick
/// it), whether the lane chose the call id, and the call that yields the provider's answer or
/// error without calling it again (a `PreparedCall`, or for a stream a `PreparedStream`), and
/// its hold on the key's budget and rpm windows (`lane_set_key(release=...)` releases it),
/// whether the key has rate limits the lane applied (the replay's limiter counts it), and
/// each rpm window's start and count with it where the lane counted it in LiteLLM's windows itself (in
/// Redis; None otherwise), and each parallel-request gauge's slots in flight with it where the
/// lane took its slot, and the tokens it reserved in the key's tpm windows with each window's
/// count; and a whole chat answer's `usage` object as JSON (None for a stream, a
/// `/v1/messages` answer or an answer without one); and whether a client waits for the end of
/// the proxy's answer to its replay (a stream's usage chunk or error frame, `lane_stream_tail`);
/// and whether a stream failed mid-way (its failure is the proxy's to handle and log).
#[pyclass(frozen, get_all, module = "litellm_fastpath._native")]
pub struct LaneClaim {
    pub(crate) deployment_id: String,
    pub(crate) call_id_added: bool,
    pub(crate) call: Py<PyAny>,
    pub(crate) hold: Option<u64>,
    pub(crate) rate_limited: bool,
    pub(crate) rate_counts: Option<Vec<(u64, u64)>>,
    pub(crate) parallel_counts: Option<Vec<u64>>,
    pub(crate) tokens_reserved: Option<(u64, Vec<u64>)>,
    pub(crate) usage: Option<String>,
    pub(crate) awaits_tail: bool,
    pub(crate) stream_failed: bool,
}

/// The lane's cost of an answer, split as the proxy's headers split it.
#[pyclass(frozen, get_all, module = "litellm_fastpath._native")]
pub struct LaneCost {
    total: f64,
    input: f64,
    output: f64,
    cache_read: f64,
    cache_creation: f64,
}

impl From<lane::cost::Cost> for LaneCost {
    fn from(cost: lane::cost::Cost) -> Self {
        LaneCost {
            total: cost.total,
            input: cost.input,
            output: cost.output,
            cache_read: cost.cache_read,
            cache_creation: cost.cache_creation,
        }
    }
}
