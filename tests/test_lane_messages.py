"""`/v1/messages` on the fast lane (`fastpath_lane: true`), through the real proxy: a `rust: true`
Anthropic model served by the lane against its plain twin served by the proxy, request by
request: the same provider request, the same answer bytes and headers, one callback each."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.answers import anthropic_stream_events
from devtools.deployments import bedrock_invoke_kwargs, deployment_kwargs, twin_models
from devtools.polling import ABSENCE_S, wait_until
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.proxy_logger import logged_proxy, wait_for_events
from devtools.upstream import RecordingUpstream, Reply
from tests import messages_cases as cases
from tests.conftest import stable_headers
from tests.test_lane_proxy import REPLAY_DECLINED, VOLATILE_HEADERS

pytestmark = pytest.mark.proxy

HI = [{"role": "user", "content": "hi"}]
BEARER = {"authorization": f"Bearer {MASTER_KEY}"}
API_KEY = {"x-api-key": MASTER_KEY}
# The Anthropic SDK's way: its key in `x-api-key`, and always an `anthropic-version`.
SDK = {**API_KEY, "anthropic-version": "2023-06-01"}
# Provider request headers that belong to the HTTP client, not to LiteLLM's request.
TRANSPORT_HEADERS = {"host", "content-length", "accept-encoding", "connection", "user-agent"}


def anthropic_answer(**usage: Any) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": cases.ANTHROPIC_MODEL,
        "content": [{"type": "text", "text": 'héllo "there"\n✓'}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 7,
            "service_tier": "standard",
            **usage,
        },
    }


@pytest.fixture(scope="module")
def proxy(upstream_server: RecordingUpstream, log: Path) -> Iterator[ProxyProcess]:
    params = deployment_kwargs("anthropic", upstream_server.url)
    # An OpenAI group too: the lane calls it for chat, never for `/v1/messages`.
    models = [
        *twin_models("claude", params),
        *twin_models("gpt", deployment_kwargs("openai", upstream_server.url)),
        *twin_models("bedrock", bedrock_invoke_kwargs(upstream_server.url)),
    ]
    with logged_proxy(models, log, fastpath_lane=True) as server:
        # The first request of a key goes through the proxy, which hands the lane its verdict.
        upstream_server.enqueue(Reply(json=anthropic_answer()))
        assert post(server, "plain-claude", {"messages": HI, "max_tokens": 8}, BEARER)
        yield server
        assert REPLAY_DECLINED not in server.log_text()


def post(
    proxy: ProxyProcess, model: str, body: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    """A request with exactly these headers (no key added)."""
    client = proxy._client
    assert client is not None
    return client.post("/v1/messages", json={"model": model, **body}, headers=headers)


def twins(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    body: dict[str, Any],
    headers: dict[str, str],
    reply: Reply,
) -> dict[str, tuple[httpx.Response, list[Any]]]:
    """The plain model's answer and the rust one's, each with the provider requests it made."""
    out = {}
    for model in ("plain-claude", "rust-claude"):
        before = len(upstream.requests)
        upstream.enqueue(reply)
        response = post(proxy, model, body, headers)
        out[model] = (response, upstream.requests[before:])
        if len(out[model][1]) == 0:
            upstream.discard_queued()  # answered without a call: the reply must not linger
    return out


def provider_request(sent: Any) -> tuple[Any, dict[str, str]]:
    headers = {k.lower(): v for k, v in sent.headers.items() if k.lower() not in TRANSPORT_HEADERS}
    return json.loads(sent.body), headers


def as_group(response: httpx.Response, group: str) -> bytes:
    """The answer's bytes as they would read for `group` (the proxy names the model group)."""
    return response.content.replace(b'"model":"plain-claude"', f'"model":"{group}"'.encode())


REQUESTS = {
    "text": {"messages": HI, "max_tokens": 64},
    "system-metadata-stop": {
        "messages": HI,
        "max_tokens": 64,
        "system": [{"type": "text", "text": "be brief"}],
        "metadata": {"user_id": "u-1"},
        "stop_sequences": ["END"],
        "stream": False,
    },
    "tools": {
        "messages": HI,
        "max_tokens": 64,
        "tools": [cases.tool(i) for i in range(3)],
        "tool_choice": {"type": "auto"},
    },
    "coding-agent": {
        key: value
        for key, value in cases.coding_agent_request().items()
        if key not in ("thinking", "temperature", "stream")
    },
}


