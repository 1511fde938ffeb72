"""LiteLLM's success and failure logging fires for fast-path calls in the SDK, with the same
model, usage and response_cost as LiteLLM's own path (the proxy case is in test_proxy.py)."""

from __future__ import annotations

import json
from typing import Any

import litellm
import pytest

from devtools.deployments import (
    PROVIDERS,
    deployment_kwargs,
    embedding_deployment_kwargs,
    served_by_rust,
)
from devtools.upstream import RecordingUpstream, Reply
from tests.conftest import VOLATILE_LOG_FIELDS, Recorder, of_call, of_response

# LiteLLM's global logging worker binds to the first event loop it sees and (on its own Python
# path too) drops success events from later loops: keep this module on one loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


def _summary(event: dict[str, Any]) -> dict[str, Any]:
    payload = event["standard_logging_object"]
    return {
        "model": payload["model"],
        "custom_llm_provider": payload["custom_llm_provider"],
        "prompt_tokens": payload["prompt_tokens"],
        "completion_tokens": payload["completion_tokens"],
        "response_cost": event["response_cost"],
        "status": payload["status"],
    }


async def fast_and_slow(
    recorder: Recorder, call: Any, kwargs: dict[str, Any]
) -> tuple[Any, dict[str, Any], Any, dict[str, Any]]:
    """`call` through the fast path, then through LiteLLM's: each answer and its success event."""
    fast = await call(**kwargs, rust=True)
    fast_event = (await recorder.logged(of_response(fast)))[0]
    slow = await call(**kwargs)
    return fast, fast_event, slow, (await recorder.logged(of_response(slow)))[0]


async def chat_fast_and_slow(
    recorder: Recorder, upstream: RecordingUpstream, provider: str
) -> tuple[Any, dict[str, Any], Any, dict[str, Any]]:
    """`fast_and_slow` for a chat call to `provider`."""
    kwargs = {
        **deployment_kwargs(provider, upstream.url),
        "messages": [{"role": "user", "content": "hi"}],
    }
    return await fast_and_slow(recorder, litellm.acompletion, kwargs)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_success_logging_matches_python(
    upstream: RecordingUpstream, recorder: Recorder, provider: str
) -> None:
    fast, fast_event, slow, slow_event = await chat_fast_and_slow(recorder, upstream, provider)
    assert served_by_rust(fast)
    assert not served_by_rust(slow)
    assert _summary(fast_event) == _summary(slow_event)
    assert fast_event["response_cost"] > 0
    assert fast._hidden_params["response_cost"] == slow._hidden_params["response_cost"]


async def test_failure_logging_fires(upstream: RecordingUpstream, recorder: Recorder) -> None:
    upstream.enqueue(
        Reply(
            status=429,
            json={"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
        )
    )
    kwargs = {
        **deployment_kwargs("anthropic", upstream.url),
        "messages": [{"role": "user", "content": "hi"}],
    }
    with pytest.raises(litellm.RateLimitError):
        await litellm.acompletion(**kwargs, rust=True, litellm_call_id="call-429")
    event = (await recorder.logged(of_call("call-429"), failed=True))[0]
    assert event["standard_logging_object"]["status"] == "failure"
    assert len(upstream.requests) == 1


async def test_transcription_success_logging_matches_litellm(
    upstream: RecordingUpstream, recorder: Recorder
) -> None:
    import io

    def upload() -> io.BytesIO:
        file = io.BytesIO(b"RIFF" + bytes(2000))
        file.name = "speech.wav"
        return file

    kwargs = {
        "model": "bedrock/mistral.voxtral-mini-3b-2507",
        "aws_access_key_id": "AKIDTEST",
        "aws_secret_access_key": "secret-test-key",
        "aws_region_name": "us-east-1",
        "api_base": upstream.url,
    }
    fast = await litellm.atranscription(
        file=upload(), rust=True, litellm_call_id="transcription-fast", **kwargs
    )
    fast_event = (await recorder.logged(of_call("transcription-fast")))[0]
    slow = await litellm.atranscription(
        file=upload(), litellm_call_id="transcription-slow", **kwargs
    )
    slow_event = (await recorder.logged(of_call("transcription-slow")))[0]
    assert fast._hidden_params["additional_headers"]["x-litellm-fastpath"]
    assert fast_event["response_cost"] == slow_event["response_cost"]
    assert fast._hidden_params["response_cost"] == slow._hidden_params["response_cost"]
    fast_payload = fast_event["standard_logging_object"]
    slow_payload = slow_event["standard_logging_object"]
    for key in ("model", "custom_llm_provider", "status", "call_type"):
        assert fast_payload[key] == slow_payload[key], key


# Fields of LiteLLM's standard logging payload that differ on every call, or name the path that
# served it (the fast path's response headers).
_VOLATILE_PAYLOAD_FIELDS = VOLATILE_LOG_FIELDS | {"saved_cache_cost"}


def _comparable_payload(event: dict[str, Any]) -> dict[str, Any]:
    payload = {
        k: v
        for k, v in event["standard_logging_object"].items()
        if k not in _VOLATILE_PAYLOAD_FIELDS
    }
    response = dict(payload.get("response") or {})
    response.pop("id", None)
    response.pop("created", None)
    payload["response"] = response
    hidden = dict(payload.get("hidden_params") or {})
    hidden.pop("additional_headers", None)
    hidden.pop("litellm_overhead_time_ms", None)
    payload["hidden_params"] = hidden
    return payload


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_standard_logging_payload_matches_python(
    upstream: RecordingUpstream, recorder: Recorder, provider: str
) -> None:
    """The whole payload spend logs and every callback receive, `api_base` included."""
    fast, fast_event, _, slow_event = await chat_fast_and_slow(recorder, upstream, provider)
    fast_payload, slow_payload = _comparable_payload(fast_event), _comparable_payload(slow_event)
    assert served_by_rust(fast)
    differing = {
        key: (fast_payload.get(key), slow_payload.get(key))
        for key in fast_payload.keys() | slow_payload.keys()
        if fast_payload.get(key) != slow_payload.get(key)
    }
    assert differing == {}, json.dumps(differing, default=str, indent=1)


@pytest.mark.parametrize("kind", ["openai", "titan-v2", "cohere"])
async def test_embedding_logging_payload_matches_python(
    upstream: RecordingUpstream, recorder: Recorder, kind: str
) -> None:
    """Embeddings: the same standard logging payload (cost, usage, `api_base`) on both paths."""
    kwargs = {**embedding_deployment_kwargs(kind, upstream.url), "input": ["hi", "there"]}
    fast, fast_event, slow, slow_event = await fast_and_slow(recorder, litellm.aembedding, kwargs)
    fast_payload, slow_payload = _comparable_payload(fast_event), _comparable_payload(slow_event)
    assert served_by_rust(fast) and not served_by_rust(slow)
    assert fast_payload["call_type"] == "aembedding"
    assert fast_payload["response_cost"] > 0
    differing = {
        key: (fast_payload.get(key), slow_payload.get(key))
        for key in fast_payload.keys() | slow_payload.keys()
        if fast_payload.get(key) != slow_payload.get(key)
    }
    assert differing == {}, json.dumps(differing, default=str, indent=1)
    assert fast._hidden_params["response_cost"] == slow._hidden_params["response_cost"]
