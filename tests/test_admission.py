"""Admission: every request shape the Rust path does not serve exactly like LiteLLM is declined
before any I/O, counted under its reason, and served by LiteLLM's Python path unchanged."""

from __future__ import annotations

import json
from typing import Any

import httpx
import litellm
import openai
import pytest

import litellm_fastpath
from devtools.deployments import deployment_kwargs, served_by_rust
from devtools.upstream import RecordingUpstream, Reply
from tests.test_tools import SCHEMA_WITH_DEFS

HELLO = [{"role": "user", "content": "Hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    }
]

# (provider, kwargs added to the deployment's, decline code, upstream chat requests expected)
DECLINES: dict[str, tuple[str, dict[str, Any], str, int]] = {
    "response_format": (
        "anthropic",
        {
            "messages": HELLO,
            "response_format": SCHEMA_WITH_DEFS,
        },
        "response_format",
        1,
    ),
    "n_above_one": ("openai", {"messages": HELLO, "n": 2}, "n", 1),
    "top_k": ("anthropic", {"messages": HELLO, "top_k": 5}, "top_k", 1),
    "tools": (
        "bedrock",
        {"messages": HELLO, "tools": [{"type": "function", "function": {"name": "1st-tool"}}]},
        "tools",
        1,
    ),
    "tool_choice": (
        "bedrock",
        {
            "messages": HELLO,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "1st-tool"}},
        },
        "tool_choice",
        1,
    ),
    "tool_choice_without_tools": (
        "openai",
        {"messages": HELLO, "tool_choice": "auto"},
        "tool_choice",
        1,
    ),
    "functions": (
        "openai",
        {"messages": HELLO, "functions": [TOOLS[0]["function"]]},
        "functions",
        1,
    ),
    "unknown_param": ("openai", {"messages": HELLO, "foo_extra": 1}, "unsupported_param", 1),
    "provider_specific_param": (
        "anthropic",
        {"messages": HELLO, "user": "u1"},
        "unsupported_param",
        1,
    ),
    "mock_response": ("openai", {"messages": HELLO, "mock_response": "mocked"}, "mock_response", 0),
    "num_retries": ("openai", {"messages": HELLO, "num_retries": 1}, "num_retries", 1),
    "caching": ("openai", {"messages": HELLO, "caching": True}, "caching", 1),
    "custom_pricing": (
        "openai",
        {"messages": HELLO, "input_cost_per_token": 1e-6},
        "litellm_option",
        1,
    ),
    "audio_part": (
        "openai",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
                    ],
                }
            ]
        },
        "content_part",
        1,
    ),
    "file_part": (
        "openai",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "file", "file": {"file_id": "file-123"}}],
                }
            ]
        },
        "content_part",
        1,
    ),
    "tool_role": (
        "bedrock",
        {
            "messages": [
                *HELLO,
                {"role": "tool", "content": "12:00", "tool_call_id": "call_1"},
            ]
        },
        # A tool result without tools: LiteLLM rewrites it as text for Bedrock.
        "message_field",
        1,
    ),
    "message_name_field": (
        "openai",
        {"messages": [{"role": "user", "content": "Hello", "name": "bob"}]},
        "message_field",
        1,
    ),
    "cache_control_part": (
        "anthropic",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}}
                    ],
                }
            ]
        },
        "content_part_field",
        1,
    ),
    "assistant_without_content": (
        "openai",
        {"messages": [*HELLO, {"role": "assistant", "content": None}, *HELLO]},
        "message_without_content",
        1,
    ),
    "empty_content_list": (
        "openai",
        {"messages": [{"role": "user", "content": []}]},
        "empty_content",
        1,
    ),
    "openai_o_series": (
        "openai",
        {"messages": HELLO, "model": "openai/o3-mini"},
        "model_specific",
        1,
    ),
    "timeout_object": (
        "openai",
        {"messages": HELLO, "timeout": httpx.Timeout(30.0)},
        "timeout",
        1,
    ),
}


