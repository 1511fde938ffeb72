"""Streamed chat in the SDK: `litellm.acompletion(stream=True, rust=True)` against LiteLLM's own
stream for the same upstream events, chunk by chunk, plus the faults a stream can meet.
"""

from __future__ import annotations

import json
import time
from typing import Any

import litellm
import pytest

import litellm_fastpath
from devtools.answers import aws_event_frame, openai_stream_events, stream_pieces
from devtools.deployments import deployment_kwargs
from devtools.polling import ABSENCE_S, PROMPTLY_S, wait_until_async
from devtools.upstream import RecordingUpstream, Reply
from tests.conftest import Recorder
from tests.test_streaming_proxy import DONE, SCENARIOS, chunk, sse_reply
from tests.test_tools import converse_answer, tool_use_block

MESSAGES = [{"role": "user", "content": "hi"}]


def dumped(item: Any) -> dict[str, Any]:
    data = json.loads(item.model_dump_json(exclude_none=True, exclude_unset=True))
    data.pop("created", None)
    return data


async def open_stream(
    upstream: RecordingUpstream,
    provider: str,
    rust: bool,
    reply: Reply | None = None,
    **kwargs: Any,
) -> Any:
    """A streamed call to `provider`'s deployment at `upstream` (scripted to answer `reply`, its
    earlier requests forgotten, when given)."""
    if reply is not None:
        upstream.clear()
        upstream.set_default(STREAM_PATHS[provider], reply)
    return await litellm.acompletion(
        **deployment_kwargs(provider, upstream.url),
        messages=MESSAGES,
        stream=True,
        rust=rust,
        **kwargs,
    )


# Where each provider's streams are asked for.
STREAM_PATHS = {
    "openai": "/chat/completions",
    "anthropic": "/v1/messages",
    "bedrock": "/converse-stream",
}


async def collect(upstream: RecordingUpstream, rust: bool, **kwargs: Any) -> tuple[Any, list]:
    stream = await open_stream(upstream, "openai", rust, **kwargs)
    return stream, [dumped(item) async for item in stream]


async def twin_streams(
    upstream: RecordingUpstream, provider: str, reply: Reply, *, wire: bool = False, **kwargs: Any
) -> tuple[Any, Any]:
    """The same stream through Rust, then through LiteLLM: (stream, its chunks, the requests the
    upstream got: their bodies, with `wire` their bodies and headers)."""
    out = []
    for rust in (True, False):
        stream = await open_stream(upstream, provider, rust, reply, **kwargs)
        chunks = [dumped(item) async for item in stream]
        if provider == "anthropic":  # each path makes up the message id
            for item in chunks:
                item.pop("id")
        sent = [(r.json(), r.headers) if wire else r.json() for r in upstream.requests]
        out.append((stream, chunks, sent))
    return out[0], out[1]


def served_by_rust(stream: Any) -> bool:
    return stream._hidden_params["additional_headers"].get("x-litellm-rust") == "true"


@pytest.mark.parametrize("count", [1, 10_000])
async def test_long_and_short_streams(upstream: RecordingUpstream, count: int) -> None:
    events = openai_stream_events("gpt-4o-mini", stream_pieces(count), include_usage=True)
    (rust, rust_chunks, _), (_, plain_chunks, _) = await twin_streams(
        upstream, "openai", sse_reply(events), stream_options={"include_usage": True}
    )
    assert served_by_rust(rust)
    assert len(rust_chunks) == count + 3  # role, pieces, finish, usage
    assert rust_chunks == plain_chunks


async def test_events_split_at_every_byte_boundary(upstream: RecordingUpstream) -> None:
    # One piece per byte, a multi-byte character included: the decoder must join them.
    events = [chunk({"role": "assistant", "content": "é✓"}), chunk({}, "stop"), DONE]
    body = b"".join(events)
    reply = sse_reply(events, action="trickle", pieces=len(body), delay_s=0.0005)
    (rust, rust_chunks, _), (_, plain_chunks, _) = await twin_streams(upstream, "openai", reply)
    assert served_by_rust(rust)
    assert rust_chunks == plain_chunks
    assert rust_chunks[0]["choices"][0]["delta"]["content"] == "é✓"


