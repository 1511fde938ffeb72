//! Headers across the binding: from Python (checked) and to Python (a dict).

use http::{HeaderName, HeaderValue};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::errors::InvalidRequestError;

/// Header pairs from Python, checked.
pub fn header_list(headers: Vec<(String, String)>) -> PyResult<Vec<(HeaderName, HeaderValue)>> {
    headers
        .into_iter()
        .map(|(name, value)| {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                InvalidRequestError::new_err(format!("invalid header name {name:?}"))
            })?;
            let value = HeaderValue::from_str(&value).map_err(|_| {
                InvalidRequestError::new_err(format!("invalid value for header {name:?}"))
            })?;
            Ok((header_name, value))
        })
        .collect()
}

/// Response headers as a dict (values that are not text are left out).
pub fn headers_to_py<'py>(
    py: Python<'py>,
    headers: &http::HeaderMap,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, value) in headers {
        if let Ok(value) = value.to_str() {
            dict.set_item(name.as_str(), value)?;
        }
    }
    Ok(dict)
}