@pytest.mark.parametrize("case", sorted(DECLINES))
async def test_declined_shapes_are_served_by_python(upstream: RecordingUpstream, case: str) -> None:
    provider, extra, code, upstream_calls = DECLINES[case]
    kwargs = {**deployment_kwargs(provider, upstream.url), **extra}

    response = await litellm.acompletion(**kwargs, rust=True)

    assert not served_by_rust(response)
    assert litellm_fastpath.decline_counts() == {code: 1}
    assert len(upstream.requests) == upstream_calls


async def test_openai_streaming_is_served_by_rust(upstream: RecordingUpstream) -> None:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}],
    }
    upstream.enqueue(
        Reply(
            body=f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(),
            headers={"Content-Type": "text/event-stream"},
        )
    )
    kwargs = {**deployment_kwargs("openai", upstream.url), "messages": HELLO, "stream": True}
    stream = await litellm.acompletion(**kwargs, rust=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream])
    assert text == "Hi"
    assert served_by_rust(stream)
    assert litellm_fastpath.decline_counts() == {}
    assert len(upstream.requests) == 1


async def test_remote_image_for_anthropic_stays_in_python(upstream: RecordingUpstream) -> None:
    """LiteLLM downloads http(s) images for Anthropic (and guards against SSRF): Python's job."""
    messages = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": f"{upstream.url}/cat.png"}}],
        }
    ]
    kwargs = {**deployment_kwargs("anthropic", upstream.url), "messages": messages}
    with pytest.raises(litellm.BadRequestError):
        await litellm.acompletion(**kwargs, rust=True)
    assert litellm_fastpath.decline_counts() == {"image_url_remote": 1}
    assert not any(r.path.endswith("/v1/messages") for r in upstream.requests)


async def test_bedrock_invoke_models_stay_in_python(upstream: RecordingUpstream) -> None:
    kwargs = {
        **deployment_kwargs("bedrock", upstream.url),
        "model": "bedrock/invoke/anthropic.claude-3-5-sonnet-20240620-v1:0",
        "messages": HELLO,
    }
    await litellm.acompletion(**kwargs, rust=True)  # LiteLLM's Invoke route answers it
    assert litellm_fastpath.decline_counts() == {"bedrock_route": 1}
    assert [r.path.rsplit("/", 1)[-1] for r in upstream.requests] == ["invoke"]


async def test_bedrock_system_image_stays_in_python(upstream: RecordingUpstream) -> None:
    png = "data:image/png;base64,iVBORw0KGgo="
    messages = [
        {"role": "system", "content": [{"type": "image_url", "image_url": {"url": png}}]},
        *HELLO,
    ]
    kwargs = {**deployment_kwargs("bedrock", upstream.url), "messages": messages}
    try:
        await litellm.acompletion(**kwargs, rust=True)
    except openai.APIError:
        pass  # whatever LiteLLM does with it, it is LiteLLM's answer
    assert litellm_fastpath.decline_counts() == {"system_image": 1}


