//! Provider transforms: chat request -> upstream HTTP request, upstream response -> chat.completion.
//!
//! Each provider module mirrors what LiteLLM 1.106.12's Python path sends and returns; the
//! differential tests in `tests/` hold them to it.

pub mod anthropic;
pub mod bedrock;
pub mod openai;

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::body::{BodyError, JsonBody};
use crate::chat::{ChatRequest, Decline};
use crate::signing::{AwsCredentials, SigningError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    OpenAi,
    Anthropic,
    Bedrock,
}

impl Provider {
    pub fn parse(name: &str) -> Option<Provider> {
        match name {
            "openai" => Some(Provider::OpenAi),
            "anthropic" => Some(Provider::Anthropic),
            "bedrock" => Some(Provider::Bedrock),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Bedrock => "bedrock",
        }
    }
}

/// How Bedrock requests authenticate. `Debug` never shows the secret.
#[derive(Clone)]
pub enum AwsAuth {
    /// Static AWS credentials: every request is SigV4-signed.
    SigV4(AwsCredentials),
    /// A Bedrock API key (`api_key` in LiteLLM): `Authorization: Bearer`, no signature.
    Bearer(String),
}

impl std::fmt::Debug for AwsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AwsAuth::SigV4(credentials) => f.debug_tuple("SigV4").field(credentials).finish(),
            AwsAuth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

/// AWS settings of a Bedrock deployment, already resolved (precedence applied in Python).
#[derive(Clone, Debug)]
pub struct AwsSettings {
    pub auth: AwsAuth,
    pub region: String,
    /// `aws_bedrock_runtime_endpoint` / `api_base`; default `https://bedrock-runtime.{region}.amazonaws.com`.
    pub endpoint: Option<String>,
}

/// One deployment's resolved settings: everything a call needs besides the request itself.
#[derive(Clone, Debug)]
pub struct Deployment {
    pub provider: Provider,
    /// Upstream model id, without the LiteLLM provider prefix.
    pub model: String,
    pub api_base: Option<String>,
    pub api_key: Option<String>,
    pub aws: Option<AwsSettings>,
    pub extra_headers: Vec<(HeaderName, HeaderValue)>,
    pub timeout: Duration,
    /// Anthropic: `max_tokens` when the caller sets none (LiteLLM takes it from its model map).
    pub default_max_tokens: Option<i64>,
}

