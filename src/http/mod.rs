//! HTTP to the providers: the upstream request, the client that sends it once, SigV4 signing.

pub mod client;
pub mod sigv4;
pub mod warm;

use std::time::Duration;

use http::HeaderMap;

use crate::wire::body::{BodyError, JsonBody, Node};
use sigv4::AwsCredentials;

/// A fully built upstream request: nothing left to decide, only to send.
#[derive(Debug)]
pub struct UpstreamRequest {
    pub url: String,
    pub headers: HeaderMap,
    pub body: RequestBody,
    pub timeout: Duration,
    /// Set for AWS: the body digest is computed and signed right before sending (off the GIL).
    pub sigv4: Option<SigV4>,
}

/// How to SigV4-sign an upstream request once its body digest is known.
#[derive(Clone, Debug)]
pub struct SigV4 {
    pub credentials: AwsCredentials,
    pub region: String,
    pub service: &'static str,
}

/// An upstream request's body: a document still to be laid out (its text and media checked and
/// scanned right before sending, off the event loop's thread), or bytes already laid out.
#[derive(Debug)]
pub enum RequestBody {
    Document(Node),
    Json(JsonBody),
}

impl RequestBody {
    /// The body as it goes on the wire; a malformed text or media payload is an error here.
    pub fn lay_out(self) -> Result<JsonBody, BodyError> {
        match self {
            RequestBody::Document(node) => JsonBody::from_node(&node),
            RequestBody::Json(json) => Ok(json),
        }
    }

    /// Bytes of text and media inside, without reading them: how much work `lay_out` and
    /// hashing will be.
    pub fn weight(&self) -> u64 {
        match self {
            RequestBody::Document(node) => node.shared_len(),
            RequestBody::Json(json) => json.content_length(),
        }
    }
}
