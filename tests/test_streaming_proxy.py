"""Streamed chat end to end through the real LiteLLM proxy: a `rust: true` OpenAI model against
its plain twin (same `litellm_params`), one recording upstream that streams scripted SSE. Every
test runs twice: on the proxy, and with the fast lane on (`fastpath_lane: true`), where the lane
streams the `rust: true` models and the proxy the plain ones.

The client must get the same bytes (SSE frames, in order; only `created`, the clock, and the
model group's name differ), the upstream the same request, and the proxy's logging one success
event per stream with the same usage and cost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from devtools.answers import openai_stream_events, stream_pieces
from devtools.deployments import deployment_kwargs, twin_models
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.proxy_logger import events_for, lane_counts, logged_proxy
from devtools.upstream import RecordingUpstream, Reply

pytestmark = [pytest.mark.proxy, pytest.mark.usefixtures("upstream")]

_CREATED = re.compile(rb'"created":\d+')


@pytest.fixture(scope="module", params=["proxy", "lane"])
def proxy(
    request: pytest.FixtureRequest, upstream_server: RecordingUpstream, log: Path
) -> Iterator[ProxyProcess]:
    models = twin_models("openai", deployment_kwargs("openai", upstream_server.url))
    models += twin_models("anthropic", deployment_kwargs("anthropic", upstream_server.url))
    models += twin_models("bedrock", deployment_kwargs("bedrock", upstream_server.url))
    settings = {"fastpath_lane": True} if request.param == "lane" else {}
    server = logged_proxy(models, log, **settings)
    with server:
        if request.param == "lane":
            # The lane learns the master key's verdict from the proxy's first request.
            upstream_server.set_default("/chat/completions", sse_reply(SCENARIOS["mock-3"]))
            assert stream_text(server, "plain-openai").status_code == 200
        yield server
        # No stream the lane served was one the fast path declines on its replay.
        assert "replay was declined by the fast path" not in server.log_text()


def sse_reply(events: list[bytes], **reply: Any) -> Reply:
    return Reply(body=b"".join(events), headers={"Content-Type": "text/event-stream"}, **reply)


def stream_text(proxy: ProxyProcess, model: str, **body: Any) -> httpx.Response:
    payload = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return proxy.post("/chat/completions", json={**payload, **body})


def normalized(resp: httpx.Response, model: str) -> bytes:
    """The SSE body with the clock and the model group's name taken out."""
    body = _CREATED.sub(b'"created":0', resp.content)
    return body.replace(f'"model":"{model}"'.encode(), b'"model":"M"')


def both(
    proxy: ProxyProcess, upstream: RecordingUpstream, reply: Reply, **body: Any
) -> tuple[tuple[httpx.Response, list[Any]], tuple[httpx.Response, list[Any]]]:
    out = []
    for model in ("rust-openai", "plain-openai"):
        upstream.clear()
        upstream.set_default("/chat/completions", reply)
        resp = stream_text(proxy, model, **body)
        out.append((resp, [r.json() for r in upstream.requests]))
    return out[0], out[1]


def chunk(delta: dict[str, Any], finish: str | None = None, **top: Any) -> bytes:
    data = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **top,
    }
    return b"data: " + json.dumps(data).encode() + b"\n\n"


USAGE = (
    b"data: "
    + json.dumps(
        {
            "id": "chatcmpl-up",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
        }
    ).encode()
    + b"\n\n"
)
DONE = b"data: [DONE]\n\n"
TODAY = {"service_tier": "default", "system_fingerprint": "fp_560af6e559"}

