"""Python's provider table (`providers.PROVIDERS`) and Rust's registry
(`src/providers/registry.rs`) name the same providers and give the same answers to the questions
both ask of one."""

from __future__ import annotations

import pytest

from litellm_fastpath import _native
from litellm_fastpath.declines import Decline
from litellm_fastpath.providers import PROVIDERS

REGISTRY = {entry["name"]: entry for entry in _native.provider_registry()}
# Settings that resolve for every provider (LiteLLM's names, without the provider prefix).
SETTINGS = {
    "openai": ("gpt-4o-mini", {"api_key": "sk-test"}),
    "anthropic": ("claude-sonnet-4-5", {"api_key": "sk-ant-test"}),
    "bedrock": (
        "converse/anthropic.claude-3-5-sonnet-20240620-v1:0",
        {"aws_access_key_id": "AKIDTEST", "aws_secret_access_key": "secret"},
    ),
}


def test_the_same_providers() -> None:
    assert len(REGISTRY) == len(_native.provider_registry())
    assert set(REGISTRY) == set(PROVIDERS) == set(SETTINGS)


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_the_same_answers(name: str) -> None:
    python, rust = PROVIDERS[name], REGISTRY[name]
    assert python.chat.streams == rust["streams"]
    assert (python.embeddings is not None) == rust["embeddings"]
    assert (python.messages is not None) == rust["messages"]
    # Python decides a per-model `json_schema` form per call; Rust's as-given form needs no check.
    assert (python.chat.json_schema is not None) == rust["json_schema_per_model"]
    # A converted answer's streamed usage is converted as LiteLLM's stream parser does.
    assert (python.chat.stream_usage is not None) == rust["converted_answer"]


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_the_same_credentials(name: str) -> None:
    """Python resolves the deployment settings Rust's `Deployment` takes for the provider's
    kind of credentials: AWS ones (and a region) or an API key."""
    model, kwargs = SETTINGS[name]
    resolved = PROVIDERS[name].chat.settings(model, kwargs)
    assert not isinstance(resolved, Decline), resolved
    settings = resolved[1]
    aws = REGISTRY[name]["credentials"] == "aws"
    assert REGISTRY[name]["credentials"] in ("aws", "api_key")
    assert ("aws_region" in settings) == aws
    assert bool(settings.get("aws_access_key_id")) == aws
    assert bool(settings.get("api_key")) != aws
    # Rust's Deployment takes exactly these settings for the provider.
    _native.Deployment(name, model.removeprefix("converse/"), **settings)
