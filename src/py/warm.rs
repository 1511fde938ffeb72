//! The warmer's binding: which deployments' upstream connections to keep warm, and its counts.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::deployment::{Deployment, timeout_from_secs};
use super::errors::transport_error_to_py;
use crate::http::warm::{MAX_CONNECTIONS, WarmPlan, WarmSend, WarmTarget, origin_of};
use crate::model::chat::{ChatRequest, Content, Message, Role};
use crate::runtime;

/// Keeps `connections` connections warm to each deployment's upstream origin for calls with
/// `timeout_s` (the call's timeout picks the pooled client), one round of warming requests
/// every `interval_s`; replaces the previous set (an empty list stops warming). Deployments
/// whose URL cannot be built are skipped. Returns how many (origin, timeout) targets are warmed.
#[pyfunction]
pub fn warm_upstreams(
    py: Python<'_>,
    targets: Vec<(Py<Deployment>, f64, usize)>,
    interval_s: f64,
) -> PyResult<usize> {
    let interval = timeout_from_secs(interval_s)?;
    // Any request builds the deployment's URL; only its origin is kept, nothing else of it.
    let probe = ChatRequest {
        messages: vec![Message::new(Role::User, Content::Text("x".into()))],
        params: serde_json::Map::new(),
    };
    let mut plans: HashMap<WarmTarget, WarmPlan> = HashMap::new();
    for (deployment, timeout_s, connections) in targets {
        let deployment = &deployment.get().inner;
        let Ok(request) = (deployment.provider.build_request)(deployment, &probe) else {
            continue;
        };
        let Some(origin) = origin_of(&request.url) else {
            continue;
        };
        let target = WarmTarget {
            origin,
            timeout: timeout_from_secs(timeout_s)?,
        };
        let connections = connections.min(MAX_CONNECTIONS);
        let plan = plans.entry(target).or_insert(WarmPlan {
            connections: 0,
            interval,
        });
        // Two deployments on one origin: the larger setting.
        plan.connections = plan.connections.max(connections);
    }
    let warmed = plans.values().filter(|plan| plan.connections > 0).count();
    // The engine's and the warmer's locks are taken detached (never block on a lock attached).
    py.detach(|| {
        let engine = runtime::engine().map_err(transport_error_to_py)?;
        let sender: Arc<dyn WarmSend> = engine.clone();
        engine
            .warmer
            .configure(sender, engine.runtime.handle(), plans);
        Ok::<_, PyErr>(())
    })?;
    Ok(warmed)
}

/// This process's warmer: `targets` warmed now, warming requests `answered` and `failed`.
#[pyfunction]
pub fn warm_counts(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let (targets, answered, failed) = py.detach(|| {
        let engine = runtime::engine().map_err(transport_error_to_py)?;
        Ok::<_, PyErr>(engine.warmer.counts())
    })?;
    let counts = PyDict::new(py);
    counts.set_item("targets", targets)?;
    counts.set_item("answered", answered)?;
    counts.set_item("failed", failed)?;
    Ok(counts)
}
