//! What a request on a lane route comes to, and what every route hands its serve path.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;

use super::connection::Connection;
use super::gate::Route;
use super::head::Head;
use super::replay::PendingReplay;
use super::response::Body;
use super::state::Lane;
use super::tickets::{Issued, Outcome};
use crate::call::{CallError, Completion};
use crate::model::LaneReason;

pub(super) enum Served {
    Answer(Response<Body>),
    ToProxy(LaneReason),
    /// The provider was called; the proxy answers with this ticket's outcome.
    Replay(Issued),
    /// The client left while the lane waited for the provider.
    Gone,
}

/// A request on a lane route, its body read.
#[derive(Clone, Copy)]
pub(super) struct ClientRequest<'a> {
    pub lane: &'a Arc<Lane>,
    pub route: Route,
    pub parts: &'a http::request::Parts,
    pub body: &'a Bytes,
    pub connection: &'a Connection,
}

impl ClientRequest<'_> {
    /// Its replay, once it is answered.
    pub(super) fn pending_replay(&self) -> PendingReplay {
        PendingReplay::new(self.parts, self.body, self.connection)
    }

    /// A call the lane does not answer itself: the proxy answers with a ticket for its outcome.
    pub(super) fn with_ticket(
        &self,
        head: &Head,
        outcome: Result<Completion, CallError>,
    ) -> Served {
        Served::Replay(head.issue(self.lane, Outcome::Call(outcome)))
    }
}
