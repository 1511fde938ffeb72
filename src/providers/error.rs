//! How a provider transform fails, and how admission says no.

use crate::model::Decline;
use crate::wire::body::BodyError;
use crate::wire::media::MediaError;

/// Failures of the transforms. Request-side errors happen before any I/O and are the caller's
/// fault (HTTP 400); `InvalidResponse` is the provider's (its answer is final).
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    Media(#[from] MediaError),
    #[error("invalid header {0}")]
    InvalidHeader(String),
    /// The 2xx body is not a JSON object at all.
    #[error("provider returned an unparsable response: {0}")]
    UnparsableResponse(String),
    /// A JSON object without the fields LiteLLM needs (it fails the call on these too).
    #[error("provider returned an invalid response: {0}")]
    InvalidResponse(String),
}

/// The admission outcome when a request is not ready to send (`Ok(UpstreamRequest)` is Ready):
/// it stays on LiteLLM's Python path, or it is malformed (HTTP 400). Decided before any I/O.
#[derive(Debug)]
pub enum Refusal {
    Declined(Decline),
    Invalid(TransformError),
}

impl From<Decline> for Refusal {
    fn from(decline: Decline) -> Self {
        Refusal::Declined(decline)
    }
}

impl From<TransformError> for Refusal {
    fn from(err: TransformError) -> Self {
        Refusal::Invalid(err)
    }
}

impl From<BodyError> for Refusal {
    fn from(err: BodyError) -> Self {
        Refusal::Invalid(err.into())
    }
}

impl From<MediaError> for Refusal {
    fn from(err: MediaError) -> Self {
        Refusal::Invalid(err.into())
    }
}
