//! AWS SigV4 header signing over a precomputed payload digest, matching botocore's `SigV4Auth`
//! (used by Bedrock): the body is hashed once while streaming, never buffered for signing.

use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SessionTokenMode, SignableBody, SignableRequest,
    SignatureLocation, SigningSettings, UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use http::{HeaderMap, HeaderName, HeaderValue};

/// Static AWS credentials.
#[derive(Clone)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "** redacted **"),
            )
            .finish()
    }
}

/// Signing failures. Messages never include credentials or header values.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("cannot sign URL: {0}")]
    InvalidUrl(&'static str),
    #[error("header {name} is not visible ASCII and cannot be signed")]
    InvalidHeader { name: String },
    #[error("payload digest must be 64 lowercase hex characters")]
    InvalidPayloadHash,
    #[error("session token is not a valid header value")]
    InvalidSessionToken,
    #[error("signing time is out of range")]
    InvalidTime,
    #[error("invalid signing parameters: {0}")]
    Params(#[source] v4::signing_params::BuildError),
    #[error("SigV4 signing failed: {0}")]
    Sign(#[source] aws_sigv4::http_request::SigningError),
    #[error("signer produced an invalid header")]
    InvalidOutput,
}

/// Headers botocore never signs (`botocore.auth.SIGNED_HEADERS_BLACKLIST`, 1.44).
const BOTOCORE_UNSIGNED: &[&str] = &[
    "authorization",
    "baggage",
    "connection",
    "expect",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "traceparent",
    "tracestate",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "x-amzn-trace-id",
];

/// Headers this function produces; a retried request may still carry old ones, which must be
/// replaced rather than signed (aws-sigv4 requires they be absent from its input).
const GENERATED: &[&str] = &["authorization", "x-amz-date", "x-amz-security-token"];

/// Year 9999 ends here; the `time` crate used by aws-sigv4 panics beyond it.
const MAX_TIME: Duration = Duration::from_secs(253_402_300_799);

/// Signs a request and returns the headers to add: `authorization`, `x-amz-date`, and
/// `x-amz-security-token` when a token is set. `headers` should hold what botocore would sign
/// for the call (typically just `content-type`); `host` is taken from `url` unless present.
#[allow(clippy::too_many_arguments)]
pub fn sign(
    method: &str,
    url: &str,
    headers: &HeaderMap,
    payload_sha256_hex: &str,
    region: &str,
    service: &str,
    credentials: &AwsCredentials,
    time: SystemTime,
) -> Result<Vec<(HeaderName, HeaderValue)>, SigningError> {
    // aws-sigv4 panics on a URL without host and on out-of-range times: reject them here.
    let uri: http::Uri = url
        .parse()
        .map_err(|_| SigningError::InvalidUrl("not a valid URI"))?;
    if uri.scheme().is_none() || uri.host().is_none_or(str::is_empty) {
        return Err(SigningError::InvalidUrl(
            "absolute URL with a host required",
        ));
    }
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) if d <= MAX_TIME => {}
        _ => return Err(SigningError::InvalidTime),
    }
    if payload_sha256_hex.len() != 64
        || !payload_sha256_hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(SigningError::InvalidPayloadHash);
    }
    if let Some(token) = &credentials.session_token {
        HeaderValue::from_str(token).map_err(|_| SigningError::InvalidSessionToken)?;
    }

    let mut signable_headers = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        if BOTOCORE_UNSIGNED.contains(&name.as_str()) || GENERATED.contains(&name.as_str()) {
            continue;
        }
        let value = value.to_str().map_err(|_| SigningError::InvalidHeader {
            name: name.as_str().to_owned(),
        })?;
        signable_headers.push((name.as_str(), value));
    }

    let identity = Credentials::new(
        credentials.access_key_id.as_str(),
        credentials.secret_access_key.as_str(),
        credentials.session_token.clone(),
        None,
        "litellm-fastpath",
    )
    .into();

    let mut settings = SigningSettings::default();
    // botocore's SigV4Auth (every service but S3) canonicalizes the path as
    // `quote(remove_dot_segments(path), safe='/~')` on the already-encoded URL path, so a
    // model id `v1%3A0` signs as `v1%253A0`: that is aws-sigv4's Double encoding (same
    // unreserved set) with RFC 3986 dot-segment/`//` normalization Enabled. S3 would need
    // Single + Disabled; Bedrock must not use those.
    settings.percent_encoding_mode = PercentEncodingMode::Double;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Enabled;
    // botocore adds X-Amz-Content-SHA256 only for S3 (S3SigV4Auth); plain SigV4Auth does not.
    settings.payload_checksum_kind = PayloadChecksumKind::NoHeader;
    // botocore sets X-Amz-Security-Token before building the canonical request, so it is signed.
    settings.session_token_mode = SessionTokenMode::Include;
    settings.signature_location = SignatureLocation::Headers;
    settings.excluded_headers = Some(
        BOTOCORE_UNSIGNED
            .iter()
            .map(|h| Cow::Borrowed(*h))
            .collect(),
    );

    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(settings)
        .build()
        .map_err(SigningError::Params)?
        .into();

    let request = SignableRequest::new(
        method,
        url,
        signable_headers.into_iter(),
        SignableBody::Precomputed(payload_sha256_hex.to_owned()),
    )
    .map_err(SigningError::Sign)?;
    let (instructions, _signature) = aws_sigv4::http_request::sign(request, &params)
        .map_err(SigningError::Sign)?
        .into_parts();
    let (out_headers, _params) = instructions.into_parts();

    let mut out = Vec::with_capacity(out_headers.len());
    for h in out_headers {
        let name =
            HeaderName::from_bytes(h.name().as_bytes()).map_err(|_| SigningError::InvalidOutput)?;
        let mut value =
            HeaderValue::from_str(h.value()).map_err(|_| SigningError::InvalidOutput)?;
        // Keep the token and the signature out of `Debug` output of requests.
        value.set_sensitive(h.sensitive() || name == http::header::AUTHORIZATION);
        out.push((name, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AKID: &str = "AKIDEXAMPLE";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const EMPTY_SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn creds(token: Option<&str>) -> AwsCredentials {
        AwsCredentials {
            access_key_id: AKID.into(),
            secret_access_key: SECRET.into(),
            session_token: token.map(str::to_owned),
        }
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// 2015-08-30T12:36:00Z, the AWS SigV4 test-suite time.
    const SUITE_TIME: u64 = 1_440_938_160;
    /// 2024-06-20T12:00:00Z.
    const BOTO_TIME: u64 = 1_718_884_800;

    /// A GET of `url` signed as the AWS test suite signs it (service `service`, its time).
    fn suite_get(url: &str, token: Option<&str>) -> Vec<(HeaderName, HeaderValue)> {
        let out = sign(
            "GET",
            url,
            &HeaderMap::new(),
            EMPTY_SHA,
            "us-east-1",
            "service",
            &creds(token),
            at(SUITE_TIME),
        );
        out.unwrap()
    }

    fn get(out: &[(HeaderName, HeaderValue)], name: &str) -> Option<String> {
        out.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.to_str().unwrap().to_owned())
    }

    #[test]
    fn aws_suite_get_vanilla() {
        let out = suite_get("https://example.amazonaws.com/", None);
        assert_eq!(get(&out, "x-amz-date").unwrap(), "20150830T123600Z");
        assert_eq!(
            get(&out, "authorization").unwrap(),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
        assert_eq!(out.len(), 2);
        assert!(get(&out, "x-amz-content-sha256").is_none());
    }

    #[test]
    fn aws_suite_get_vanilla_with_session_token() {
        let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
        let out = suite_get("https://example.amazonaws.com/", Some(token));
        assert_eq!(get(&out, "x-amz-security-token").unwrap(), token);
        assert!(
            out.iter()
                .find(|(n, _)| n == "x-amz-security-token")
                .unwrap()
                .1
                .is_sensitive()
        );
        assert_eq!(
            get(&out, "authorization").unwrap(),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date;x-amz-security-token, \
             Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
        );
    }

    fn bedrock(token: Option<&str>, extra: &[(&'static str, &'static str)]) -> String {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        for (k, v) in extra {
            headers.insert(*k, HeaderValue::from_static(v));
        }
        // Body b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}]}' as botocore sent it.
        let out = sign(
            "POST",
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse",
            &headers,
            "23aab397f4d1f51b8846a1cea8ead51c4766038fe8b80730645a50f05af4d41e",
            "us-east-1",
            "bedrock",
            &creds(token),
            at(BOTO_TIME),
        )
        .unwrap();
        assert_eq!(get(&out, "x-amz-date").unwrap(), "20240620T120000Z");
        get(&out, "authorization").unwrap()
    }

    /// Expected values captured from botocore 1.44.8 `bedrock-runtime.converse` with the same
    /// credentials and a frozen clock; proves the `%3A` → `%253A` double encoding matches.
    #[test]
    fn matches_botocore_bedrock_converse() {
        assert_eq!(
            bedrock(None, &[]),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240620/us-east-1/bedrock/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=e66371c672ebb423c7417bbd45d2c7f31e8d5e5e8f8fc8cd7da01e2df617626e"
        );
        assert_eq!(
            bedrock(Some("FQoGZXIvYXdzEXAMPLETOKEN/with+chars="), &[]),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240620/us-east-1/bedrock/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, \
             Signature=97e2a6b8311055482dd9c4294ce4c63413bb1f433a9137652bea4e10547b784c"
        );
    }

    #[test]
    fn stale_and_unsigned_headers_are_ignored() {
        let plain = bedrock(None, &[]);
        let noisy = bedrock(
            None,
            &[
                ("authorization", "old"),
                ("x-amz-date", "19990101T000000Z"),
                ("user-agent", "litellm"),
                ("expect", "100-continue"),
            ],
        );
        assert_eq!(plain, noisy);
    }

    #[test]
    fn debug_redacts_secrets() {
        let token = "SESSIONTOKENVALUE";
        let s = format!("{:?}", creds(Some(token)));
        assert!(!s.contains(SECRET) && !s.contains(token), "{s}");
        assert!(s.contains(AKID));
    }

    #[test]
    fn errors_do_not_leak_and_do_not_panic() {
        let bad_token = creds(Some("bad\ntoken SECRETPART"));
        let cases: Vec<(&str, &str, SystemTime, AwsCredentials)> = vec![
            ("/relative", EMPTY_SHA, at(SUITE_TIME), creds(None)),
            ("not a url", EMPTY_SHA, at(SUITE_TIME), creds(None)),
            ("https://h/", "XYZ", at(SUITE_TIME), creds(None)),
            (
                "https://h/",
                EMPTY_SHA,
                UNIX_EPOCH - Duration::from_secs(1),
                creds(None),
            ),
            ("https://h/", EMPTY_SHA, at(u64::MAX / 4), creds(None)),
            ("https://h/", EMPTY_SHA, at(SUITE_TIME), bad_token),
        ];
        for (url, sha, time, c) in cases {
            let err = sign("POST", url, &HeaderMap::new(), sha, "r", "s", &c, time).unwrap_err();
            let msg = format!("{err} {err:?}");
            assert!(
                !msg.contains(SECRET) && !msg.contains("SECRETPART"),
                "{msg}"
            );
        }
        let mut headers = HeaderMap::new();
        headers.insert("x-custom", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        let err = sign(
            "POST",
            "https://h/",
            &headers,
            EMPTY_SHA,
            "r",
            "s",
            &creds(None),
            at(SUITE_TIME),
        )
        .unwrap_err();
        assert!(matches!(err, SigningError::InvalidHeader { .. }));
    }

    #[test]
    fn non_default_port_is_in_host() {
        let a = suite_get("https://example.amazonaws.com:8443/", None);
        let b = suite_get("https://example.amazonaws.com:443/", None);
        assert_ne!(get(&a, "authorization"), get(&b, "authorization"));
        assert!(
            get(&b, "authorization")
                .unwrap()
                .ends_with("5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        );
    }
}
