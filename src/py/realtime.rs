//! The Rust realtime relay's binding: its groups and pools, the sessions it relayed (for the
//! proxy's replay), and its counts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::bridge::settle_later;
use super::errors::{InvalidRequestError, transport_error_to_py};
use super::gil;
use super::lane::running;
use crate::lane::realtime::{
    ClientClose, CloseNotice, Logged, PoolSpec, RealtimeDeployment, SessionEnd, SessionRecord,
};
use crate::runtime;

/// How long a session's end waits for Python to work out the client's close.
const NOTICE_TIMEOUT: Duration = Duration::from_secs(5);

/// One `rust: true` realtime deployment: `(id, weight, url, authorization, pool size, idle
/// seconds)`.
type DeploymentRow = (String, f64, String, String, usize, f64);

/// Sets the groups the relay serves (`{group: [deployment rows]}`), the event types LiteLLM
/// logs (None: every one), and `notice(code | None, reason) -> (error_event | None, code,
/// reason)`: the client's close after the provider closed, as LiteLLM's relay works it out.
#[pyfunction]
pub fn lane_set_realtime(
    groups: HashMap<String, Vec<DeploymentRow>>,
    logged_types: Option<Vec<String>>,
    notice: Py<PyAny>,
) -> PyResult<()> {
    let lane = running()?;
    let mut parsed = HashMap::new();
    for (group, rows) in groups {
        let mut deployments = Vec::with_capacity(rows.len());
        for (id, weight, url, authorization, size, idle_s) in rows {
            let idle = Duration::try_from_secs_f64(idle_s)
                .ok()
                .filter(|idle| !idle.is_zero())
                .ok_or_else(|| InvalidRequestError::new_err("idle seconds must be positive"))?;
            deployments.push(RealtimeDeployment {
                id,
                weight,
                pool: PoolSpec {
                    url,
                    authorization,
                    size,
                    idle,
                },
            });
        }
        parsed.insert(group, deployments);
    }
    let notice = Arc::new(notice);
    let notice: Arc<CloseNotice> = Arc::new(move |end: &SessionEnd| {
        let SessionEnd::Provider { code, reason } = end else {
            return None;
        };
        let (code, reason, notice) = (*code, reason.clone(), Arc::clone(&notice));
        let (told, answer) = std::sync::mpsc::channel();
        gil::submit(move |py| {
            let close = notice
                .call1(py, (code, reason.as_str()))
                .and_then(|told| told.extract::<(Option<String>, u16, String)>(py))
                .ok()
                .map(|(error_event, code, reason)| ClientClose {
                    error_event,
                    code,
                    reason,
                });
            let _ = told.send(close);
        });
        // Called off the I/O workers (see `relay`): waiting here holds up no other session.
        answer.recv_timeout(NOTICE_TIMEOUT).ok().flatten()
    });
    lane.realtime.configure(
        parsed,
        Logged {
            types: logged_types,
        },
        Some(notice),
    );
    Ok(())
}

/// A session the lane relayed: the path with its query, the client's headers, the client's
/// and server's `(host, port)`, the deployment, the frames LiteLLM's relay reads for its
/// logging as `(from_client, text)`, and how it ended: `ended_by_client`, else the provider's
/// `close_code` (None: no close frame) and `close_reason`.
#[pyclass(frozen, get_all, module = "litellm_fastpath._native")]
pub struct LaneRealtimeSession {
    path: String,
    headers: Vec<(String, String)>,
    client: Option<(String, u16)>,
    server: Option<(String, u16)>,
    deployment_id: String,
    frames: Vec<(bool, String)>,
    ended_by_client: bool,
    close_code: Option<u16>,
    close_reason: String,
}

impl From<SessionRecord> for LaneRealtimeSession {
    fn from(record: SessionRecord) -> Self {
        let address = |address: Option<std::net::SocketAddr>| {
            address.map(|address| (address.ip().to_string(), address.port()))
        };
        let (ended_by_client, close_code, close_reason) = match record.end {
            SessionEnd::Client => (true, None, String::new()),
            SessionEnd::Provider { code, reason } => (false, code, reason),
        };
        LaneRealtimeSession {
            path: record.path,
            headers: record.headers,
            client: address(record.client),
            server: address(record.server),
            deployment_id: record.deployment_id,
            frames: record
                .frames
                .into_iter()
                .map(|frame| (frame.from_client, frame.text.as_str().to_owned()))
                .collect(),
            ended_by_client,
            close_code,
            close_reason,
        }
    }
}

/// Settles `future` (on `event_loop`, through `settle`) with every relayed session waiting for
/// its replay (`[LaneRealtimeSession]`), once there is one.
#[pyfunction]
pub fn lane_next_realtime_sessions(
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
    settle: Py<PyAny>,
) -> PyResult<()> {
    let lane = running()?;
    let engine = runtime::engine().map_err(transport_error_to_py)?;
    engine.runtime.spawn(async move {
        let records = lane.realtime.next_records().await;
        settle_later(event_loop, settle, future, move |py| {
            let items = records
                .into_iter()
                .map(|record| Py::new(py, LaneRealtimeSession::from(record)))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(PyList::new(py, items)?.into_any().unbind())
        });
    });
    Ok(())
}

/// The proxy finished replaying one relayed session.
#[pyfunction]
pub fn lane_realtime_replayed() -> PyResult<()> {
    running()?.realtime.replayed();
    Ok(())
}

/// The relay's counts in this worker: its pools' `hits`, `misses`, `expiries`, `dead`,
/// `dials`, `dial_failures`, `warm` (waiting now) and `relayed` sessions.
#[pyfunction]
pub fn lane_realtime_counts() -> PyResult<HashMap<&'static str, u64>> {
    Ok(running()?.realtime.counts())
}
