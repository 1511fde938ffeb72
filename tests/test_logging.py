"""LiteLLM's success and failure logging fires for fast-path calls in the SDK, with the same
model, usage and response_cost as LiteLLM's own path (the proxy case is in test_proxy.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import litellm
import pytest

from litellm_fastpath.mock_provider import embedding_deployment_kwargs
from tests.conftest import PROVIDERS, Recorder, deployment_kwargs, served_by_rust
from tests.harness import RecordingUpstream, Reply

# LiteLLM's global logging worker binds to the first event loop it sees and (on its own Python
# path too) drops success events from later loops: keep this module on one loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _event_for(recorder: Recorder, response: Any) -> dict[str, Any]:
    """The success event of this response (events of earlier tests may still be arriving)."""
    for _ in range(300):
        for kwargs, logged in recorder.successes:
            if logged is response:
                return kwargs
        await asyncio.sleep(0.01)
    raise AssertionError("no success event for the response")


async def _success_for_call(recorder: Recorder, call_id: str) -> dict[str, Any]:
    for _ in range(300):
        for kwargs, _logged in recorder.successes:
            if kwargs.get("litellm_call_id") == call_id:
                return kwargs
        await asyncio.sleep(0.01)
    raise AssertionError("no success event for the call")


async def _wait_for_failure(recorder: Recorder, call_id: str) -> dict[str, Any]:
    for _ in range(300):
        for kwargs in recorder.failures:
            if kwargs.get("litellm_call_id") == call_id:
                return kwargs
        await asyncio.sleep(0.01)
    raise AssertionError("no failure event for the call")


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


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_success_logging_matches_python(
    upstream: RecordingUpstream, recorder: Recorder, provider: str
) -> None:
    kwargs = {
        **deployment_kwargs(provider, upstream.url),
        "messages": [{"role": "user", "content": "hi"}],
    }
    fast = await litellm.acompletion(**kwargs, rust=True)
    fast_event = await _event_for(recorder, fast)
    slow = await litellm.acompletion(**kwargs)
    slow_event = await _event_for(recorder, slow)
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
    event = await _wait_for_failure(recorder, "call-429")
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
    fast_event = await _success_for_call(recorder, "transcription-fast")
    slow = await litellm.atranscription(
        file=upload(), litellm_call_id="transcription-slow", **kwargs
    )
    slow_event = await _success_for_call(recorder, "transcription-slow")
    assert fast._hidden_params["additional_headers"]["x-litellm-fastpath"]
    assert fast_event["response_cost"] == slow_event["response_cost"]
    assert fast._hidden_params["response_cost"] == slow._hidden_params["response_cost"]
    fast_payload = fast_event["standard_logging_object"]
    slow_payload = slow_event["standard_logging_object"]
    for key in ("model", "custom_llm_provider", "status", "call_type"):
        assert fast_payload[key] == slow_payload[key], key


# Fields of LiteLLM's standard logging payload that differ on every call (ids, clocks) or name
# the path that served it (the fast path's response headers).
_VOLATILE_PAYLOAD_FIELDS = frozenset(
    {
        "id",
        "litellm_call_id",
        "trace_id",
        "startTime",
        "endTime",
        "completionStartTime",
        "response_time",
        "saved_cache_cost",
    }
)


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
    kwargs = {
        **deployment_kwargs(provider, upstream.url),
        "messages": [{"role": "user", "content": "hi"}],
    }
    fast = await litellm.acompletion(**kwargs, rust=True)
    fast_payload = _comparable_payload(await _event_for(recorder, fast))
    slow = await litellm.acompletion(**kwargs)
    slow_payload = _comparable_payload(await _event_for(recorder, slow))
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
    fast = await litellm.aembedding(**kwargs, rust=True)
    fast_payload = _comparable_payload(await _event_for(recorder, fast))
    slow = await litellm.aembedding(**kwargs)
    slow_payload = _comparable_payload(await _event_for(recorder, slow))
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
