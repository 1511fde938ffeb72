//! Realtime sessions (`/v1/realtime`) relayed in Rust (#25): a GA WebSocket session for a
//! `rust: true` OpenAI realtime group, from a key the lane serves, is answered by the lane when
//! its deployment's pool has a warm provider session. The lane upgrades the client, relays the
//! frames both ways (`relay`), and queues the session's record: the proxy then replays it
//! in-process through LiteLLM's own realtime endpoint and relay against the record, so auth,
//! hooks, the router's slot, logging, cost and spend run as LiteLLM runs them, once per session.
//! A session the lane cannot serve that way (no warm session, the beta protocol, a subprotocol,
//! other query parameters, a key the lane does not serve) goes to the proxy unchanged.

mod events;
pub(super) mod hub;
mod pool;
mod relay;
mod serve;
mod upstream;

pub use events::Logged;
pub use hub::{Realtime, RealtimeDeployment, SessionRecord};
pub use pool::{PoolCounts, PoolSpec};
pub use relay::{ClientClose, CloseNotice, RecordedFrame, SessionEnd};
pub(super) use serve::{is_session_request, serve};