@pytest.mark.parametrize("shape", list(REQUESTS))
@pytest.mark.parametrize("auth", ["bearer", "x-api-key", "sdk"])
def test_the_lane_answers_messages_as_the_proxy_does(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, shape: str, auth: str
) -> None:
    headers = {"bearer": BEARER, "x-api-key": API_KEY, "sdk": SDK}[auth]
    before = counts_now(proxy, upstream, log)
    answers = twins(proxy, upstream, REQUESTS[shape], headers, Reply(json=anthropic_answer()))
    (plain, plain_sent), (rust, rust_sent) = answers["plain-claude"], answers["rust-claude"]
    assert plain.status_code == rust.status_code == 200, rust.text
    assert len(plain_sent) == len(rust_sent) == 1
    assert provider_request(plain_sent[0]) == provider_request(rust_sent[0])
    assert rust.headers["x-litellm-rust"] == "true"
    assert as_group(plain, "rust-claude") == rust.content
    assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    assert rust.headers["x-litellm-model-group"] == "rust-claude"
    # The lane served it, and the replay logged it once, at the proxy's cost and usage.
    rust_events, plain_events = events_of(log, rust), events_of(log, plain)
    assert len(rust_events) == len(plain_events) == 1
    assert counts_now(proxy, upstream, log)["served"] == before["served"] + 2  # and the probe
    assert rust_events[0]["response_cost"] == float(rust.headers["x-litellm-response-cost"])
    assert rust_events[0]["response_cost"] == plain_events[0]["response_cost"]
    assert rust_events[0]["usage"] == plain_events[0]["usage"]


def answered_text(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, headers: dict, answer: dict
) -> tuple[dict[str, int], dict[str, Any]]:
    """The lane's counts before, and the twins' answers to the text request with `headers`
    when the provider answers `answer`."""
    before = counts_now(proxy, upstream, log)
    return before, twins(proxy, upstream, REQUESTS["text"], headers, Reply(json=answer))


