"""Shared fixtures: a recording upstream on loopback and deployments of each provider pointing at
it, so every test can send the same request through the Rust path and LiteLLM's Python path."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Iterator
from typing import Any

import litellm
import pytest

import litellm_fastpath
from tests.harness import RecordingUpstream

BEDROCK_MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"


def deployment_kwargs(provider: str, upstream_url: str) -> dict[str, Any]:
    """litellm_params of one deployment per provider, all pointing at the recording upstream."""
    if provider == "openai":
        return {"model": "openai/gpt-4o-mini", "api_key": "sk-upstream", "api_base": upstream_url}
    if provider == "anthropic":
        return {
            "model": "anthropic/claude-sonnet-4-5",
            "api_key": "sk-ant",
            "api_base": upstream_url,
        }
    if provider == "bedrock":
        return {
            "model": f"bedrock/converse/{BEDROCK_MODEL_ID}",
            "aws_access_key_id": "AKIDTEST",
            "aws_secret_access_key": "secret-test-key",
            "aws_region_name": "us-east-1",
            "aws_bedrock_runtime_endpoint": upstream_url,
        }
    raise ValueError(provider)


PROVIDERS = ("openai", "anthropic", "bedrock")


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[RecordingUpstream]:
    with RecordingUpstream() as server:
        yield server


@pytest.fixture
def upstream(upstream_server: RecordingUpstream) -> Iterator[RecordingUpstream]:
    upstream_server.reset()
    yield upstream_server
    upstream_server.reset()


@pytest.fixture(autouse=True, scope="session")
def fastpath_installed() -> Iterator[None]:
    litellm_fastpath.install()
    yield
    litellm_fastpath.uninstall()


@pytest.fixture(autouse=True)
def fresh_decline_counts() -> None:
    litellm_fastpath.reset_decline_counts()


def served_by_rust(response: Any) -> bool:
    headers = (getattr(response, "_hidden_params", {}) or {}).get("additional_headers") or {}
    return headers.get("x-litellm-rust") == "true" and "x-litellm-fastpath" in headers


def comparable(response: Any) -> dict[str, Any]:
    """A response as the client sees it, minus the fields that differ on every call."""
    dumped = response.model_dump()
    dumped.pop("id", None)
    dumped.pop("created", None)
    return dumped


@pytest.fixture
def litellm_module() -> Any:
    return litellm
