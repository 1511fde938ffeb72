//! The deployment a call goes to, as Python builds it: its provider (from the registry), model,
//! endpoint and credentials, resolved by the Python layer with LiteLLM's precedence.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::errors::InvalidRequestError;
use super::headers::header_list;
use crate::http::sigv4::AwsCredentials;
use crate::providers::provider::JsonSchemaForm;
use crate::providers::{
    AnswerShape, AwsAuth, AwsSettings, Credentials, Deployment as CoreDeployment, registry,
};

/// A deployment's resolved settings, built once and reused for every call.
#[pyclass(frozen, module = "litellm_fastpath._native")]
pub struct Deployment {
    pub(crate) inner: Arc<CoreDeployment>,
}

#[pymethods]
impl Deployment {
    #[new]
    #[pyo3(signature = (
        provider, model, *, api_base=None, api_key=None, extra_headers=None, timeout=600.0,
        aws_access_key_id=None, aws_secret_access_key=None, aws_session_token=None,
        aws_region=None, aws_endpoint=None, default_max_tokens=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        provider: &str,
        model: String,
        api_base: Option<String>,
        mut api_key: Option<String>,
        extra_headers: Option<Vec<(String, String)>>,
        timeout: f64,
        aws_access_key_id: Option<String>,
        aws_secret_access_key: Option<String>,
        aws_session_token: Option<String>,
        aws_region: Option<String>,
        aws_endpoint: Option<String>,
        default_max_tokens: Option<i64>,
    ) -> PyResult<Self> {
        let provider = registry::find(provider).ok_or_else(|| {
            InvalidRequestError::new_err(format!("unsupported provider {provider:?}"))
        })?;
        let extra_headers = header_list(extra_headers.unwrap_or_default())?;
        // The provider says which credentials it takes; an AWS-hosted one needs a region
        // (the Python layer resolves it).
        let aws = match (provider.credentials, aws_region) {
            (Credentials::Aws, Some(region)) => {
                // A Bedrock API key (`api_key`) replaces the AWS credentials, as in LiteLLM.
                let auth = match api_key.take() {
                    Some(token) => AwsAuth::Bearer(token),
                    None => AwsAuth::SigV4(AwsCredentials {
                        access_key_id: aws_access_key_id.ok_or_else(|| {
                            InvalidRequestError::new_err(
                                "bedrock deployment has no AWS access key id",
                            )
                        })?,
                        secret_access_key: aws_secret_access_key.ok_or_else(|| {
                            InvalidRequestError::new_err(
                                "bedrock deployment has no AWS secret access key",
                            )
                        })?,
                        session_token: aws_session_token,
                    }),
                };
                Some(AwsSettings {
                    auth,
                    region,
                    endpoint: aws_endpoint,
                })
            }
            (Credentials::Aws, None) | (Credentials::ApiKey, _) => None,
        };
        Ok(Deployment {
            inner: Arc::new(CoreDeployment {
                provider,
                model,
                api_base,
                api_key,
                aws,
                extra_headers,
                timeout: timeout_from_secs(timeout)?,
                default_max_tokens,
            }),
        })
    }

    #[getter]
    fn provider(&self) -> &'static str {
        self.inner.provider.name
    }

    #[getter]
    fn model(&self) -> &str {
        &self.inner.model
    }

    #[getter]
    fn api_base(&self) -> Option<&str> {
        self.inner.api_base.as_deref()
    }

    fn __repr__(&self) -> String {
        // Never show keys: reprs end up in logs and tracebacks.
        format!(
            "Deployment(provider={:?}, model={:?}, api_base={:?})",
            self.inner.provider.name, self.inner.model, self.inner.api_base
        )
    }
}

pub fn timeout_from_secs(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            InvalidRequestError::new_err(format!(
                "timeout must be a positive number of seconds, got {seconds}"
            ))
        })
}

/// The provider registry's answers that Python's provider table also gives, one dict per
/// provider (fresh copies): what `tests/test_provider_table.py` checks the two tables agree on.
#[pyfunction]
pub fn provider_registry(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    registry::REGISTRY
        .iter()
        .map(|provider| {
            let entry = PyDict::new(py);
            entry.set_item("name", provider.name)?;
            entry.set_item("streams", provider.chat_stream.is_some())?;
            entry.set_item("embeddings", provider.embeddings.is_some())?;
            entry.set_item("messages", provider.messages_api.is_some())?;
            let per_model = provider.json_schema == JsonSchemaForm::PerModel;
            entry.set_item("json_schema_per_model", per_model)?;
            let converted = provider.answer_shape == AnswerShape::Converted;
            entry.set_item("converted_answer", converted)?;
            let aws = provider.credentials == Credentials::Aws;
            entry.set_item("credentials", if aws { "aws" } else { "api_key" })?;
            Ok(entry)
        })
        .collect()
}