def cache_use(read: int, write_5m: int, write_1h: int) -> dict[str, Any]:
    split = {"ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h}
    return anthropic_answer(
        cache_read_input_tokens=read,
        cache_creation_input_tokens=write_5m + write_1h,
        cache_creation=split,
    )


@pytest.mark.parametrize(
    "answer",
    [cache_use(300, 200, 0), cache_use(0, 500, 200), cache_use(4321, 0, 0)],
    ids=["read-and-5m-write", "both-writes", "read"],
)
def test_answers_that_use_the_prompt_cache_are_the_lanes(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, answer: dict
) -> None:
    before, answers = answered_text(proxy, upstream, log, SDK, answer)
    rust = same_answers(answers)
    assert rust.status_code == 200
    # The cache's shares of the cost, as the proxy writes them (equal headers: `same_answers`).
    usage = answer["usage"]
    reads, writes = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    assert ("x-litellm-response-cost-cache-read" in rust.headers) == (reads > 0)
    assert ("x-litellm-response-cost-cache-creation" in rust.headers) == (writes > 0)
    rust_events, plain_events = events_of(log, rust), events_of(log, answers["plain-claude"][0])
    assert len(rust_events) == len(plain_events) == 1
    assert rust_events[0]["response_cost"] == float(rust.headers["x-litellm-response-cost"])
    assert rust_events[0]["response_cost"] == plain_events[0]["response_cost"]
    after = counts_now(proxy, upstream, log)
    assert after["served"] == before["served"] + 2  # and the probe


@pytest.mark.parametrize(
    "answer",
    [
        anthropic_answer(service_tier="priority"),
        # Cache writes without their split by lifetime.
        anthropic_answer(cache_creation_input_tokens=200, cache_creation=None),
        cases.tool_answer(),  # its tool input holds the float 1e16
    ],
    ids=["priority", "unsplit-writes", "float-input"],
)
def test_answers_the_lane_does_not_write_are_the_proxys(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, answer: dict
) -> None:
    before, answers = answered_text(proxy, upstream, log, BEARER, answer)
    (plain, plain_sent), (rust, rust_sent) = answers["plain-claude"], answers["rust-claude"]
    assert plain.status_code == rust.status_code == 200
    assert len(plain_sent) == len(rust_sent) == 1
    assert as_group(plain, "rust-claude") == rust.content
    assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    assert len(events_of(log, rust)) == 1
    after = counts_now(proxy, upstream, log)
    assert after.get("replayed", 0) == before.get("replayed", 0) + 1
    assert after["served"] == before["served"] + 1  # the probe


@pytest.mark.parametrize("status", [429, 500, 529])
def test_upstream_errors_are_the_proxys(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, status: int
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    failures_before = len(failures(log))
    answers = twins(proxy, upstream, REQUESTS["text"], SDK, Reply(status=status, json=error))
    (plain, plain_sent), (rust, rust_sent) = answers["plain-claude"], answers["rust-claude"]
    assert len(plain_sent) == len(rust_sent) == 1
    assert plain.status_code == rust.status_code
    assert plain.text.replace("plain-claude", "rust-claude") == rust.text
    # One failure logged, by the proxy, from the lane's one call.
    assert len(failures(log, failures_before + 1)) == failures_before + 1


def failures(log: Path, count: int = 0) -> list[dict[str, Any]]:
    """The failures logged for `rust-claude`, once there are `count`."""

    def failed(event: dict[str, Any]) -> bool:
        return event["event"] == "failure" and event["model_group"] == "rust-claude"

    return wait_for_events(log, failed, count, grace=ABSENCE_S if count else 0)


def same_answers(
    answers: dict[str, tuple[httpx.Response, list[Any]]], stream: bool = False
) -> httpx.Response:
    """The plain model's and the rust one's answer and provider requests agree; the rust one."""
    (plain, plain_sent), (rust, rust_sent) = answers["plain-claude"], answers["rust-claude"]
    assert plain.status_code == rust.status_code
    assert len(plain_sent) == len(rust_sent)
    if plain_sent:
        assert provider_request(plain_sent[0]) == provider_request(rust_sent[0])
    if plain.status_code == 200 and not stream:
        assert as_group(plain, "rust-claude") == rust.content
        assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    elif plain.status_code != 200:
        assert plain.text.replace("plain-claude", "rust-claude") == rust.text
    return rust


def events_of(log: Path, response: httpx.Response) -> list[dict[str, Any]]:
    """The logged events of the request `response` answers (by its call id), once there is one
    (and a moment more, to catch a second)."""
    call_id = response.headers["x-litellm-call-id"]

    def answered(event: dict[str, Any]) -> bool:
        return (event.get("payload") or {}).get("litellm_call_id") == call_id

    return wait_for_events(log, answered, 1)


def counted_stream_twins(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, request: str, reply: Any
) -> tuple[httpx.Response, httpx.Response, dict[str, int]]:
    """`stream_twins` of `REQUESTS[request]` answered by `reply()`, and how the lane's counts
    (`counts_now`) changed meanwhile, by name (0: unchanged); the probe that reads them
    afterwards counts in `served`."""
    before = counts_now(proxy, upstream, log)
    plain, rust = stream_twins(proxy, upstream, REQUESTS[request], reply())
    after = counts_now(proxy, upstream, log)
    return plain, rust, {name: after.get(name, 0) - before.get(name, 0) for name in before | after}


def counts_now(proxy: ProxyProcess, upstream: RecordingUpstream, log: Path) -> dict[str, int]:
    """The lane's counts as of now: one more request, which the lane serves (and counts), is
    logged with them; read from that request's own event."""
    upstream.enqueue(Reply(json=anthropic_answer()))
    probe = post(proxy, "rust-claude", REQUESTS["text"], BEARER)
    assert probe.status_code == 200
    events = events_of(log, probe)
    assert events, "the probe request was not logged"
    return dict(events[0]["lane"])


@pytest.mark.parametrize(
    ("body", "headers", "reason", "counted"),
    # `counted`: per round, how many of the two requests count the reason (those counted before
    # the model group is looked up count the plain model's request too).
    [
        ({"metadata": {"user_id": 7}}, BEARER, "lane_body", 2),
        ({"top_q": 0.5}, BEARER, "lane_body", 2),
        ({}, {**API_KEY, **BEARER}, "lane_auth", 2),
        ({}, {**SDK, "typesafe-danger-zone-x": "1"}, "lane_header", 2),
        ({"max_tokens": "many"}, BEARER, "lane_body", 2),
        ({"messages": "hi"}, BEARER, "lane_body", 2),
        # LiteLLM rewrites adaptive thinking for this model: never learned, always the proxy's.
        ({"thinking": {"type": "adaptive"}, "max_tokens": 4000}, BEARER, "lane_unseen", 1),
    ],
    ids=[
        "metadata-user-id",
        "unknown-field",
        "two-keys",
        "danger-zone-header",
        "bad-max-tokens",
        "bad-messages",
        "rewritten-thinking",
    ],
)
def test_requests_the_lane_does_not_take_get_the_proxys_answer(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    log: Path,
    body: dict,
    headers: dict,
    reason: str,
    counted: int,
) -> None:
    before = counts_now(proxy, upstream, log)
    request = {**REQUESTS["text"], **body}
    for _ in range(2):  # the second time too (nothing was learned)
        answers = twins(proxy, upstream, request, headers, Reply(json=anthropic_answer()))
        same_answers(answers, stream=bool(body.get("stream")))
    after = counts_now(proxy, upstream, log)
    assert after["served"] == before["served"] + 1  # the probe
    assert after.get(reason, 0) == before.get(reason, 0) + 2 * counted


def test_messages_to_a_group_the_lane_calls_only_for_chat_go_to_the_proxy(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path
) -> None:
    before = counts_now(proxy, upstream, log)
    answers = []
    for model in ("plain-gpt", "rust-gpt"):
        sent_before = len(upstream.requests)
        response = post(proxy, model, REQUESTS["text"], BEARER)
        answers.append((response, len(upstream.requests) - sent_before))
    (plain, plain_calls), (rust, rust_calls) = answers
    assert plain.status_code == rust.status_code
    assert plain_calls == rust_calls
    after = counts_now(proxy, upstream, log)
    assert after["served"] == before["served"] + 1  # the probe
    # Both requests: the plain group is not the lane's, the rust one has no Messages calls.
    assert after.get("lane_model", 0) == before.get("lane_model", 0) + 2


# Requests whose treatment LiteLLM decides per value: the first goes to the proxy, where the fast
# path asks LiteLLM and hands the lane its answer; the next take the lane.
LEARNED = {
    "temperature": ({"temperature": 0.5}, BEARER),
    "sampling": ({"top_k": 5, "temperature": 1e-05}, SDK),
    "thinking": (
        {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048},
        SDK,
    ),
    "betas": ({}, {**SDK, "anthropic-beta": "b-2,a-1"}),
    "other-version": ({"temperature": 0.5}, {**API_KEY, "anthropic-version": "2024-01-01"}),
}


@pytest.mark.parametrize("case", list(LEARNED))
def test_params_and_headers_litellm_decides_take_the_lane_once_it_has(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, case: str
) -> None:
    body, headers = LEARNED[case]
    request = {**REQUESTS["tools"], **body}
    before = counts_now(proxy, upstream, log)
    for _ in range(3):
        answers = twins(proxy, upstream, request, headers, Reply(json=anthropic_answer()))
        assert same_answers(answers).status_code == 200
    after = counts_now(proxy, upstream, log)
    assert after.get("lane_unseen", 0) == before.get("lane_unseen", 0) + 1
    assert after["served"] == before["served"] + 2 + 1  # and the probe


def test_bad_keys_get_the_proxys_answer(proxy: ProxyProcess, upstream: RecordingUpstream) -> None:
    for headers in ({"x-api-key": "sk-wrong"}, {"authorization": "Bearer sk-wrong"}, {}):
        answers = [
            post(proxy, m, REQUESTS["text"], headers) for m in ("plain-claude", "rust-claude")
        ]
        assert answers[0].status_code == answers[1].status_code >= 400
        assert answers[0].text == answers[1].text


# -- streams -------------------------------------------------------------------------------

STREAM_HEADERS = {"content-type": "text/event-stream", "request-id": "req_1"}
PING = b'event: ping\ndata: {"type": "ping"}\n\n'
ERROR_EVENT = (
    b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n\n'
)


def stream_reply(body: bytes, **options: Any) -> Reply:
    return Reply(body=body, headers=dict(STREAM_HEADERS), **options)


def first_events(count: int) -> bytes:
    """The first `count` events of a text stream (`message_start`, the block's start, deltas)."""
    return b"".join(anthropic_stream_events(cases.ANTHROPIC_MODEL, ["a ", "b ", "c "])[:count])


def unusual_start() -> bytes:
    """A stream whose `message_start` holds a number Python prints otherwise than it reads."""
    return cases.text_stream(2).replace(b'"input_tokens":11', b'"input_tokens":1e16', 1)


STREAMS = {
    "text": lambda: stream_reply(cases.text_stream(3)),
    "thinking-and-tool": lambda: stream_reply(b"".join(cases.tool_stream_events())),
    "ping-first": lambda: stream_reply(PING + cases.text_stream(2)),
    "crlf": lambda: stream_reply(cases.text_stream(2).replace(b"\n", b"\r\n")),
    # Torn frames: the body in 9 pieces, 20 ms apart.
    "trickled": lambda: stream_reply(
        cases.text_stream(8), action="trickle", pieces=9, delay_s=0.02
    ),
    "error-event-after-content": lambda: stream_reply(first_events(4) + ERROR_EVENT),
    # The router here passes an error event before content on as it comes (no retries).
    "error-event-first": lambda: stream_reply(ERROR_EVENT),
}


def stream_twins(
    proxy: ProxyProcess, upstream: RecordingUpstream, body: dict[str, Any], *replies: Reply
) -> tuple[httpx.Response, httpx.Response]:
    """The plain model's and the rust one's answers to the same stream request, each upstream
    call answered by the next of `replies` (a copy of them per model): the same provider
    requests, bytes (with the group's name) and headers. Returns (plain, rust)."""
    answers = {}
    for model in ("plain-claude", "rust-claude"):
        sent = len(upstream.requests)
        for reply in replies:
            upstream.enqueue(reply)
        answers[model] = (
            post(proxy, model, {**body, "stream": True}, SDK),
            upstream.requests[sent:],
        )
    rust = same_answers(answers, stream=True)
    plain = answers["plain-claude"][0]
    assert as_group(plain, "rust-claude") == rust.content
    assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    return plain, rust


@pytest.mark.parametrize("case", list(STREAMS))
def test_streams_take_the_lane_as_the_proxy_sends_them(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, case: str
) -> None:
    # The proxy's bytes (its `message_start` names the group), and its headers.
    plain, rust, counted = counted_stream_twins(proxy, upstream, log, "tools", STREAMS[case])
    assert rust.status_code == 200
    assert rust.headers["x-litellm-rust"] == "true"
    assert rust.headers["request-id"] == "req_1"
    assert counted["served"] == 2  # and the probe
    assert_logged_alike(log, rust, plain, "error-event-first" not in case)


def assert_logged_alike(
    log: Path, rust: httpx.Response, plain: httpx.Response, logged: bool = True
) -> None:
    """The same events for both, each with LiteLLM's usage and cost of the stream: one success
    when `logged` (LiteLLM cannot assemble some streams for its logging, on either path)."""
    rust_events, plain_events = events_of(log, rust), events_of(log, plain)
    assert [e["event"] for e in rust_events] == [e["event"] for e in plain_events]
    assert len(rust_events) == (1 if logged else 0)
    for rust_event, plain_event in zip(rust_events, plain_events, strict=True):
        assert rust_event["usage"] == plain_event["usage"]
        assert rust_event["response_cost"] == plain_event["response_cost"]


# Streams the lane reads to their end and leaves to the proxy, with its ticket.
STREAMS_TO_THE_PROXY = {
    "unusual-start": lambda: stream_reply(unusual_start()),
    "empty": lambda: stream_reply(b""),
}


@pytest.mark.parametrize("case", list(STREAMS_TO_THE_PROXY))
def test_streams_the_lane_leaves_to_the_proxy_get_its_answer(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, case: str
) -> None:
    to_the_proxy = STREAMS_TO_THE_PROXY[case]
    plain, rust, counted = counted_stream_twins(proxy, upstream, log, "text", to_the_proxy)
    assert counted["replayed"] == 1
    assert counted["served"] == 1  # the probe
    assert_logged_alike(log, rust, plain, case != "empty")


# The fast path's own answer through the proxy, for the same model: an `Origin` header keeps a
# request off the lane (`lane_header`) and changes nothing else in the answer's body.
OFF_THE_LANE = {**SDK, "origin": "http://client.test"}


@pytest.mark.parametrize("cut", ["before-the-first-event", "mid-way"])
def test_a_stream_cut_short_ends_as_the_fast_path_ends_it(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, cut: str
) -> None:
    """The connection drops mid-frame: with the lane, the client gets what the fast path sends
    without it, the stream so far and then the proxy's error event (the proxy writes it from the
    ticket). LiteLLM's own transport answers 500 when the drop comes within its first read, as
    here (deliberate difference 9)."""
    body = cases.text_stream(1)[:50] + b"x" * 400 if cut == "before-the-first-event" else b""
    body = body or cases.text_stream(40)
    before = counts_now(proxy, upstream, log)
    failures_before = len(failures(log))
    request = {"model": "rust-claude", **REQUESTS["text"], "stream": True}
    answers = []
    for headers in (OFF_THE_LANE, SDK):
        sent = len(upstream.requests)
        upstream.enqueue(stream_reply(body, action="disconnect_mid_body"))
        answers.append(post(proxy, "rust-claude", request, headers))
        assert len(upstream.requests) == sent + 1
    fast_path, lane = answers
    assert "x-litellm-rust" in fast_path.headers and "x-litellm-rust" in lane.headers
    assert lane.status_code == fast_path.status_code == 200
    assert lane.content == fast_path.content
    assert b"event: error\ndata: " in lane.content
    after = counts_now(proxy, upstream, log)
    taken = {"before-the-first-event": ("replayed", 0), "mid-way": ("served", 1)}[cut]
    assert after.get(taken[0], 0) == before.get(taken[0], 0) + 1 + taken[1]
    assert after["lane_header"] == before.get("lane_header", 0) + 1
    assert len(failures(log, failures_before + 2)) == failures_before + 2


def test_a_client_leaving_mid_stream_closes_the_provider_stream(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path
) -> None:
    before = counts_now(proxy, upstream, log)
    upstream.enqueue(stream_reply(cases.text_stream(30), action="trickle", pieces=100, delay_s=0.1))
    request = {"model": "rust-claude", **REQUESTS["text"], "stream": True}
    with httpx.Client(timeout=5) as client:
        url = f"{proxy.url}/v1/messages"
        with client.stream("POST", url, json=request, headers=SDK) as response:
            assert response.headers["x-litellm-rust"] == "true"
            assert b"message_start" in next(response.iter_raw())
            streaming = upstream.open_connections
    left_at = time.monotonic()
    # The provider's connection closes at once (its handler's next write fails, 0.1 s on), long
    # before its 10 s body would have ended.
    wait_until(lambda: upstream.open_connections < streaming, "the provider stream stays open")
    assert time.monotonic() - left_at < 5
    # Its replay logs what was streamed until the client left, once.
    assert [e["event"] for e in events_of(log, response)] == ["success"]
    assert counts_now(proxy, upstream, log)["client_gone"] == before.get("client_gone", 0) + 1


# -- streams the router holds until content (it may retry them) ----------------------------


@pytest.fixture(scope="module")
def retrying(
    upstream_server: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ProxyProcess, Path]]:
    """A proxy whose router retries (`num_retries: 1`): it holds a `/v1/messages` stream's
    frames until its first content, so that an error event before it can be retried."""
    log = tmp_path_factory.mktemp("lane-messages-retrying") / "events.jsonl"
    log.touch()
    params = deployment_kwargs("anthropic", upstream_server.url)
    models = twin_models("claude", params)
    with logged_proxy(
        models, log, router_settings={"num_retries": 1}, fastpath_lane=True
    ) as server:
        upstream_server.enqueue(Reply(json=anthropic_answer()))
        assert post(server, "plain-claude", {"messages": HI, "max_tokens": 8}, BEARER)
        yield server, log
        assert REPLAY_DECLINED not in server.log_text()


@pytest.mark.parametrize("case", ["text", "thinking-and-tool", "ping-first", "trickled"])
def test_streams_the_router_holds_take_the_lane_once_content_is_in(
    retrying: tuple[ProxyProcess, Path], upstream: RecordingUpstream, case: str
) -> None:
    proxy, log = retrying
    before = counts_now(proxy, upstream, log)
    plain, rust = stream_twins(proxy, upstream, REQUESTS["tools"], STREAMS[case]())
    assert rust.headers["x-litellm-rust"] == "true"
    assert counts_now(proxy, upstream, log)["served"] == before["served"] + 2  # and the probe
    assert_logged_alike(log, rust, plain)


def test_an_error_event_before_content_is_retried_by_the_proxy(
    retrying: tuple[ProxyProcess, Path], upstream: RecordingUpstream
) -> None:
    """The router retries such a stream: the lane leaves it to the proxy (with the ticket for
    the first attempt), whose router makes the second call as it does for the plain model."""
    proxy, log = retrying
    before = counts_now(proxy, upstream, log)
    sent = len(upstream.requests)
    failing, retried = (
        stream_reply(first_events(1) + ERROR_EVENT),
        stream_reply(cases.text_stream(2)),
    )
    plain, rust = stream_twins(proxy, upstream, REQUESTS["text"], failing, retried)
    assert len(upstream.requests) == sent + 4  # two calls each (equal per arm: `stream_twins`)
    assert rust.status_code == plain.status_code == 200
    after = counts_now(proxy, upstream, log)
    assert after.get("replayed", 0) == before.get("replayed", 0) + 1
    assert after["served"] == before["served"] + 1  # the probe


# -- Bedrock Invoke ---------------------------------------------------------------------------

EVENT_STREAM = {"content-type": "application/vnd.amazon.eventstream"}
# SigV4 signs the time of each request.
SIGNATURE_HEADERS = {"authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"}

BEDROCK = {
    "answer": (False, lambda: Reply(json={**anthropic_answer(), "model": cases.BEDROCK_MODEL})),
    "answer-with-cache": (
        False,
        lambda: Reply(json=anthropic_answer(cache_read_input_tokens=40)),
    ),
    "stream": (True, lambda: Reply(body=cases.bedrock_invoke_stream(cases.bedrock_events()))),
    "stream-with-cache": (
        True,
        lambda: Reply(body=cases.bedrock_invoke_stream(cases.bedrock_events(cache=True))),
    ),
    # No `message_stop`: LiteLLM's error event ends it.
    "stream-cut-short": (
        True,
        lambda: Reply(body=cases.bedrock_invoke_stream(cases.bedrock_events(stop=False))),
    ),
}


@pytest.mark.parametrize("case", list(BEDROCK))
def test_bedrock_invoke_takes_the_lane_as_the_proxy_answers(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, case: str
) -> None:
    stream, reply = BEDROCK[case]
    body = {**REQUESTS["tools"], "stream": stream}
    before = counts_now(proxy, upstream, log)
    answers = {}
    for model in ("plain-bedrock", "rust-bedrock"):
        sent = len(upstream.requests)
        answer = reply()
        if stream:
            answer.headers.update(EVENT_STREAM)
        upstream.enqueue(answer)
        answers[model] = (post(proxy, model, body, SDK), upstream.requests[sent:])
    (plain, plain_sent), (rust, rust_sent) = answers["plain-bedrock"], answers["rust-bedrock"]
    assert plain.status_code == rust.status_code == 200
    assert len(plain_sent) == len(rust_sent) == 1
    assert plain_sent[0].path == rust_sent[0].path
    unsigned = [
        ({k: v for k, v in headers.items() if k not in SIGNATURE_HEADERS}, sent_body)
        for sent_body, headers in map(provider_request, (plain_sent[0], rust_sent[0]))
    ]
    assert unsigned[0] == unsigned[1]
    assert rust.headers["x-litellm-rust"] == "true"
    group = b'"model":"rust-bedrock"'
    assert plain.content.replace(b'"model":"plain-bedrock"', group) == rust.content
    if not stream:
        assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    else:
        # The proxy writes a stream's cost headers from its logging object when it starts the
        # answer: 0.0 as a rule, but the stream's cost when LiteLLM's own logging of a stream the
        # mock sent in one piece has already run by then (a race on its path). The lane's are 0.0.
        def uncosted(response: httpx.Response) -> dict[str, str]:
            return {
                k: v
                for k, v in stable_headers(response, VOLATILE_HEADERS).items()
                if not k.startswith("x-litellm-response-cost")
            }

        assert uncosted(plain) == uncosted(rust)
        assert rust.headers["x-litellm-response-cost-original"] == "0.0"
    after = counts_now(proxy, upstream, log)
    taken = "replayed" if case == "answer-with-cache" else "served"
    assert after.get(taken, 0) == before.get(taken, 0) + 1 + (taken == "served")
    assert_logged_alike(log, rust, plain)