async def failure(
    upstream: RecordingUpstream, reply: Reply, rust: bool, provider: str = "openai", **kwargs: Any
) -> Any:
    """How a stream that fails fails: the exception, the chunks before it, the requests sent."""
    received = []
    with pytest.raises(Exception) as raised:
        async for item in await open_stream(upstream, provider, rust, reply, **kwargs):
            received.append(dumped(item))
    return raised.value, received, len(upstream.requests)


def described(exc: Any) -> tuple[Any, ...]:
    original = getattr(exc, "original_exception", None)
    return (
        type(exc).__name__,
        getattr(exc, "status_code", None),
        type(original).__name__,
        getattr(exc, "is_pre_first_chunk", None),
        getattr(exc, "generated_content", None),
    )


async def test_error_event_mid_stream(upstream: RecordingUpstream) -> None:
    events = [
        chunk({"role": "assistant", "content": "partial"}),
        b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
    ]
    rust = await failure(upstream, sse_reply(events), True)
    plain = await failure(upstream, sse_reply(events), False)
    assert described(rust[0]) == described(plain[0])
    assert str(rust[0]) == str(plain[0])
    assert rust[1] == plain[1]
    assert rust[2] == 1


async def test_repeating_model_is_stopped_like_litellm(upstream: RecordingUpstream) -> None:
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": "abc"})] * (litellm.REPEATED_STREAMING_CHUNK_LIMIT + 5)
    rust = await failure(upstream, sse_reply(events), True)
    plain = await failure(upstream, sse_reply(events), False)
    assert described(rust[0]) == described(plain[0])
    assert len(rust[1]) == len(plain[1])


async def test_disconnect_mid_stream_fails_like_litellm(upstream: RecordingUpstream) -> None:
    events = [chunk({"role": "assistant", "content": "partial"}), chunk({"content": "more"})]
    reply = sse_reply([*events, chunk({}, "stop")], action="disconnect_mid_body")
    rust = await failure(upstream, reply, True)
    plain = await failure(upstream, reply, False)
    assert described(rust[0])[:4] == described(plain[0])[:4]
    assert rust[2] == 1


async def test_stalled_stream_times_out(upstream: RecordingUpstream) -> None:
    events = [chunk({"role": "assistant", "content": "a"}), chunk({"content": "b"}), DONE]
    reply = sse_reply(events, action="trickle", pieces=2, delay_s=30.0)
    started = time.monotonic()
    # Long enough for the first piece on a loaded machine (CI saw 0.5 s pass before it once),
    # short against the 30 s stall.
    rust = await failure(upstream, reply, True, timeout=2.0)
    assert time.monotonic() - started < PROMPTLY_S  # not the 30 s the second piece takes
    plain = await failure(upstream, reply, False, timeout=2.0)
    assert described(rust[0])[:3] == described(plain[0])[:3]


async def test_upstream_error_status_raises_before_any_chunk(upstream: RecordingUpstream) -> None:
    reply = Reply(status=429, json={"error": {"message": "slow down", "type": "rate_limit"}})
    rust = await failure(upstream, reply, True)
    plain = await failure(upstream, reply, False)
    assert type(rust[0]) is type(plain[0]) is litellm.RateLimitError
    assert str(rust[0]) == str(plain[0])
    assert rust[2] == 1


async def test_closing_the_stream_closes_the_upstream_request(upstream: RecordingUpstream) -> None:
    events = [chunk({"role": "assistant", "content": "a"})] + [chunk({"content": "b"})] * 50
    upstream.set_default(
        "/chat/completions", sse_reply([*events, DONE], action="trickle", pieces=50, delay_s=0.2)
    )
    stream = await open_stream(upstream, "openai", True)
    first = await stream.__anext__()
    assert first.choices[0].delta.content == "a"
    await stream.aclose()
    await wait_until_async(stream._handle.done, "the upstream request is still open")