SCENARIOS: dict[str, list[bytes]] = {
    "mock-3": openai_stream_events("gpt-4o-mini", stream_pieces(3), include_usage=True),
    "mock-100": openai_stream_events("gpt-4o-mini", stream_pieces(100), include_usage=True),
    "no-fingerprint": [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop"),
        USAGE,
        DONE,
    ],
    "finish-on-content": [
        chunk({"role": "assistant", "content": "Hi"}, system_fingerprint="fp"),
        chunk({"content": " there"}, "length", system_fingerprint="fp"),
        USAGE,
        DONE,
    ],
    "no-finish-no-done": [chunk({"content": "héllo ✓ 你好"}), USAGE],
    "tool-calls": [
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ],
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({}, "tool_calls"),
        USAGE,
        DONE,
    ],
    "empty-and-role-only-chunks": [
        chunk({"role": "assistant"}),
        chunk({"content": ""}),
        chunk({"content": "x"}),
        chunk({"role": "assistant", "content": None}),
        chunk({"content": "y"}, service_tier="default"),
        chunk({}, "stop"),
        USAGE,
        DONE,
    ],
    # `obfuscation` ahead of `service_tier` upstream: LiteLLM still writes the tier first.
    "tier-after-extras": [
        chunk({"role": "assistant", "content": ""}, None, obfuscation="a", **TODAY),
        chunk({"content": "x"}, None, obfuscation="b", **TODAY),
        chunk({}, "stop", obfuscation="c", **TODAY),
        DONE,
    ],
    # As OpenAI sends a stream today: the tier, a fingerprint and `obfuscation` padding on every
    # chunk, and token details in the usage chunk.
    "as-sent-today": [
        *(
            chunk(delta, finish, **TODAY, obfuscation=pad)
            for delta, finish, pad in (
                ({"role": "assistant", "content": "", "refusal": None}, None, "x1"),
                ({"content": "Hel"}, None, "abcd"),
                ({"content": "lo"}, None, "q"),
                ({}, "stop", "zz9"),
            )
        ),
        b"data: "
        + json.dumps(
            {
                "id": "chatcmpl-up",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "gpt-4o-mini-2024-07-18",
                **TODAY,
                "choices": [],
                "usage": {
                    "prompt_tokens": 9,
                    "completion_tokens": 2,
                    "total_tokens": 11,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {
                        "reasoning_tokens": 0,
                        "audio_tokens": 0,
                        "accepted_prediction_tokens": 0,
                        "rejected_prediction_tokens": 0,
                    },
                },
                "obfuscation": "pad",
            }
        ).encode()
        + b"\n\n",
        DONE,
    ],
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("include_usage", [None, True, False])
def test_stream_bytes_match_the_plain_model(
    proxy: ProxyProcess, upstream: RecordingUpstream, scenario: str, include_usage: bool | None
) -> None:
    body: dict[str, Any] = {}
    if include_usage is not None:
        body["stream_options"] = {"include_usage": include_usage}
    (rust, rust_sent), (plain, plain_sent) = both(
        proxy, upstream, sse_reply(SCENARIOS[scenario]), **body
    )
    assert rust.status_code == plain.status_code == 200, rust.text
    assert rust.headers.get("x-litellm-rust") == "true"
    assert "x-litellm-rust" not in plain.headers
    assert rust_sent == [{**plain_sent[0], "model": rust_sent[0]["model"]}]
    assert normalized(rust, "rust-openai") == normalized(plain, "plain-openai")
    assert rust.content.endswith(b"data: [DONE]\n\n")


def test_headers_match_the_plain_model(proxy: ProxyProcess, upstream: RecordingUpstream) -> None:
    (rust, _), (plain, _) = both(proxy, upstream, sse_reply(SCENARIOS["mock-3"]))
    volatile = {"date", "x-litellm-call-id", "x-litellm-model-id", "x-litellm-model-group"}
    volatile |= {"x-litellm-response-duration-ms", "x-litellm-overhead-duration-ms"}
    volatile |= {"llm_provider-date", "x-litellm-callback-duration-ms"}
    rust_headers = {k: v for k, v in rust.headers.items() if k not in volatile}
    plain_headers = {k: v for k, v in plain.headers.items() if k not in volatile}
    for name in ("x-litellm-rust", "x-litellm-fastpath"):
        assert rust_headers.pop(name)
    assert rust_headers == plain_headers


