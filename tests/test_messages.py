"""`litellm.anthropic_messages` (`/v1/messages`) in the SDK: every served shape sends the same
request to a recording upstream and returns the same answer (or raises the same exception) on
the Rust and the Python arm; every other shape declines before any I/O with its reason code."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import litellm
import pytest

import litellm_fastpath
from devtools.answers import aws_event_frame
from devtools.deployments import bedrock_invoke_kwargs, deployment_kwargs
from devtools.polling import ABSENCE_S, wait_until_async
from devtools.upstream import Recorded, RecordingUpstream, Reply
from tests import messages_cases as cases
from tests.conftest import VOLATILE_LOG_FIELDS, Recorder, litellm_callback, of_call

pytestmark = pytest.mark.asyncio

# Headers each HTTP client sets its own way (the provider sees no difference in the request).
_CLIENT_HEADERS = {
    "host",
    "content-length",
    "accept",
    "accept-encoding",
    "connection",
    "user-agent",
}
# Bedrock signs per request.
_SIGNATURE_HEADERS = {"authorization", "x-amz-date", "x-amz-content-sha256"}


def sent(request: Recorded) -> tuple[str, dict[str, str], Any]:
    headers = {
        k.lower(): v
        for k, v in request.headers.items()
        if k.lower() not in _CLIENT_HEADERS | _SIGNATURE_HEADERS
    }
    return request.path, headers, request.json()


async def both(
    upstream: RecordingUpstream,
    call: dict[str, Any],
    *replies: Reply,
    deployment: dict[str, Any] | None = None,
) -> list[tuple[Any, list[Recorded], dict[str, int]]]:
    """The call through Rust, then through LiteLLM: (outcome, upstream requests, declines)."""
    out = []
    for rust in (True, False):
        upstream.clear()
        litellm_fastpath.reset_decline_counts()
        upstream.enqueue(*replies)
        try:
            outcome: Any = await litellm.anthropic_messages(
                **{**(deployment or deployment_kwargs("anthropic", upstream.url)), **call},
                rust=rust,
            )
            if not isinstance(outcome, dict):
                outcome = b"".join([piece async for piece in outcome])
        except Exception as exc:
            outcome = exc
        out.append((outcome, list(upstream.requests), litellm_fastpath.decline_counts()))
    return out


def view(outcome: Any) -> Any:
    if isinstance(outcome, Exception):
        return (type(outcome).__name__, getattr(outcome, "status_code", None), str(outcome))
    return outcome


def hi(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, **extra}


SERVED: dict[str, dict[str, Any]] = {
    "text": hi(),
    "system_text": hi(system="Be brief."),
    "system_blocks_cached": hi(
        system=[
            {
                "type": "text",
                "text": "Rules " * 300,
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            }
        ]
    ),
    "sampling": hi(temperature=0.2, top_p=0.9, top_k=5, stop_sequences=["END"]),
    "metadata_trimmed": hi(metadata={"user_id": "u-1", "session": "dropped"}),
    "metadata_empty": hi(metadata={}),
    "dropped_fields": hi(user="someone", service_tier="auto", extra_body={"x": 1}, foo="bar"),
    "blank_blocks_stripped": {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "  "}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": ""}]},
            {
                "role": "user",
                "content": [
                    {"type": "thinking", "thinking": ""},
                    {"type": "text", "text": "again"},
                ],
            },
        ],
        "max_tokens": 64,
    },
    "provider_specific_fields": {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "provider_specific_fields": {"a": 1}}],
            }
        ],
        "max_tokens": 64,
    },
    "system_role_message_forwarded": {
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
        "max_tokens": 64,
    },
    "tools_and_choice": hi(
        tools=[cases.tool(i) for i in range(3)],
        tool_choice={"type": "tool", "name": "tool_1", "disable_parallel_tool_use": True},
    ),
    "custom_typed_tool": hi(tools=[{**cases.tool(0), "type": "custom"}]),
    "thinking": hi(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1024}),
    "thinking_disabled": hi(thinking={"type": "disabled"}),
    "caller_betas_sorted": hi(
        extra_headers={"anthropic-beta": "zzz-2025,files-api-2025-04-14", "x-trace": "t1"}
    ),
    "caller_version": hi(extra_headers={"anthropic-version": "2024-01-01"}),
    "non_ascii_and_escapes": hi(
        messages=[{"role": "user", "content": 'héllo ✓ \u2028 "quoted" \\ \x01 ' + "長い" * 500}]
    ),
    "coding_agent": cases.coding_agent_request(),
}


@pytest.mark.parametrize("shape", sorted(SERVED))
async def test_served_shapes_match_litellm(upstream: RecordingUpstream, shape: str) -> None:
    (rust, rust_sent, rust_declines), (plain, plain_sent, _) = await both(
        upstream, SERVED[shape], Reply(json=cases.answer()), Reply(json=cases.answer())
    )
    assert rust_declines == {}, rust_declines
    assert [sent(r) for r in rust_sent] == [sent(r) for r in plain_sent]
    assert len(rust_sent) == 1
    assert view(rust) == view(plain) == cases.answer()


async def test_answers_are_the_providers_json_as_is(upstream: RecordingUpstream) -> None:
    odd = {**cases.tool_answer(), "extra_field": {"kept": [1.5, None]}, "container": None}
    (rust, _, declines), (plain, _, _) = await both(
        upstream, hi(), Reply(json=odd), Reply(json=odd)
    )
    assert declines == {}
    assert rust == plain == odd
    assert list(rust) == list(odd)


async def test_api_base_with_the_path_is_used_as_is(upstream: RecordingUpstream) -> None:
    deployment = {**deployment_kwargs("anthropic", upstream.url + "/v1/messages")}
    (_, rust_sent, declines), (_, plain_sent, _) = await both(
        upstream,
        hi(),
        Reply(json=cases.answer()),
        Reply(json=cases.answer()),
        deployment=deployment,
    )
    assert declines == {}
    assert [r.path for r in rust_sent] == [r.path for r in plain_sent] == ["/v1/messages"]


DECLINED: dict[str, tuple[dict[str, Any], str]] = {
    "context_management": (
        hi(context_management={"edits": [{"type": "clear_tool_uses_20250919"}]}),
        "messages_param",
    ),
    "output_format": (
        hi(output_format={"type": "json_schema", "schema": {"type": "object"}}),
        "messages_param",
    ),
    "output_config": (hi(output_config={"effort": "low"}), "messages_param"),
    "reasoning_effort": (hi(reasoning_effort="low"), "messages_param"),
    "mcp_servers": (
        hi(mcp_servers=[{"type": "url", "url": "https://mcp", "name": "m"}]),
        "messages_param",
    ),
    "adaptive_thinking": (hi(max_tokens=4000, thinking={"type": "adaptive"}), "messages_param"),
    "temperature_with_thinking": (
        hi(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1024}, temperature=0.5),
        "messages_param",
    ),
    "server_tool": (
        hi(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
        "messages_tool",
    ),
    "tool_id_rewritten": (
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "call.1:0", "name": "t", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "call.1:0", "content": "ok"}
                    ],
                },
            ],
            "max_tokens": 64,
        },
        "messages_block",
    ),
    "server_tool_block": (
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}
                    ],
                },
            ],
            "max_tokens": 64,
        },
        "messages_block",
    ),
    "encrypted_reasoning": (
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "thinking",
                            "thinking": "t",
                            "signature": "litellm_encrypted_reasoning:abc",
                        }
                    ],
                },
                {"role": "user", "content": "go"},
            ],
            "max_tokens": 64,
        },
        "messages_block",
    ),
    "caller_credential": (hi(extra_headers={"x-api-key": "sk-other"}), "credentials"),
    "non_finite": (hi(temperature=float("nan")), "param_type"),
    "mock_response": (hi(mock_response="canned"), "mock_response"),
}


@pytest.mark.parametrize("shape", sorted(DECLINED))
async def test_declined_shapes_stay_on_litellm(upstream: RecordingUpstream, shape: str) -> None:
    call, code = DECLINED[shape]
    replies = [Reply(json=cases.answer()), Reply(json=cases.answer())]
    (rust, rust_sent, declines), (plain, plain_sent, _) = await both(upstream, call, *replies)
    assert declines == {code: 1}
    assert [sent(r) for r in rust_sent] == [sent(r) for r in plain_sent]
    assert view(rust) == view(plain)


async def test_a_hook_that_sees_requests_sends_them_to_litellm(upstream: RecordingUpstream) -> None:
    class Rewriter(litellm.integrations.custom_logger.CustomLogger):
        async def async_pre_request_hook(
            self, model: str, messages: Any, kwargs: dict[str, Any]
        ) -> Any:
            kwargs["temperature"] = 0.1
            return kwargs

    with litellm_callback(Rewriter()):
        (_, rust_sent, declines), (_, plain_sent, _) = await both(
            upstream, hi(), Reply(json=cases.answer()), Reply(json=cases.answer())
        )
    assert declines == {"messages_hook": 1}
    assert [sent(r) for r in rust_sent] == [sent(r) for r in plain_sent]
    assert rust_sent[0].json()["temperature"] == 0.1


@pytest.mark.parametrize(
    "status, body",
    [
        (
            400,
            {"type": "error", "error": {"type": "invalid_request_error", "message": "bad field"}},
        ),
        (401, {"type": "error", "error": {"type": "authentication_error", "message": "no"}}),
        (404, {"type": "error", "error": {"type": "not_found_error", "message": "model"}}),
        (413, {"type": "error", "error": {"type": "request_too_large", "message": "big"}}),
        (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        (500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}),
        (503, {"type": "error", "error": {"type": "api_error", "message": "later"}}),
        (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        (
            400,
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "prompt is too long"},
            },
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_errors_are_litellms_after_one_request(
    upstream: RecordingUpstream, status: int, body: dict[str, Any], stream: bool
) -> None:
    replies = [Reply(status=status, json=body), Reply(status=status, json=body)]
    (rust, rust_sent, declines), (plain, plain_sent, _) = await both(
        upstream, hi(stream=stream), *replies
    )
    assert declines == {}
    assert len(rust_sent) == len(plain_sent) == 1
    assert isinstance(rust, Exception)
    assert view(rust) == view(plain)


async def test_an_unparsable_answer_is_litellms_error(upstream: RecordingUpstream) -> None:
    replies = [Reply(body=b"not json"), Reply(body=b"not json")]
    (rust, _, declines), (plain, _, _) = await both(upstream, hi(), *replies)
    assert declines == {}
    assert view(rust) == view(plain)


async def test_timeouts_are_litellms(upstream: RecordingUpstream) -> None:
    replies = [Reply(json=cases.answer(), delay_s=2.0), Reply(json=cases.answer(), delay_s=2.0)]
    (rust, _, declines), (plain, _, _) = await both(upstream, hi(timeout=0.3), *replies)
    assert declines == {}
    assert type(rust) is type(plain) is litellm.Timeout
    assert str(rust).split("time taken=")[0] == str(plain).split("time taken=")[0]


async def test_disconnects_are_one_request_and_litellms_class(upstream: RecordingUpstream) -> None:
    replies = [Reply(action="disconnect"), Reply(action="disconnect")]
    (rust, rust_sent, declines), (plain, plain_sent, _) = await both(upstream, hi(), *replies)
    assert declines == {}
    assert len(rust_sent) == len(plain_sent) == 1
    assert type(rust) is type(plain)
    assert rust.status_code == plain.status_code


def sse(body: bytes, **extra: Any) -> Reply:
    return Reply(body=body, headers={"content-type": "text/event-stream"}, **extra)


@pytest.mark.parametrize("body", ["text_1", "text_100", "text_10000", "tools_and_thinking"])
async def test_streams_are_the_providers_bytes(upstream: RecordingUpstream, body: str) -> None:
    raw = {
        "text_1": cases.text_stream(1),
        "text_100": cases.text_stream(100),
        "text_10000": cases.text_stream(10_000),
        "tools_and_thinking": b"".join(cases.tool_stream_events()),
    }[body]
    (rust, rust_sent, declines), (plain, plain_sent, _) = await both(
        upstream, hi(stream=True), sse(raw), sse(raw)
    )
    assert declines == {}
    assert rust == plain == raw
    assert [sent(r) for r in rust_sent] == [sent(r) for r in plain_sent]


async def test_a_stream_split_at_every_byte_boundary_is_relayed_whole(
    upstream: RecordingUpstream,
) -> None:
    raw = b"".join(cases.tool_stream_events())
    (rust, _, _), (plain, _, _) = await both(
        upstream, hi(stream=True), sse(raw, action="trickle", pieces=len(raw)), sse(raw)
    )
    assert rust == plain == raw


async def test_a_stream_is_handed_over_as_it_arrives(upstream: RecordingUpstream) -> None:
    events = cases.tool_stream_events()
    upstream.enqueue(sse(b"".join(events), action="trickle", pieces=len(events), delay_s=0.05))
    stream = await litellm.anthropic_messages(
        **deployment_kwargs("anthropic", upstream.url), **hi(stream=True), rust=True
    )
    loop = asyncio.get_running_loop()
    arrivals = []
    async for piece in stream:
        arrivals.append((loop.time(), piece))
    assert len(arrivals) >= len(events) // 2
    assert arrivals[-1][0] - arrivals[0][0] > 0.5


async def test_error_events_and_pings_pass_through(upstream: RecordingUpstream) -> None:
    events = cases.tool_stream_events()[:5]
    error = (
        b"event: error\ndata: "
        b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    )
    raw = b"".join(events) + error
    (rust, _, _), (plain, _, _) = await both(upstream, hi(stream=True), sse(raw), sse(raw))
    assert rust == plain == raw


async def test_a_stalled_stream_times_out_like_litellm(upstream: RecordingUpstream) -> None:
    raw = cases.text_stream(3)
    replies = [sse(raw, action="stall"), sse(raw, action="stall")]
    (rust, _, _), (plain, _, _) = await both(upstream, hi(stream=True, timeout=0.5), *replies)
    assert isinstance(rust, Exception) and isinstance(plain, Exception)
    assert type(rust) is type(plain)


async def test_a_stream_timeout_wins_for_streams_like_litellm(upstream: RecordingUpstream) -> None:
    raw = cases.text_stream(3)
    replies = [sse(raw, action="stall"), sse(raw, action="stall")]
    call = hi(stream=True, timeout=30, stream_timeout=0.5)
    (rust, _, declines), (plain, _, _) = await both(upstream, call, *replies)
    assert declines == {}
    assert isinstance(rust, Exception) and isinstance(plain, Exception)
    assert type(rust) is type(plain)


async def test_closing_a_stream_closes_the_upstream_connection(upstream: RecordingUpstream) -> None:
    raw = cases.text_stream(200)
    upstream.enqueue(sse(raw, action="trickle", pieces=200, delay_s=0.05))
    stream = await litellm.anthropic_messages(
        **deployment_kwargs("anthropic", upstream.url), **hi(stream=True), rust=True
    )
    await stream.__anext__()
    await stream.aclose()
    await wait_until_async(stream._handle.done, "the upstream connection is still open")


async def test_logging_is_litellms(upstream: RecordingUpstream, recorder: Recorder) -> None:
    payloads = []
    for rust in (True, False):
        upstream.enqueue(Reply(json=cases.tool_answer()))
        call_id = f"call-{rust}"
        await litellm.anthropic_messages(
            **deployment_kwargs("anthropic", upstream.url),
            **cases.coding_agent_request(),
            litellm_call_id=call_id,
            rust=rust,
        )
        payloads.append(await _logged_once(recorder, call_id))
    rust_log, plain_log = (_comparable_log(p) for p in payloads)
    assert rust_log == plain_log
    assert rust_log["response_cost"] > 0
    assert rust_log["call_type"] == "anthropic_messages"


@pytest.mark.parametrize("body", ["text", "tools_and_thinking"])
async def test_stream_logging_is_litellms(
    upstream: RecordingUpstream, recorder: Recorder, body: str
) -> None:
    raw = cases.text_stream(50) if body == "text" else b"".join(cases.tool_stream_events())
    rust_log, plain_log = await _stream_logs(
        upstream, recorder, sse(raw), deployment_kwargs("anthropic", upstream.url), f"stream-{body}"
    )
    assert rust_log == plain_log
    assert rust_log["response_cost"] > 0


async def _stream_logs(
    upstream: RecordingUpstream,
    recorder: Recorder,
    reply: Reply,
    deployment: dict[str, Any],
    label: str,
) -> list[dict[str, Any]]:
    """A stream read to its end on each arm: the comparable logging payload of each (Rust first)."""
    payloads = []
    for rust in (True, False):
        upstream.enqueue(reply)
        call_id = f"{label}-{rust}"
        stream = await litellm.anthropic_messages(
            **deployment, **hi(stream=True), litellm_call_id=call_id, rust=rust
        )
        async for _ in stream:
            pass
        payloads.append(_comparable_log(await _logged_once(recorder, call_id)))
    return payloads


async def _logged_once(recorder: Recorder, call_id: str) -> dict[str, Any]:
    """The one success event of this call (other tests' stream logging may land meanwhile)."""
    mine = await recorder.logged(of_call(call_id), grace=ABSENCE_S)
    assert len(mine) == 1, call_id
    return mine[0]["standard_logging_object"]  # type: ignore[no-any-return]


# Fields of the standard logging payload that differ on every call, or by which client sent it.
_VOLATILE_LOG_FIELDS = VOLATILE_LOG_FIELDS | {"metadata", "hidden_params", "request_tags"}


def _comparable_log(payload: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in payload.items() if k not in _VOLATILE_LOG_FIELDS}
    response = out.get("response")
    if isinstance(response, dict):
        out["response"] = {k: v for k, v in response.items() if k not in ("id", "created")}
    return json.loads(json.dumps(out, default=str))


async def test_rust_false_and_absent_never_take_the_fast_path(upstream: RecordingUpstream) -> None:
    upstream.enqueue(Reply(json=cases.answer()), Reply(json=cases.answer()))
    for flag in ({}, {"rust": False}):
        await litellm.anthropic_messages(
            **deployment_kwargs("anthropic", upstream.url), **hi(), **flag
        )
    assert all(r.headers.get("user-agent", "").startswith("litellm/") for r in upstream.requests)


# -- Bedrock Invoke (Claude models) -------------------------------------------------------------

BEDROCK_SERVED: dict[str, dict[str, Any]] = {
    "text": hi(),
    "system_text_becomes_blocks": hi(system="Be brief."),
    "billing_note_dropped": hi(
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=1"},
            {"type": "text", "text": "Rules", "cache_control": {"type": "ephemeral"}},
        ]
    ),
    "sampling_and_metadata": hi(
        temperature=0.2, top_p=0.9, top_k=5, stop_sequences=["END"], metadata={"user_id": "u"}
    ),
    "tools": hi(tools=[cases.tool(i) for i in range(3)], tool_choice={"type": "auto"}),
    "thinking": hi(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1024}),
    "blank_blocks_stripped": SERVED["blank_blocks_stripped"],
    "dropped_fields": hi(user="someone", foo="bar"),
    "caller_version_header": hi(extra_headers={"anthropic-version": "2023-06-01"}),
}


