//! What every provider's calls are built from: headers (credentials marked sensitive), a JSON
//! POST, and the JSON object a 2xx answer must be.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::error::TransformError;
use crate::http::{RequestBody, UpstreamRequest};

pub(crate) fn header(
    name: &'static str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), TransformError> {
    let value = HeaderValue::from_str(value)
        .map_err(|_| TransformError::InvalidHeader(name.to_string()))?;
    Ok((HeaderName::from_static(name), value))
}

/// Headers from fixed names and values.
pub(crate) fn headers(pairs: &[(&'static str, &str)]) -> Result<HeaderMap, TransformError> {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        let (name, value) = header(name, value)?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Inserts a credential header, marked sensitive so it never shows in `Debug` output or logs.
pub(crate) fn insert_secret(
    headers: &mut HeaderMap,
    name: &'static str,
    value: &str,
) -> Result<(), TransformError> {
    let (name, mut value) = header(name, value)?;
    value.set_sensitive(true);
    headers.insert(name, value);
    Ok(())
}

/// An unsigned POST of `body` to `url`.
pub(crate) fn post(
    url: String,
    headers: HeaderMap,
    body: RequestBody,
    timeout: Duration,
) -> UpstreamRequest {
    UpstreamRequest {
        url,
        headers,
        body,
        timeout,
        sigv4: None,
    }
}

/// A 2xx body as a JSON object, or `UnparsableResponse`.
pub fn json_object(body: &Bytes) -> Result<Value, TransformError> {
    let parsed: Value = serde_json::from_slice(body)
        .map_err(|err| TransformError::UnparsableResponse(format!("not JSON ({err})")))?;
    if !parsed.is_object() {
        return Err(TransformError::UnparsableResponse(
            "expected a JSON object".into(),
        ));
    }
    Ok(parsed)
}
