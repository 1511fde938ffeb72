//! The PyO3 binding layer: converts arguments, starts calls on the runtime, converts results.
//! No provider logic lives here.

mod bridge;
mod deployment;
mod errors;
mod extract;
mod gil;
mod headers;
mod lane;
mod lane_types;
mod prepare;
mod realtime;
mod stream;
mod warm;

use pyo3::prelude::*;

#[pymodule]
mod _native {
    use pyo3::prelude::*;

    #[pymodule_export]
    use super::bridge::{CallHandle, PreparedCall};
    #[pymodule_export]
    use super::deployment::{Deployment, provider_registry};
    #[pymodule_export]
    use super::errors::{
        FastpathError, InternalError, InvalidRequestError, InvalidResponseError,
        UpstreamConnectionError, UpstreamStatus, UpstreamStatusError, UpstreamStreamError,
        UpstreamTimeoutError,
    };
    #[pymodule_export]
    use super::lane::{
        lane_backlog, lane_claim, lane_configure, lane_counts, lane_enter_gauge,
        lane_forget_group_lists, lane_learn_messages_headers, lane_messages_cost,
        lane_next_replays, lane_reasons, lane_release_hold, lane_replayed, lane_served,
        lane_set_cooling, lane_set_gauge, lane_set_groups, lane_set_key, lane_set_rate_counting,
        lane_set_readings, lane_stop, lane_stream_tail, lane_tpm_estimate, lane_upstream_buckets,
        start_lane,
    };
    #[pymodule_export]
    use super::lane_types::{
        DeploymentSlots, DeploymentUsage, GroupUsage, LaneCachePrices, LaneClaim, LaneCost,
        LaneDeployment, LaneMessages, LaneMessagesStreams, LanePricing, LaneReplay, LaneStreams,
    };
    #[cfg(feature = "bench")]
    #[pymodule_export]
    use super::prepare::prepare_converse_body;
    #[pymodule_export]
    use super::prepare::{
        Declined, decline_codes, prepare_chat, prepare_chat_stream, prepare_embedding,
        prepare_messages, prepare_transcription,
    };
    #[pymodule_export]
    use super::realtime::{
        LaneRealtimeSession, lane_next_realtime_sessions, lane_realtime_counts,
        lane_realtime_replayed, lane_set_realtime,
    };
    #[pymodule_export]
    use super::stream::{PreparedStream, StreamHandle};
    #[pymodule_export]
    use super::warm::{warm_counts, warm_upstreams};

    #[pymodule_export]
    #[allow(non_upper_case_globals)]
    const __version__: &str = env!("CARGO_PKG_VERSION");

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let drain = wrap_pyfunction!(super::gil::drain, m)?;
        m.py()
            .import("atexit")?
            .call_method1("register", (drain,))?;
        Ok(())
    }
}