def test_one_success_event_per_stream_with_equal_usage_and_cost(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path
) -> None:
    events = {}
    for model in ("rust-openai", "plain-openai"):
        before = len(events_for(log, model, 0, timeout=0))
        upstream.set_default("/chat/completions", sse_reply(SCENARIOS["mock-100"]))
        assert stream_text(proxy, model).status_code == 200
        events[model] = events_for(log, model, before + 1)[before:]
    assert [e["event"] for e in events["rust-openai"]] == ["success"]
    assert [e["event"] for e in events["plain-openai"]] == ["success"]
    rust, plain = events["rust-openai"][0], events["plain-openai"][0]
    assert rust["usage"] == plain["usage"] == {"prompt_tokens": 11, "completion_tokens": 100}
    assert rust["response_cost"] == plain["response_cost"] > 0


def test_error_event_mid_stream_ends_the_stream_like_python(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    events = [
        chunk({"role": "assistant", "content": "partial"}),
        b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
    ]
    (rust, _), (plain, _) = both(proxy, upstream, sse_reply(events))
    assert normalized(rust, "rust-openai") == normalized(plain, "plain-openai")
    assert b'"error"' in rust.content and not rust.content.endswith(b"[DONE]\n\n")


def test_upstream_429_before_the_stream_is_the_same_error(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    reply = Reply(status=429, json={"error": {"message": "slow down", "type": "rate_limit"}})
    (rust, rust_sent), (plain, _) = both(proxy, upstream, reply)
    assert rust.status_code == plain.status_code == 429
    assert len(rust_sent) == 1
    assert rust.text.replace("rust-openai", "M") == plain.text.replace("plain-openai", "M")


def test_official_openai_sdk_streams_from_a_rust_model(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    upstream.set_default("/chat/completions", sse_reply(SCENARIOS["mock-100"]))
    client = openai.OpenAI(base_url=proxy.url, api_key=MASTER_KEY)
    messages: Any = [{"role": "user", "content": "hi"}]
    texts = {}
    for model in ("rust-openai", "plain-openai"):
        parts = []
        for event in client.chat.completions.create(model=model, messages=messages, stream=True):
            if event.choices and event.choices[0].delta.content:
                parts.append(event.choices[0].delta.content)
        texts[model] = "".join(parts)
        with client.chat.completions.stream(model=model, messages=messages) as stream:
            final = stream.get_final_completion()
        assert final.choices[0].message.content == texts[model]
    assert texts["rust-openai"] == texts["plain-openai"] == "".join(stream_pieces(100))


def test_rust_in_the_body_cannot_switch_a_stream_on(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    # LiteLLM refuses a `rust` field in the body outright; nothing reaches the provider.
    upstream.set_default("/chat/completions", sse_reply(SCENARIOS["mock-3"]))
    for model, value in (("plain-openai", True), ("rust-openai", False)):
        resp = stream_text(proxy, model, rust=value)
        assert resp.status_code >= 400
        assert "x-litellm-rust" not in resp.headers
    assert upstream.requests == []


ANTHROPIC_CASES = (
    "text",
    "pings-and-unicode",
    "cache-usage",
    "usage-as-sent-today",
    "max-tokens",
    "tools",
    "long",
)
BEDROCK_CASES = ("text", "unicode", "cache-usage", "tools", "long")
_STREAM_ID = re.compile(rb'"id":"chatcmpl-[0-9a-f-]+"')


def twin_streams(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    provider: str,
    path: str,
    reply: Reply,
    **body: Any,
) -> dict[str, tuple[str | None, list[Any], bytes]]:
    """Per twin model: (x-litellm-rust, what the upstream received, the SSE body normalized;
    ids are LiteLLM's own per stream, `chatcmpl-<uuid4>`, on both arms)."""
    out = {}
    for model in (f"rust-{provider}", f"plain-{provider}"):
        upstream.clear()
        upstream.set_default(path, reply)
        resp = stream_text(proxy, model, **body)
        assert resp.status_code == 200, resp.text
        sent = [(r.path, r.json()) for r in upstream.requests]
        frames = _STREAM_ID.sub(b'"id":"X"', normalized(resp, model))
        out[model] = (resp.headers.get("x-litellm-rust"), sent, frames)
    return out


def usage_options(include_usage: bool | None) -> dict[str, Any]:
    return {} if include_usage is None else {"stream_options": {"include_usage": include_usage}}


@pytest.mark.parametrize(
    ("provider", "scenario"),
    [*(("anthropic", c) for c in ANTHROPIC_CASES), *(("bedrock", c) for c in BEDROCK_CASES)],
)
@pytest.mark.parametrize("include_usage", [None, True])
def test_native_stream_bytes_match_the_plain_model(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    provider: str,
    scenario: str,
    include_usage: bool | None,
) -> None:
    from tests.test_streaming import ANTHROPIC, BEDROCK, anthropic_reply, bedrock_reply

    if provider == "anthropic":
        reply, path = anthropic_reply(ANTHROPIC[scenario]), "/v1/messages"
    else:
        reply, path = bedrock_reply(BEDROCK[scenario]), "/converse-stream"
    out = twin_streams(proxy, upstream, provider, path, reply, **usage_options(include_usage))
    rust, plain = out[f"rust-{provider}"], out[f"plain-{provider}"]
    assert rust[0] == "true" and plain[0] is None
    assert rust[1] == plain[1]
    assert rust[2] == plain[2]


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
def test_tool_call_streams_with_tool_params_match_the_plain_model(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str
) -> None:
    from tests.test_streaming import ANTHROPIC, BEDROCK, anthropic_reply, bedrock_reply
    from tests.test_tools import HISTORY, WEATHER

    if provider == "anthropic":
        path, reply = "/v1/messages", anthropic_reply(ANTHROPIC["tools"])
    else:
        path, reply = "/converse-stream", bedrock_reply(BEDROCK["tools"])
    body = {"messages": HISTORY, "tools": [WEATHER], "tool_choice": "auto"}
    out = twin_streams(proxy, upstream, provider, path, reply, **body)
    assert out[f"rust-{provider}"][0] == "true"
    assert out[f"rust-{provider}"][1] == out[f"plain-{provider}"][1]
    assert out[f"rust-{provider}"][2] == out[f"plain-{provider}"][2]
    assert b'"tool_calls"' in out[f"rust-{provider}"][2]


def test_bedrock_exception_mid_stream_ends_the_stream_like_python(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    from devtools.answers import aws_event_frame
    from tests.test_streaming import BEDROCK, bedrock_reply

    boom = aws_event_frame(None, {"message": "Boom"}, exception_type="throttlingException")
    events = [*BEDROCK["text"][:3], boom]
    out = {}
    for model in ("rust-bedrock", "plain-bedrock"):
        upstream.set_default("/converse-stream", bedrock_reply(events))
        resp = stream_text(proxy, model)
        frames = _STREAM_ID.sub(b'"id":"X"', normalized(resp, model))
        out[model] = frames.replace(model.encode(), b"M")
    assert out["rust-bedrock"] == out["plain-bedrock"]
    assert b'"error"' in out["rust-bedrock"]


def test_the_lane_served_the_rust_streams(
    request: pytest.FixtureRequest, proxy: ProxyProcess, log: Path
) -> None:
    counts = lane_counts(log)
    if request.node.callspec.params["proxy"] == "lane":
        # Every rust stream of this module that got a first chunk (the counts are the last
        # logged event's); the others: the 429 (replayed) and the `rust` fields (bodies).
        assert counts.get("served", 0) >= 45, counts
        assert counts.get("replayed") == 1 and counts.get("lane_body") == 2, counts
        assert not {"lane_stream", "lane_param", "lane_auth"} & set(counts), counts
    else:
        assert counts == {}
