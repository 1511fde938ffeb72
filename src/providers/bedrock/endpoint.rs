//! Where Bedrock's runtime is and how its requests authenticate (chat, transcription,
//! embeddings and `/v1/messages` alike).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::http::{RequestBody, SigV4, UpstreamRequest};
use crate::providers::error::TransformError;
use crate::providers::parts::{headers, insert_secret};
use crate::providers::provider::{AwsAuth, AwsSettings, Deployment};

/// Characters kept as-is in the model id path segment (Python's `quote(model_id, safe="")`).
const MODEL_ID_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

pub fn endpoint(aws: &AwsSettings) -> String {
    match &aws.endpoint {
        Some(endpoint) => endpoint.trim_end_matches('/').to_string(),
        None => format!("https://bedrock-runtime.{}.amazonaws.com", aws.region),
    }
}

/// `{endpoint}/model/{id}/{action}`, the id quoted as LiteLLM quotes it.
fn model_url(aws: &AwsSettings, model_id: &str, action: &str) -> String {
    format!(
        "{}/model/{}/{action}",
        endpoint(aws),
        utf8_percent_encode(model_id, MODEL_ID_KEEP)
    )
}

pub fn converse_url(aws: &AwsSettings, model_id: &str) -> String {
    model_url(aws, model_id, "converse")
}

/// `POST {endpoint}/model/{id}/invoke`: the model's native body (embeddings).
pub fn invoke_url(deployment: &Deployment) -> Result<String, TransformError> {
    Ok(model_url(deployment.aws()?, &deployment.model, "invoke"))
}

/// Headers and signing plan shared by every Converse call (chat and transcription).
pub fn converse_request(
    deployment: &Deployment,
    body: RequestBody,
) -> Result<UpstreamRequest, TransformError> {
    let url = converse_url(deployment.aws()?, &deployment.model);
    aws_request(deployment, url, body)
}

/// A JSON POST to Bedrock: SigV4-signed with the deployment's credentials, or its API key.
pub fn aws_request(
    deployment: &Deployment,
    url: String,
    body: RequestBody,
) -> Result<UpstreamRequest, TransformError> {
    let aws = deployment.aws()?;
    let mut headers = headers(&[("content-type", "application/json")])?;
    let sigv4 = match &aws.auth {
        AwsAuth::SigV4(credentials) => Some(SigV4 {
            credentials: credentials.clone(),
            region: aws.region.clone(),
            service: "bedrock",
        }),
        // A Bedrock API key replaces SigV4, as in LiteLLM.
        AwsAuth::Bearer(token) => {
            insert_secret(&mut headers, "authorization", &format!("Bearer {token}"))?;
            None
        }
    };
    Ok(UpstreamRequest {
        url,
        headers,
        body,
        timeout: deployment.timeout,
        sigv4,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::sigv4::AwsCredentials;

    #[test]
    fn model_id_is_encoded_like_python_quote() {
        let aws = AwsSettings {
            auth: AwsAuth::SigV4(AwsCredentials {
                access_key_id: "AKID".into(),
                secret_access_key: "secret".into(),
                session_token: None,
            }),
            region: "us-west-2".into(),
            endpoint: None,
        };
        assert_eq!(
            converse_url(&aws, "anthropic.claude-3-5-sonnet-20240620-v1:0"),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
        );
    }
}