@pytest.mark.parametrize(
    "model", [cases.BEDROCK_MODEL, "us.anthropic.claude-sonnet-4-5-20250929-v1:0"]
)
@pytest.mark.parametrize("shape", sorted(BEDROCK_SERVED))
async def test_bedrock_shapes_match_litellm(
    upstream: RecordingUpstream, shape: str, model: str
) -> None:
    (rust, rust_sent, declines), (plain, plain_sent, _) = await both(
        upstream,
        BEDROCK_SERVED[shape],
        Reply(json=cases.answer()),
        Reply(json=cases.answer()),
        deployment=bedrock_invoke_kwargs(upstream.url, model),
    )
    assert declines == {}, declines
    assert [sent(r) for r in rust_sent] == [sent(r) for r in plain_sent]
    assert rust_sent[0].path == f"/model/{model}/invoke"
    assert view(rust) == view(plain) == cases.answer()


BEDROCK_DECLINED: dict[str, tuple[dict[str, Any], str, str]] = {
    "converse_route": (hi(), "bedrock/converse/" + cases.BEDROCK_MODEL, "bedrock_route"),
    "not_claude": (hi(), "bedrock/meta.llama3-70b-instruct-v1:0", "bedrock_route"),
    "system_message": (
        {
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
            "max_tokens": 9,
        },
        f"bedrock/{cases.BEDROCK_MODEL}",
        "message_role",
    ),
    "cache_ttl": (
        hi(
            system=[
                {"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ]
        ),
        f"bedrock/{cases.BEDROCK_MODEL}",
        "messages_block",
    ),
    "unnamed_tool": (
        hi(tools=[{"input_schema": {"type": "object"}}]),
        f"bedrock/{cases.BEDROCK_MODEL}",
        "messages_tool",
    ),
    "beta_header": (
        hi(extra_headers={"anthropic-beta": "context-management-2025-06-27"}),
        f"bedrock/{cases.BEDROCK_MODEL}",
        "messages_param",
    ),
}


@pytest.mark.parametrize("shape", sorted(BEDROCK_DECLINED))
async def test_bedrock_declines_stay_on_litellm(upstream: RecordingUpstream, shape: str) -> None:
    call, model, code = BEDROCK_DECLINED[shape]
    deployment = {**bedrock_invoke_kwargs(upstream.url), "model": model}
    (rust, rust_sent, declines), (plain, plain_sent, _) = await both(
        upstream,
        call,
        Reply(json=cases.answer()),
        Reply(json=cases.answer()),
        deployment=deployment,
    )
    assert declines == {code: 1}
    assert [sent(r) for r in rust_sent] == [sent(r) for r in plain_sent]
    assert view(rust) == view(plain)


def event_stream(body: bytes, **extra: Any) -> Reply:
    return Reply(body=body, headers={"content-type": "application/vnd.amazon.eventstream"}, **extra)


@pytest.mark.parametrize("variant", ["plain", "cache", "no_stop"])
async def test_bedrock_streams_are_litellms_sse(upstream: RecordingUpstream, variant: str) -> None:
    events = cases.bedrock_events(cache=variant == "cache", stop=variant != "no_stop")
    raw = cases.bedrock_invoke_stream(events)
    (rust, rust_sent, declines), (plain, plain_sent, _) = await both(
        upstream,
        hi(stream=True),
        event_stream(raw, action="trickle", pieces=len(raw) // 7),
        event_stream(raw),
        deployment=bedrock_invoke_kwargs(upstream.url),
    )
    assert declines == {}
    assert isinstance(rust, bytes), rust
    assert rust == plain
    assert rust_sent[0].path.endswith("/invoke-with-response-stream")
    assert [sent(r) for r in rust_sent] == [sent(r) for r in plain_sent]


async def test_bedrock_stream_exceptions_are_litellms(upstream: RecordingUpstream) -> None:
    events = cases.bedrock_events()[:4]
    raw = cases.bedrock_invoke_stream(events) + aws_event_frame(
        None, {"message": "Too many requests"}, exception_type="throttlingException"
    )
    outcomes = []
    for rust in (True, False):
        upstream.clear()
        upstream.enqueue(event_stream(raw))
        stream = await litellm.anthropic_messages(
            **bedrock_invoke_kwargs(upstream.url), **hi(stream=True), rust=rust
        )
        got = b""
        try:
            async for piece in stream:
                got += piece
        except Exception as exc:
            outcomes.append((got, view(exc)))
    assert len(outcomes) == 2
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("status", [400, 403, 429, 500, 503])
async def test_bedrock_errors_are_litellms(upstream: RecordingUpstream, status: int) -> None:
    body = {"message": f"upstream said {status}"}
    (rust, rust_sent, declines), (plain, plain_sent, _) = await both(
        upstream,
        hi(),
        Reply(status=status, json=body),
        Reply(status=status, json=body),
        deployment=bedrock_invoke_kwargs(upstream.url),
    )
    assert declines == {}
    assert len(rust_sent) == len(plain_sent) == 1
    assert view(rust) == view(plain)


async def test_bedrock_timeouts_are_litellms(upstream: RecordingUpstream) -> None:
    replies = [Reply(json=cases.answer(), delay_s=2.0), Reply(json=cases.answer(), delay_s=2.0)]
    (rust, _, declines), (plain, _, _) = await both(
        upstream, hi(timeout=0.3), *replies, deployment=bedrock_invoke_kwargs(upstream.url)
    )
    assert declines == {}
    assert type(rust) is type(plain)
    assert str(rust).split("time taken=")[0] == str(plain).split("time taken=")[0]


async def test_bedrock_stream_logging_is_litellms(
    upstream: RecordingUpstream, recorder: Recorder
) -> None:
    raw = cases.bedrock_invoke_stream(cases.bedrock_events(cache=True))
    rust_log, plain_log = await _stream_logs(
        upstream, recorder, event_stream(raw), bedrock_invoke_kwargs(upstream.url), "bedrock-stream"
    )
    assert rust_log == plain_log
    assert rust_log["response_cost"] > 0


async def test_a_closed_stream_is_logged_with_what_was_read(
    upstream: RecordingUpstream, recorder: Recorder
) -> None:
    raw = cases.text_stream(200)
    logged = []
    for rust in (True, False):
        call_id = f"closed-{rust}"
        upstream.enqueue(sse(raw, action="trickle", pieces=100, delay_s=0.02))
        stream = await litellm.anthropic_messages(
            **deployment_kwargs("anthropic", upstream.url),
            **hi(stream=True),
            litellm_call_id=call_id,
            rust=rust,
        )
        await stream.__anext__()
        await stream.aclose()
        logged.append(await _logged_once(recorder, call_id))
    rust_log, plain_log = logged
    assert rust_log["prompt_tokens"] == plain_log["prompt_tokens"] == 11
    assert rust_log["response_cost"] > 0 and plain_log["response_cost"] > 0


ODD: dict[str, dict[str, Any]] = {
    "empty_messages": {"messages": [], "max_tokens": 64},
    "content_none": {"messages": [{"role": "user", "content": None}], "max_tokens": 64},
    "no_content": {"messages": [{"role": "user"}], "max_tokens": 64},
    "no_role": {"messages": [{"content": "hi"}], "max_tokens": 64},
    "block_not_an_object": {"messages": [{"role": "user", "content": ["hi"]}], "max_tokens": 64},
    "block_without_type": {
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "max_tokens": 64,
    },
    "message_not_an_object": {"messages": ["hi"], "max_tokens": 64},
    "max_tokens_float": hi(max_tokens=10.5),
    "max_tokens_zero": hi(max_tokens=0),
    "max_tokens_negative": hi(max_tokens=-5),
    "max_tokens_string": hi(max_tokens="64"),
    "system_number": hi(system=5),
    "tools_not_a_list": hi(tools={"name": "t"}),
    "metadata_not_an_object": hi(metadata="m"),
    "metadata_user_id_number": hi(metadata={"user_id": 5}),
    "stream_string": hi(stream="yes"),
    "stream_none": hi(stream=None),
    "temperature_string": hi(temperature="hot"),
    "top_k_float": hi(top_k=2.5),
    "thinking_string": hi(thinking="on"),
    "deeply_nested_tool_input": hi(tools=[{**cases.tool(0), "input_schema": {"a": [[[[[[1]]]]]]}}]),
    "non_string_key": {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a", 1: 2}]}],
        "max_tokens": 9,
    },
    "lone_surrogate": hi(messages=[{"role": "user", "content": "bad \ud800 text"}]),
}


@pytest.mark.parametrize("shape", sorted(ODD))
async def test_odd_requests_get_litellms_answer(upstream: RecordingUpstream, shape: str) -> None:
    replies = [Reply(json=cases.answer()), Reply(json=cases.answer())]
    (rust, rust_sent, _), (plain, plain_sent, _) = await both(upstream, ODD[shape], *replies)
    assert [sent(r) for r in rust_sent] == [sent(r) for r in plain_sent]
    assert view(rust) == view(plain)


async def test_a_stream_is_logged_once_its_reader_is_done(
    upstream: RecordingUpstream, recorder: Recorder
) -> None:
    # The proxy sends its cost headers after the first chunk: logging must not land before the
    # reader is through (on LiteLLM's path its generator logs on its way out).
    raw = cases.text_stream(1)
    for rust in (True, False):
        call_id = f"reader-done-{rust}"
        upstream.enqueue(sse(raw))
        stream = await litellm.anthropic_messages(
            **deployment_kwargs("anthropic", upstream.url),
            **hi(stream=True),
            litellm_call_id=call_id,
            rust=rust,
        )
        got = b""
        while len(got) < len(raw):
            got += await stream.__anext__()
        await asyncio.sleep(ABSENCE_S)  # time enough for logging that came too early
        assert not [kw for kw, _ in recorder.successes if kw.get("litellm_call_id") == call_id]
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        await _logged_once(recorder, call_id)