async def test_logging_sees_one_success_with_litellm_usage(
    upstream: RecordingUpstream, recorder: Recorder
) -> None:
    seen: dict[bool, list[Any]] = {}
    no_usage = [chunk({"content": "x"}), chunk({}, "stop"), DONE]
    for rust in (True, False):
        seen[rust] = []
        for events in (SCENARIOS["mock-3"], no_usage):
            recorder.successes.clear()
            upstream.set_default("/chat/completions", sse_reply(events))
            await collect(upstream, rust)
            assert len(await recorder.logged(grace=ABSENCE_S)) == 1
            kwargs, response = recorder.successes[0]
            message = response.choices[0].message
            seen[rust].append(
                (response.usage.model_dump(), kwargs.get("response_cost"), message.content)
            )
    assert seen[True] == seen[False]


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"stream_options": {"include_usage": True, "x": 1}}, "stream"),
        ({"n": 2}, "stream"),
        ({"logprobs": True}, "stream"),
    ],
)
async def test_stream_shapes_left_to_litellm(
    upstream: RecordingUpstream, kwargs: dict[str, Any], code: str
) -> None:
    upstream.set_default("/chat/completions", sse_reply(SCENARIOS["mock-3"]))
    stream, _ = await collect(upstream, True, **kwargs)
    assert not served_by_rust(stream)
    assert litellm_fastpath.decline_counts() == {code: 1}


def test_sync_streams_stay_on_litellm(upstream: RecordingUpstream) -> None:
    upstream.set_default("/chat/completions", sse_reply(SCENARIOS["mock-3"]))
    stream = litellm.completion(
        **deployment_kwargs("openai", upstream.url), messages=MESSAGES, stream=True, rust=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream) == "w0 w1 w2 "
    assert litellm_fastpath.decline_counts() == {"stream": 1}


# -- Anthropic ---------------------------------------------------------------------------------