/// A fully built upstream request: nothing left to decide, only to send.
#[derive(Debug)]
pub struct UpstreamRequest {
    pub url: String,
    pub headers: HeaderMap,
    pub body: JsonBody,
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

/// Failures of the transforms. Request-side errors happen before any I/O and are the caller's
/// fault (HTTP 400); `InvalidResponse` is the provider's (its answer is final).
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    Signing(#[from] SigningError),
    #[error("invalid header {0}")]
    InvalidHeader(String),
    /// The 2xx body is not a JSON object at all.
    #[error("provider returned an unparsable response: {0}")]
    UnparsableResponse(String),
    /// A JSON object without the fields LiteLLM needs (it fails the call on these too).
    #[error("provider returned an invalid response: {0}")]
    InvalidResponse(String),
}

/// A request that passed admission and is ready to send, or the reason it stays on Python.
pub type Prepared = Result<UpstreamRequest, Decline>;

/// Why a transform did not produce an upstream request: the request stays on LiteLLM's Python
/// path, or it is malformed (HTTP 400). Transforms return it so `?` works for both.
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

/// The admission check plus the transform: a request either becomes an upstream request or is
/// declined, and both happen before any I/O.
pub fn prepare(deployment: &Deployment, request: &ChatRequest) -> Result<Prepared, TransformError> {
    if let Err(decline) = crate::chat::admit_params(deployment.provider, &request.params) {
        return Ok(Err(decline));
    }
    let built = match deployment.provider {
        Provider::OpenAi => openai::build_request(deployment, request),
        Provider::Anthropic => anthropic::build_request(deployment, request),
        Provider::Bedrock => bedrock::build_request(deployment, request),
    };
    match built {
        Ok(mut upstream) => {
            append_extra_headers(&mut upstream.headers, &deployment.extra_headers);
            Ok(Ok(upstream))
        }
        Err(Refusal::Declined(decline)) => Ok(Err(decline)),
        Err(Refusal::Invalid(err)) => Err(err),
    }
}

/// Converts a 2xx upstream body into an OpenAI `chat.completion` object.
pub fn parse_response(deployment: &Deployment, body: &Bytes) -> Result<Value, TransformError> {
    let parsed = json_object(body)?;
    match deployment.provider {
        Provider::OpenAi => openai::parse_response(deployment, parsed),
        Provider::Anthropic => anthropic::parse_response(deployment, parsed),
        Provider::Bedrock => bedrock::parse_response(deployment, parsed),
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

fn append_extra_headers(headers: &mut HeaderMap, extra: &[(HeaderName, HeaderValue)]) {
    for (name, value) in extra {
        headers.insert(name.clone(), value.clone());
    }
}

pub(crate) fn header(
    name: &'static str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), TransformError> {
    let value = HeaderValue::from_str(value)
        .map_err(|_| TransformError::InvalidHeader(name.to_string()))?;
    Ok((HeaderName::from_static(name), value))
}

/// A data URL split into its media type and its base64 payload (a zero-copy slice).
#[derive(Clone, Debug)]
pub struct DataUrl {
    pub media_type: String,
    pub data: Bytes,
}

/// Parses `data:<media type>;base64,<payload>`; anything else is a caller error naming the problem.
pub fn parse_data_url(url: &Bytes) -> Result<DataUrl, TransformError> {
    let invalid =
        |why: &str| TransformError::InvalidRequest(format!("invalid image data URL: {why}"));
    let rest = url
        .strip_prefix(b"data:")
        .ok_or_else(|| invalid("expected it to start with 'data:'"))?;
    let comma = rest
        .iter()
        .position(|b| *b == b',')
        .ok_or_else(|| invalid("missing ',' before the payload"))?;
    let header = std::str::from_utf8(&rest[..comma]).map_err(|_| invalid("header is not text"))?;
    let media_type = header
        .strip_suffix(";base64")
        .ok_or_else(|| invalid("only base64 data URLs are supported"))?;
    if media_type.is_empty() || !media_type.contains('/') {
        return Err(invalid("missing media type"));
    }
    let start = "data:".len() + comma + 1;
    let data = url.slice(start..);
    check_base64(&data)?;
    Ok(DataUrl {
        media_type: media_type.to_string(),
        data,
    })
}

/// Validates standard base64 (alphabet, padding, length) without decoding it.
pub fn check_base64(data: &[u8]) -> Result<(), TransformError> {
    let invalid =
        |why: &str| TransformError::InvalidRequest(format!("invalid base64 payload: {why}"));
    if data.is_empty() {
        return Err(invalid("it is empty"));
    }
    if data.len() % 4 != 0 {
        return Err(invalid("length is not a multiple of 4"));
    }
    let body_len = data.len()
        - data
            .iter()
            .rev()
            .take(2)
            .take_while(|b| **b == b'=')
            .count();
    // Branch-free within a block so LLVM vectorizes it: ~12 GB/s instead of ~0.5 GB/s, which
    // matters because it runs on the caller's thread for multi-MiB media.
    let valid_alphabet = data[..body_len]
        .chunks(256)
        .all(|block| block.iter().fold(true, |ok, &b| ok & is_base64_alphabet(b)));
    if !valid_alphabet {
        return Err(invalid("characters outside the base64 alphabet"));
    }
    Ok(())
}

#[inline(always)]
fn is_base64_alphabet(b: u8) -> bool {
    (b.wrapping_sub(b'A') < 26)
        | (b.wrapping_sub(b'a') < 26)
        | (b.wrapping_sub(b'0') < 10)
        | (b == b'+')
        | (b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_alphabet_check_matches_the_plain_definition() {
        for b in 0..=255u8 {
            let plain = b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
            assert_eq!(is_base64_alphabet(b), plain, "byte {b}");
        }
    }

    #[test]
    fn data_url_payload_is_a_slice_of_the_input() {
        let url = Bytes::from_static(b"data:image/png;base64,iVBORw0KGgo=");
        let parsed = parse_data_url(&url).unwrap();
        assert_eq!(parsed.media_type, "image/png");
        assert_eq!(&parsed.data[..], b"iVBORw0KGgo=");
        let range = url.as_ptr() as usize..url.as_ptr() as usize + url.len();
        assert!(range.contains(&(parsed.data.as_ptr() as usize)));
    }

    #[test]
    fn bad_data_urls_say_what_is_wrong() {
        for (url, needle) in [
            ("http://x/y.png", "start with 'data:'"),
            ("data:image/png;base64", "missing ','"),
            ("data:image/png,abcd", "only base64"),
            ("data:;base64,abcd", "missing media type"),
            ("data:image/png;base64,ab$d", "alphabet"),
            ("data:image/png;base64,abc", "multiple of 4"),
        ] {
            let err = parse_data_url(&Bytes::from(url)).unwrap_err().to_string();
            assert!(err.contains(needle), "{url}: {err}");
        }
    }
}
