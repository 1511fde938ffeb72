"""Secrets stay secret and the path stays the operator's choice."""

from __future__ import annotations

import logging

import litellm
import openai
import pytest

import litellm_fastpath
from devtools.deployments import deployment_kwargs
from devtools.upstream import RecordingUpstream, Reply
from litellm_fastpath import _native

SECRET = "sk-SECRET-do-not-print"
AWS_SECRET = "AWS-SECRET-do-not-print"


def test_deployment_repr_hides_credentials() -> None:
    deployment = _native.Deployment(
        "bedrock",
        "anthropic.claude-3-5-sonnet-20240620-v1:0",
        api_key=SECRET,
        aws_access_key_id="AKID",
        aws_secret_access_key=AWS_SECRET,
        aws_session_token=SECRET,
        aws_region="us-east-1",
    )
    assert SECRET not in repr(deployment)
    assert AWS_SECRET not in repr(deployment)


@pytest.mark.parametrize("provider", ["openai", "anthropic", "bedrock"])
async def test_redirects_are_not_followed(
    upstream: RecordingUpstream, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A redirect must never carry credentials to another origin: like LiteLLM, don't follow."""
    with RecordingUpstream() as elsewhere:
        upstream.enqueue(Reply(status=307, headers={"Location": f"{elsewhere.url}/steal"}))
        kwargs = {
            **deployment_kwargs(provider, upstream.url),
            "messages": [{"role": "user", "content": "hi"}],
        }
        if provider == "bedrock":
            kwargs["aws_secret_access_key"] = AWS_SECRET
        else:
            kwargs["api_key"] = SECRET
        with caplog.at_level(logging.DEBUG), pytest.raises(openai.APIError) as raised:
            await litellm.acompletion(**kwargs, rust=True)
        assert elsewhere.requests == []
        assert len(upstream.requests) == 1
        assert SECRET not in str(raised.value) and AWS_SECRET not in str(raised.value)
        assert all(
            SECRET not in record.getMessage() and AWS_SECRET not in record.getMessage()
            for record in caplog.records
        )
        assert litellm_fastpath.decline_counts() == {}


async def test_signed_requests_carry_no_secret(upstream: RecordingUpstream) -> None:
    kwargs = {
        **deployment_kwargs("bedrock", upstream.url),
        "aws_secret_access_key": AWS_SECRET,
        "aws_session_token": "session-token-value",
        "messages": [{"role": "user", "content": "hi"}],
    }
    await litellm.acompletion(**kwargs, rust=True)
    request = upstream.requests[0]
    assert AWS_SECRET not in str(request.raw_headers)
    assert request.headers["x-amz-security-token"] == "session-token-value"
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
    assert "x-amz-security-token" in request.headers["authorization"]