def anthropic_event(name: str, **data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def _message_start(**usage: Any) -> bytes:
    usage = usage or {"input_tokens": 11, "output_tokens": 1}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x"}
    return anthropic_event("message_start", message={**message, "usage": usage})


def _text(index: int, *pieces: str) -> list[bytes]:
    block = {"type": "text", "text": ""}
    out = [anthropic_event("content_block_start", index=index, content_block=block)]
    for piece in pieces:
        delta = {"type": "text_delta", "text": piece}
        out.append(anthropic_event("content_block_delta", index=index, delta=delta))
    return [*out, anthropic_event("content_block_stop", index=index)]


def _tool(index: int, tool_id: str, name: str, *pieces: str) -> list[bytes]:
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
    out = [anthropic_event("content_block_start", index=index, content_block=block)]
    for piece in pieces:
        delta = {"type": "input_json_delta", "partial_json": piece}
        out.append(anthropic_event("content_block_delta", index=index, delta=delta))
    return [*out, anthropic_event("content_block_stop", index=index)]


def _end(reason: str | None = "end_turn", output_tokens: int = 7) -> list[bytes]:
    delta = {"stop_reason": reason, "stop_sequence": None}
    return [
        anthropic_event("message_delta", delta=delta, usage={"output_tokens": output_tokens}),
        anthropic_event("message_stop"),
    ]


ANTHROPIC: dict[str, list[bytes]] = {
    "text": [_message_start(), *_text(0, "Hel", "lo", "!"), *_end()],
    "pings-and-unicode": [
        _message_start(),
        anthropic_event("ping"),
        *_text(0, "héllo ", "✓ 你好"),
        anthropic_event("ping"),
        *_end(),
    ],
    "cache-usage": [
        _message_start(
            input_tokens=11,
            output_tokens=1,
            cache_creation_input_tokens=100,
            cache_read_input_tokens=200,
        ),
        *_text(0, "cached"),
        *_end(),
    ],
    # Usage as Anthropic's API sends it today: the cache split by TTL, the service tier.
    "usage-as-sent-today": [
        _message_start(
            input_tokens=11,
            cache_creation_input_tokens=6,
            cache_read_input_tokens=3,
            cache_creation={"ephemeral_5m_input_tokens": 4, "ephemeral_1h_input_tokens": 2},
            output_tokens=1,
            service_tier="standard",
        ),
        *_text(0, "cached"),
        *_end(),
    ],
    "max-tokens": [_message_start(), *_text(0, "cut"), *_end("max_tokens")],
    "stop-sequence": [_message_start(), *_text(0, "a"), *_end("stop_sequence")],
    "unknown-stop-reason": [_message_start(), *_text(0, "a"), *_end("pause_turn")],
    "null-stop-reason": [_message_start(), *_text(0, "a"), *_end(None)],
    "tools": [
        _message_start(),
        *_text(0, "Let me check."),
        *_tool(1, "toolu_1", "get_weather", "", '{"city": ', '"Paris"}'),
        *_tool(2, "toolu_2", "get_time", ""),
        *_tool(3, "toolu_3", "noop"),
        *_end("tool_use"),
    ],
    "events-after-message-delta": [
        _message_start(),
        *_text(0, "a"),
        *_end(),
        *_text(1, "ignored"),
        anthropic_event("error", error={"type": "api_error", "message": "ignored"}),
    ],
    "no-message-delta": [_message_start(), *_text(0, "trunc")],
    "long": [
        _message_start(),
        *_text(0, *stream_pieces(2000)),
        *_end(output_tokens=2000),
    ],
}


def anthropic_reply(events: list[bytes], **reply: Any) -> Reply:
    # LiteLLM stops reading at `message_delta`; a fresh connection per stream keeps what it
    # leaves unread from reaching the next test's stream.
    headers = {"Content-Type": "text/event-stream", "Connection": "close"}
    return Reply(body=b"".join(events), headers=headers, **reply)


def _wire(requests: list[Any]) -> list[Any]:
    keep = ("anthropic-version", "anthropic-beta", "x-api-key", "content-type")
    return [(body, {k: h.get(k) for k in keep}) for body, h in requests]


@pytest.mark.parametrize(
    ("provider", "scenario"),
    [*(("openai", s) for s in sorted(SCENARIOS)), *(("anthropic", s) for s in sorted(ANTHROPIC))],
)
@pytest.mark.parametrize("stream_options", [None, {"include_usage": True}])
async def test_chunks_match_litellm(
    upstream: RecordingUpstream, provider: str, scenario: str, stream_options: Any
) -> None:
    if provider == "openai":
        reply = sse_reply(SCENARIOS[scenario])
    else:
        reply = anthropic_reply(ANTHROPIC[scenario])
    (rust, rust_chunks, rust_sent), (plain, plain_chunks, plain_sent) = await twin_streams(
        upstream, provider, reply, wire=True, stream_options=stream_options
    )
    assert served_by_rust(rust) and not served_by_rust(plain)
    assert _wire(rust_sent) == _wire(plain_sent)
    assert rust_sent[0][0]["stream"] is True
    assert rust_chunks == plain_chunks


async def test_anthropic_stream_ids_are_one_per_stream(upstream: RecordingUpstream) -> None:
    upstream.set_default("/v1/messages", anthropic_reply(ANTHROPIC["text"]))
    ids = []
    for _ in range(2):
        stream = await open_stream(upstream, "anthropic", True)
        ids.append({item.id async for item in stream})
    assert all(len(one) == 1 for one in ids)
    assert ids[0] != ids[1]
    assert next(iter(ids[0])).startswith("chatcmpl-")


@pytest.mark.parametrize(
    "error",
    [
        {"type": "overloaded_error", "message": "Overloaded"},
        {"type": "api_error", "message": "Internal server error"},
        {"type": "rate_limit_error"},
        {"type": "invalid_request_error", "message": "prompt is too long: 300000 tokens"},
    ],
)
async def test_anthropic_error_event_mid_stream(
    upstream: RecordingUpstream, error: dict[str, Any]
) -> None:
    events = [_message_start(), *_text(0, "Hel"), anthropic_event("error", error=error)]
    results = []
    for rust in (True, False):
        exc, received, _ = await failure(upstream, anthropic_reply(events), rust, "anthropic")
        contents = [chunk["choices"][0]["delta"].get("content") for chunk in received]
        results.append((described(exc), str(exc), contents))
    assert results[0] == results[1]


# -- Bedrock (Converse event stream) ------------------------------------------------------------


def _bedrock_start() -> bytes:
    return aws_event_frame("messageStart", {"role": "assistant"})


def _bedrock_text(*pieces: str, index: int = 0) -> list[bytes]:
    events = [
        aws_event_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": p}})
        for p in pieces
    ]
    return [*events, aws_event_frame("contentBlockStop", {"contentBlockIndex": index})]


def _bedrock_tool(index: int, tool_id: str, name: str, *pieces: str) -> list[bytes]:
    start = {"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": tool_id, "name": name}}}
    events = [aws_event_frame("contentBlockStart", start)]
    events += [
        aws_event_frame(
            "contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": p}}}
        )
        for p in pieces
    ]
    return [*events, aws_event_frame("contentBlockStop", {"contentBlockIndex": index})]


