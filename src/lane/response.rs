//! The bodies and headers of the responses the lane writes itself.

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::Response;

pub(super) type Body = BoxBody<Bytes, hyper::Error>;

pub(super) fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// A 200 with these headers (those HTTP cannot carry are left out).
pub(super) fn answer(body: Body, headers: Vec<(String, String)>) -> Response<Body> {
    let mut response = Response::new(body);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

pub(super) fn bad_gateway() -> Response<Body> {
    let mut response = Response::new(full(Bytes::from_static(
        b"the proxy behind the fast lane is unreachable",
    )));
    *response.status_mut() = hyper::StatusCode::BAD_GATEWAY;
    response
}

pub(super) fn set_header(headers: &mut http::HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}