async def test_missing_credentials_stay_in_python(
    upstream: RecordingUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    kwargs = {**deployment_kwargs("anthropic", upstream.url), "messages": HELLO}
    del kwargs["api_key"]
    with pytest.raises(litellm.AuthenticationError):
        await litellm.acompletion(**kwargs, rust=True)
    assert litellm_fastpath.decline_counts() == {"credentials": 1}


async def test_model_without_provider_prefix_stays_in_python(upstream: RecordingUpstream) -> None:
    kwargs = {
        **deployment_kwargs("openai", upstream.url),
        "model": "gpt-4o-mini",
        "messages": HELLO,
    }
    response = await litellm.acompletion(**kwargs, rust=True)
    assert not served_by_rust(response)
    assert litellm_fastpath.decline_counts() == {"provider": 1}


async def test_non_string_extra_headers_stay_in_python(upstream: RecordingUpstream) -> None:
    kwargs = {
        **deployment_kwargs("openai", upstream.url),
        "messages": HELLO,
        "extra_headers": {"x-n": 1},
    }
    with pytest.raises(Exception):  # noqa: B017  # LiteLLM's own answer to an int header value
        await litellm.acompletion(**kwargs, rust=True)
    assert litellm_fastpath.decline_counts() == {"extra_headers": 1}


@pytest.mark.parametrize("flag", [1, "true", "yes", False, None])
async def test_only_rust_true_switches_path(upstream: RecordingUpstream, flag: Any) -> None:
    kwargs = {**deployment_kwargs("openai", upstream.url), "messages": HELLO}
    response = await litellm.acompletion(**kwargs, rust=flag)
    assert not served_by_rust(response)
    assert litellm_fastpath.decline_counts() == {}
    assert "rust" not in upstream.requests[0].json()


async def test_extra_headers_are_forwarded(upstream: RecordingUpstream) -> None:
    kwargs = {
        **deployment_kwargs("anthropic", upstream.url),
        "messages": HELLO,
        "extra_headers": {"x-tenant": "acme"},
    }
    response = await litellm.acompletion(**kwargs, rust=True)
    assert served_by_rust(response)
    assert upstream.requests[0].headers["x-tenant"] == "acme"


@pytest.mark.parametrize("provider", ["openai", "anthropic", "bedrock"])
async def test_decline_reasons_are_logged_at_debug(
    upstream: RecordingUpstream, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    kwargs = {**deployment_kwargs(provider, upstream.url), "messages": HELLO, "top_k": 3}
    with caplog.at_level("DEBUG", logger="litellm_fastpath"):
        await litellm.acompletion(**kwargs, rust=True)
    assert any("top_k" in record.getMessage() for record in caplog.records)
    assert all("Hello" not in record.getMessage() for record in caplog.records)


async def test_region_prefixed_bedrock_ids_stay_in_python(upstream: RecordingUpstream) -> None:
    kwargs = {
        **deployment_kwargs("bedrock", upstream.url),
        "model": "bedrock/converse/us-east-1/anthropic.claude-3-5-sonnet-20240620-v1:0",
        "messages": HELLO,
    }
    await litellm.acompletion(**kwargs, rust=True)
    assert litellm_fastpath.decline_counts() == {"bedrock_route": 1}


async def test_non_string_model_stays_in_python(upstream: RecordingUpstream) -> None:
    kwargs = {**deployment_kwargs("openai", upstream.url), "model": None, "messages": HELLO}
    with pytest.raises(Exception):  # noqa: B017  # LiteLLM's own answer to a missing model
        await litellm.acompletion(**kwargs, rust=True)
    assert litellm_fastpath.decline_counts() == {"model": 1}


async def test_per_request_fallbacks_stay_in_python(upstream: RecordingUpstream) -> None:
    kwargs = {
        **deployment_kwargs("openai", upstream.url),
        "messages": HELLO,
        "fallbacks": [{"model": "openai/gpt-4o-mini"}],
    }
    try:
        await litellm.acompletion(**kwargs, rust=True)
    except openai.APIError:
        pass  # however LiteLLM's fallback machinery answers, it is LiteLLM's answer
    assert litellm_fastpath.decline_counts() == {"fallbacks": 1}


async def test_bedrock_without_static_credentials_stays_in_python(
    upstream: RecordingUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    kwargs = {**deployment_kwargs("bedrock", upstream.url), "messages": HELLO}
    del kwargs["aws_access_key_id"], kwargs["aws_secret_access_key"]
    try:
        await litellm.acompletion(**kwargs, rust=True)
    except openai.APIError:
        pass  # botocore's credential chain finds nothing here: LiteLLM's own error
    assert litellm_fastpath.decline_counts() == {"credentials": 1}


async def test_a_lane_replay_the_fast_path_declines_never_calls_the_provider(
    upstream: RecordingUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net behind the lane: a replayed request (its outcome claimed from the lane)
    that the fast path declines raises instead of reaching LiteLLM's own provider call, since
    the lane called the provider once already. (The lane declining such shapes itself is
    tested through the proxy; this is what happens if the two ever disagree.)"""
    from litellm_fastpath import claims

    monkeypatch.setattr(claims, "_running", True)
    claims._claimed_call.set([object()])
    declined = {**deployment_kwargs("openai", upstream.url), "messages": HELLO, "n": 2}
    with pytest.raises(Exception, match="not calling the provider"):
        await litellm.acompletion(**declined, rust=True)
    assert upstream.requests == []
    assert claims.claimed_call() is None
    # Outside a replay, the same call takes LiteLLM's path as before.
    await litellm.acompletion(**declined, rust=True)
    assert len(upstream.requests) == 1