def _bedrock_end(reason: str = "end_turn", **usage: int) -> list[bytes]:
    usage = usage or {"inputTokens": 11, "outputTokens": 3, "totalTokens": 14}
    return [
        aws_event_frame("messageStop", {"stopReason": reason}),
        aws_event_frame("metadata", {"usage": usage, "metrics": {"latencyMs": 5}}),
    ]


BEDROCK: dict[str, list[bytes]] = {
    "text": [_bedrock_start(), *_bedrock_text("Hel", "lo", "!"), *_bedrock_end()],
    "unicode": [_bedrock_start(), *_bedrock_text("héllo ", "✓ 你好"), *_bedrock_end()],
    "max-tokens": [_bedrock_start(), *_bedrock_text("cut"), *_bedrock_end("max_tokens")],
    "cache-usage": [
        _bedrock_start(),
        *_bedrock_text("cached"),
        *_bedrock_end(
            inputTokens=11,
            outputTokens=1,
            totalTokens=312,
            cacheReadInputTokens=200,
            cacheWriteInputTokens=100,
        ),
    ],
    "tools": [
        _bedrock_start(),
        *_bedrock_text("Let me check."),
        *_bedrock_tool(1, "tooluse_1", "get_weather", '{"city": ', '"Paris"}'),
        *_bedrock_tool(2, "tooluse_2", "get_time", ""),
        *_bedrock_tool(3, "tooluse_3", "noop"),
        *_bedrock_end("tool_use"),
    ],
    "no-metadata": [
        _bedrock_start(),
        *_bedrock_text("a"),
        aws_event_frame("messageStop", {"stopReason": "end_turn"}),
    ],
    "long": [_bedrock_start(), *_bedrock_text(*stream_pieces(2000)), *_bedrock_end()],
}


def bedrock_reply(events: list[bytes], **reply: Any) -> Reply:
    headers = {"Content-Type": "application/vnd.amazon.eventstream"}
    return Reply(body=b"".join(events), headers=headers, **reply)


async def bedrock_run(upstream: RecordingUpstream, reply: Reply, rust: bool, **kwargs: Any) -> Any:
    received: list[Any] = []
    failure = None
    try:
        stream = await open_stream(upstream, "bedrock", rust, reply, **kwargs)
        assert served_by_rust(stream) is rust
        async for item in stream:
            data = dumped(item)
            data.pop("id")
            received.append(data)
    except AssertionError:
        raise
    except Exception as exc:
        failure = (described(exc), str(exc))
    sent = [(r.path, r.json()) for r in upstream.requests]
    return received, failure, sent


@pytest.mark.parametrize("scenario", sorted(BEDROCK))
@pytest.mark.parametrize("stream_options", [None, {"include_usage": True}])
async def test_bedrock_chunks_match_litellm(
    upstream: RecordingUpstream, scenario: str, stream_options: Any
) -> None:
    reply = bedrock_reply(BEDROCK[scenario])
    rust = await bedrock_run(upstream, reply, True, stream_options=stream_options)
    plain = await bedrock_run(upstream, reply, False, stream_options=stream_options)
    assert rust == plain
    assert rust[1] is None
    assert rust[2][0][0].endswith("/converse-stream")


