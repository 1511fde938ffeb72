//! The fast lane (#11): in each proxy worker, Rust accepts the public connections, answers the
//! requests it can answer exactly as the proxy would, and forwards every other request
//! unchanged to the proxy's own uvicorn server behind it, on a private Unix socket.
//!
//! A request takes the lane when it is a plain chat completion (or `/v1/messages` call) for a
//! model group the lane serves, sent with an API key LiteLLM has already judged. The lane calls
//! the provider once and answers. The request then waits in a queue for the proxy, which
//! replays it in-process through its own endpoint with a ticket that hands it the provider's
//! outcome instead of calling the provider again: so LiteLLM's auth counters, router state,
//! logging callbacks, cost and spend tracking all run as on the normal path, after the client
//! has its answer. An outcome whose answer the lane does not write itself (an error, an unusual
//! shape) is forwarded to the proxy with its ticket instead, and the proxy's answer goes to the
//! client: one provider call either way. Streams take the lane too: the lane writes the proxy's
//! frames as the provider's events arrive, and the replay hands LiteLLM the stream's outcome.
//!
//! Where things are:
//! - The server: `server` (accepting, connections, routing a request), `keepalive` (uvicorn's
//!   idle rule), `forward` (to the app behind the lane, upgrades included), `connection` (a
//!   client connection as the routes see it), `response` (answers' bodies and headers).
//! - The gate: `gate` (route, settings, proxy-option headers, the key; the group, verdict,
//!   cooldown, backlog and the router's pick), `table` (what Python hands over: settings,
//!   groups, key verdicts), `budget` (keys with budgets: headroom, and holds until replays
//!   reserve). Why a request goes to the proxy: `model::LaneReason`.
//! - The routes, one folder each: `chat` (`/chat/completions`), `messages` (`/v1/messages`):
//!   the body the lane reads, admission, the answer as the proxy writes it, the stream's frames.
//! - Realtime sessions: `realtime` (GA `/v1/realtime` sessions relayed in Rust from warm
//!   provider sessions, on a thread of their own; the proxy replays each one for its logging).
//! - The serve paths the routes share: `unary` (one call, one answer) and `streamed` (a stream
//!   written as it arrives), with `head` (what an admitted request carries) and `served` (what
//!   a request comes to).
//! - The replay: `replay` (the queue of served requests for the proxy, and stream ends the
//!   proxy writes), `tickets` (provider outcomes the replay claims, call ids).
//! - Cost: `cost` (usage -> cost for every route), `headers` (the proxy's headers for an
//!   answer, cost split included).
//! - `slots`: a deployment's slots for calls in flight, one count with LiteLLM's router;
//!   `usage`: a group's usage this minute, for the router's headers of groups with limits;
//!   `routing`: each deployment's usage this minute, for usage-based routing's pick.
//! - `state`: the lane of one process (its table, engine, counters, backlog).

pub mod budget;
mod chat;
mod connection;
pub mod cost;
mod forward;
mod gate;
mod head;
mod headers;
mod holds;
mod keepalive;
mod messages;
pub mod ratelimit;
pub mod realtime;
mod replay;
mod response;
pub mod routing;
mod served;
mod server;
mod shuffle;
pub mod slots;
mod state;
mod streamed;
pub mod table;
mod tickets;
mod unary;
pub mod usage;

pub use cost::{CachePrices, MessagesUsage, Pricing};
pub use replay::Replay;
pub use server::serve;
pub use state::{App, Lane, ServedTally, UPSTREAM_BUCKETS_S};
pub use table::{
    Group, LaneDeployment, LaneMessages, LaneStreams, MessagesStreams, Settings, StreamUsage,
    Table, Verdict,
};
pub use tickets::{Outcome, StreamOutcome, Ticket};
