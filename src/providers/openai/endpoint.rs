//! Where an OpenAI-compatible deployment is and how it authenticates (chat and embeddings).

use crate::http::{RequestBody, UpstreamRequest};
use crate::providers::error::TransformError;
use crate::providers::parts::{headers, insert_secret, post};
use crate::providers::provider::Deployment;

const DEFAULT_API_BASE: &str = "https://api.openai.com/v1";

/// `POST {api_base}/{path}` with the deployment's API key as a bearer token.
pub fn upstream_request(
    deployment: &Deployment,
    path: &str,
    body: RequestBody,
) -> Result<UpstreamRequest, TransformError> {
    let base = deployment.api_base.as_deref().unwrap_or(DEFAULT_API_BASE);
    let mut headers = headers(&[("content-type", "application/json")])?;
    if let Some(key) = &deployment.api_key {
        insert_secret(&mut headers, "authorization", &format!("Bearer {key}"))?;
    }
    let url = format!("{}/{path}", base.trim_end_matches('/'));
    Ok(post(url, headers, body, deployment.timeout))
}