@pytest.mark.parametrize(
    "exception",
    [
        "throttlingException",
        "modelStreamErrorException",
        "validationException",
        "internalServerException",
        "serviceUnavailableException",
        "unknownException",
    ],
)
async def test_bedrock_exception_mid_stream(upstream: RecordingUpstream, exception: str) -> None:
    events = [
        _bedrock_start(),
        *_bedrock_text("Hel"),
        aws_event_frame(None, {"message": "Boom happened"}, exception_type=exception),
    ]
    rust = await bedrock_run(upstream, bedrock_reply(events), True)
    plain = await bedrock_run(upstream, bedrock_reply(events), False)
    assert rust == plain
    assert rust[1] is not None


async def test_bedrock_stream_is_signed_like_litellm(upstream: RecordingUpstream) -> None:
    reply = bedrock_reply(BEDROCK["text"])
    headers = []
    for rust in (True, False):
        await bedrock_run(upstream, reply, rust)
        (request,) = upstream.requests
        headers.append(request.headers["authorization"].split("Signature=")[0])
    assert headers[0] == headers[1]
    assert "SignedHeaders=" in headers[0]


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
async def test_logging_usage_and_cost_with_cache_match(
    upstream: RecordingUpstream, recorder: Recorder, provider: str
) -> None:
    reply = {
        "anthropic": anthropic_reply(ANTHROPIC["cache-usage"]),
        "bedrock": bedrock_reply(BEDROCK["cache-usage"]),
    }[provider]
    seen: dict[bool, Any] = {}
    for rust in (True, False):
        recorder.successes.clear()
        async for _ in await open_stream(upstream, provider, rust, reply):
            pass
        await recorder.logged()
        kwargs, response = recorder.successes[0]
        seen[rust] = (
            response.usage.model_dump(),
            kwargs.get("response_cost"),
            response.choices[0].message.content,
        )
    assert seen[True] == seen[False]
    if provider == "anthropic":
        assert seen[True][0]["prompt_tokens"] == 311


@pytest.mark.parametrize("damage", ["truncated", "corrupted"])
async def test_bedrock_broken_event_stream_fails_like_litellm(
    upstream: RecordingUpstream, damage: str
) -> None:
    body = bytearray(b"".join(BEDROCK["text"]))
    if damage == "truncated":
        body = body[:-7]
    else:
        body[-1] ^= 0xFF  # the last message's CRC no longer matches
    reply = Reply(body=bytes(body), headers={"Content-Type": "application/vnd.amazon.eventstream"})
    rust = await bedrock_run(upstream, reply, True)
    plain = await bedrock_run(upstream, reply, False)
    assert rust[0] == plain[0]
    assert rust[1] is not None and plain[1] is not None
    assert rust[1][0][:4] == plain[1][0][:4]


async def test_anthropic_stream_with_tools_matches_litellm(upstream: RecordingUpstream) -> None:
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    (rust, rust_chunks, rust_sent), (plain, plain_chunks, plain_sent) = await twin_streams(
        upstream,
        "anthropic",
        anthropic_reply(ANTHROPIC["tools"]),
        wire=True,
        tools=[weather],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    assert served_by_rust(rust) and not served_by_rust(plain)
    assert _wire(rust_sent) == _wire(plain_sent)
    assert rust_sent[0][0]["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert rust_chunks == plain_chunks


async def test_bedrock_stream_with_tools_matches_litellm(upstream: RecordingUpstream) -> None:
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    kwargs = {"tools": [weather], "tool_choice": "required"}
    rust = await bedrock_run(upstream, bedrock_reply(BEDROCK["tools"]), True, **kwargs)
    plain = await bedrock_run(upstream, bedrock_reply(BEDROCK["tools"]), False, **kwargs)
    assert rust == plain
    assert rust[2][0][1]["toolConfig"]["toolChoice"] == {"any": {}}


async def test_bedrock_json_schema_streams_stay_on_litellm(upstream: RecordingUpstream) -> None:
    # LiteLLM fakes this stream (one forced tool call replayed as chunks): its own path serves it.
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    answer = converse_answer(tool_use_block("t", "json_tool_call", {"a": "x"}))
    upstream.set_default("/converse", Reply(json=answer))
    stream = await litellm.acompletion(
        **deployment_kwargs("bedrock", upstream.url),
        messages=MESSAGES,
        stream=True,
        rust=True,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    )
    assert not served_by_rust(stream)
    assert litellm_fastpath.decline_counts() == {"stream": 1}
