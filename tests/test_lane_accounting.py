"""The lane's accounting without replays (`lane/accounting.py`): where a replay would leave
nothing but the router's and the rate limiter's counts, the lane makes those counts itself in
batches. The same requests through a proxy with the lane and one without it must leave the same
state (`tests.state_probe`), and anything the accounting does not cover is replayed: streams,
and every request once a callback that records requests is added, which is then given the same
payloads as on LiteLLM's path."""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.answers import (
    anthropic_stream_events,
    bedrock_invoke_stream_events,
    bedrock_stream_events,
    openai_stream_events,
    stream_pieces,
)
from devtools.deployments import PROVIDERS, bedrock_invoke_kwargs, deployment_kwargs, twin_models
from devtools.polling import wait_until
from devtools.processes import MASTER_KEY, REPO_ROOT, ProxyProcess
from devtools.upstream import RecordingUpstream, Reply
from litellm_fastpath.lane.groups import REFRESH_S

HI = [{"role": "user", "content": "hi"}]
PROBE = "tests.state_probe.probe"
STATE_PATH = "/state-probe/state"
# The minute in the router's usage keys (`global_router:<id>:<model>:tpm:14-05`, ...).
MINUTE = re.compile(r":\d{2}-\d{2}(?=:|$)")
RECORDER_PATH = "/state-probe/recorder"
SETTINGS_PATH = "/state-probe/settings"
CLIENTS = 8
# A group whose usage the router counts per minute (its rpm and tpm) and puts in its answers'
# headers: the lane serves its answers and streams with those headers, and its batch counts
# them. Its upstream streams when asked to (with the usage the proxy asks for).
LIMITED = "rust-limited"
LIMITED_BASE = "/accounting-limited"
# The same for an Anthropic deployment (`/v1/messages` too), Bedrock Converse (chat) and Claude
# on Bedrock Invoke (`/v1/messages`), whose upstreams stream by path.
LIMITED_ANTHROPIC = "rust-limited-anthropic"
LIMITED_ANTHROPIC_BASE = "/accounting-limited-anthropic"
LIMITED_CONVERSE = "rust-limited-converse"
LIMITED_INVOKE = "rust-limited-invoke"
CONVERSE_STREAM = "/converse-stream"
INVOKE_STREAM = "/invoke-with-response-stream"
# What the usage test sends each group, in order: (route, streamed).
LIMITED_REQUESTS = {
    LIMITED: [("/chat/completions", s) for s in (False, True, False, True, False, False)],
    LIMITED_ANTHROPIC: [
        ("/chat/completions", False),
        ("/v1/messages", True),
        ("/v1/messages", False),
        ("/chat/completions", True),
        ("/v1/messages", True),
        ("/v1/messages", False),
        ("/chat/completions", False),
    ],
    LIMITED_CONVERSE: [("/chat/completions", s) for s in (False, True, True, False, False)],
    LIMITED_INVOKE: [("/v1/messages", s) for s in (False, True, False, True, True, False)],
}
# A group whose upstream streams `/v1/messages` (the recording upstream's default answer is
# JSON).
MESSAGES_STREAM_BASE = "/accounting-stream"
MESSAGES_STREAM = "rust-anthropic-stream"


def models(upstream: RecordingUpstream) -> list[dict[str, Any]]:
    found = [m for p in PROVIDERS for m in twin_models(p, deployment_kwargs(p, upstream.url))]
    limits = {"rust": True, "rpm": 100_000, "tpm": 10_000_000}
    limited = {
        LIMITED: {**deployment_kwargs("openai", upstream.url + LIMITED_BASE), **limits},
        LIMITED_ANTHROPIC: {
            **deployment_kwargs("anthropic", upstream.url + LIMITED_ANTHROPIC_BASE),
            **limits,
        },
        LIMITED_CONVERSE: {**deployment_kwargs("bedrock", upstream.url), **limits},
        LIMITED_INVOKE: {**bedrock_invoke_kwargs(upstream.url), **limits},
    }
    streams = {**deployment_kwargs("anthropic", upstream.url + MESSAGES_STREAM_BASE), "rust": True}
    return [
        *found,
        *(
            {"model_name": name, "litellm_params": params, "model_info": {"id": name}}
            for name, params in limited.items()
        ),
        {"model_name": MESSAGES_STREAM, "litellm_params": streams},
    ]


@pytest.fixture(scope="module")
def arms(upstream_server: RecordingUpstream) -> Iterator[dict[str, ProxyProcess]]:
    """A proxy with the lane and one without it, with the same models and only LiteLLM's own
    callbacks, ours and the probe."""
    events = anthropic_stream_events("claude-sonnet-4-5", stream_pieces(3))
    sse = Reply(body=b"".join(events), headers={"Content-Type": "text/event-stream"})
    upstream_server.set_default(f"{MESSAGES_STREAM_BASE}/v1/messages", sse)
    upstream_server.set_default(f"{LIMITED_BASE}/chat/completions", chat_stream(), streamed=True)
    upstream_server.set_default(f"{LIMITED_ANTHROPIC_BASE}/v1/messages", sse, streamed=True)
    event_stream = {"Content-Type": "application/vnd.amazon.eventstream"}
    converse = b"".join(bedrock_stream_events(stream_pieces(3)))
    invoke = b"".join(bedrock_invoke_stream_events(stream_pieces(3)))
    upstream_server.set_default(CONVERSE_STREAM, Reply(body=converse, headers=event_stream))
    upstream_server.set_default(INVOKE_STREAM, Reply(body=invoke, headers=event_stream))
    found = {}
    try:
        for name, lane in (("lane", True), ("plain", False)):
            settings: dict[str, Any] = {"callbacks": ["litellm_fastpath.proxy.accelerator", PROBE]}
            if lane:
                settings["fastpath_lane"] = True
            # The probe is imported from this checkout.
            env = {"PYTHONPATH": str(REPO_ROOT)}
            found[name] = ProxyProcess(models(upstream_server), settings, extra_env=env)
            found[name].__enter__()
        for proxy in found.values():
            wait_until(lambda p=proxy: p.get(STATE_PATH).status_code == 200, "no probe")
        yield found
    finally:
        for proxy in found.values():
            proxy.__exit__(None, None, None)
        for suffix in (CONVERSE_STREAM, INVOKE_STREAM):
            upstream_server.set_default(suffix, None)


def chat_stream() -> Reply:
    """An OpenAI chat stream with the usage the proxy asks for."""
    chunks = openai_stream_events("gpt-4o-mini", stream_pieces(3), include_usage=True)
    return Reply(body=b"".join(chunks), headers={"Content-Type": "text/event-stream"})


def state(proxy: ProxyProcess) -> dict[str, Any]:
    response = proxy.get(STATE_PATH)
    assert response.status_code == 200, response.text
    return dict(response.json())


def send(proxy: ProxyProcess, model: str, count: int, **body: Any) -> None:
    def one(_: int) -> int:
        return proxy.post("/chat/completions", json={"model": model, "messages": HI, **body})

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(one, range(count)))
    assert [a.status_code for a in answers] == [200] * count, answers[0].text


def settled(proxy: ProxyProcess, calls: int) -> dict[str, Any]:
    """The proxy's state once its router counted `calls` successes, the lane (if any) replayed
    or accounted for everything it served, and the success callbacks ran (the router counts a
    success before its logging task runs the limiter's: read twice the same)."""
    last: list[dict[str, Any]] = []

    def done() -> dict[str, Any] | None:
        found = state(proxy)
        counted = sum(found["router"]["success_calls"].values())
        if counted < calls or found["lane_backlog"]:
            return None
        still = bool(last) and comparable(last[-1]) == comparable(found)
        last.append(found)
        return found if still else None

    return wait_until(done, lambda: state(proxy), timeout=30, interval=0.2)


def comparable(found: dict[str, Any]) -> dict[str, Any]:
    """The router's and the limiter's state, without the lane's counts; the router's counts per
    minute summed over the minutes (the arms run one after the other, a minute may turn between
    them); the limiter's windows without their starts (clocks)."""
    router = found["router"]
    per_key: dict[str, Any] = {}
    for key, value in router["cache"].items():
        key = MINUTE.sub(":<minute>", key)
        both_counts = isinstance(value, int) and isinstance(per_key.get(key, 0), int)
        per_key[key] = per_key.get(key, 0) + value if both_counts else value
    limiter = {k: v for k, v in found["limiter"].items() if not k.endswith(":window")}
    return {"router": {**router, "cache": per_key}, "limiter": limiter}


def differences(lane: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """Where two states' router and limiter differ: {path: (lane's, plain's)}."""
    return differences_of(comparable(lane), comparable(plain))


def differences_of(a: Any, b: Any, path: str = "") -> dict[str, Any]:
    """Where two JSON-like values differ: {path: (a's, b's)}."""
    if isinstance(a, dict) and isinstance(b, dict):
        found: dict[str, Any] = {}
        for key in sorted(a.keys() | b.keys()):
            found |= differences_of(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}/{key}")
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        found = {}
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found |= differences_of(x, y, f"{path}/{i}")
        return found
    return {} if a == b else {path: (a, b)}


def test_master_key_answers_are_accounted_for_as_their_replays_would(
    arms: dict[str, ProxyProcess],
) -> None:
    """Each chat provider's answers (their usage differs in shape), 8 clients at once: the
    router's counts, its cooldown counts and the limiter's token counters are the same with
    the lane's accounting as on LiteLLM's path; and the lane accounted for them all but the
    ones that taught it the master key."""
    calls = 0
    for provider in PROVIDERS:
        for proxy in arms.values():
            send(proxy, f"rust-{provider}", 40)
        calls += 40
    found = {name: settled(proxy, calls) for name, proxy in arms.items()}
    assert not (found_differences := differences(found["lane"], found["plain"])), found_differences
    lane = found["lane"]["lane"]
    assert lane["accounted"] >= calls - CLIENTS, lane
    assert lane["served"] == lane["accounted"] + sum(
        n for k, n in lane.items() if k.startswith("replay_needed:")
    )


def test_what_the_accounting_does_not_cover_is_replayed(
    arms: dict[str, ProxyProcess], upstream_server: RecordingUpstream
) -> None:
    """A stream that fails mid-way (its error frame, failure logging and the router's failure
    callbacks are the proxy's): the lane replays it. The client gets the same bytes, and the
    state stays the same as LiteLLM's path leaves it; so it does with the answers of a group
    with rpm and tpm limits, which the router counts per minute: the batch counts them."""
    before = {name: state(proxy) for name, proxy in arms.items()}
    calls = sum(before["plain"]["router"]["success_calls"].values())
    first = openai_stream_events("gpt-4o-mini", stream_pieces(1))[0]
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    failing = Reply(body=first + error, headers={"Content-Type": "text/event-stream"})
    bodies = {}
    upstream_server.set_default("/chat/completions", failing)
    try:
        for name, proxy in arms.items():
            body = {"model": "rust-openai", "messages": HI, "stream": True}
            bodies[name] = [proxy.post("/chat/completions", json=body) for _ in range(2)]
    finally:
        upstream_server.set_default("/chat/completions", None)
    assert [a.status_code for a in bodies["lane"]] == [200, 200], bodies["lane"][0].text
    assert list(map(stream_bytes, bodies["lane"])) == list(map(stream_bytes, bodies["plain"]))
    assert b'"error"' in bodies["lane"][0].content
    for proxy in arms.values():
        send(proxy, LIMITED, 4)
    found = {name: settled(proxy, calls + 4) for name, proxy in arms.items()}
    assert not differences(found["lane"], found["plain"])
    lane, was = found["lane"]["lane"], before["lane"]["lane"]
    assert lane["replay_needed:stream_failed"] - was.get("replay_needed:stream_failed", 0) == 2
    assert lane.get("replay_needed:deployment_usage", 0) == 0, lane
    assert lane["served"] - was["served"] == 6
    assert lane["accounted"] - was["accounted"] == 4


def test_a_usage_groups_stream_that_fails_midway_counts_as_on_litellm_s_path(
    arms: dict[str, ProxyProcess], upstream_server: RecordingUpstream
) -> None:
    """A stream of a group with rpm and tpm limits that fails after its first chunk: its
    request counted as it opened, no tokens (no success), and once more by the router's failure
    callback; the lane replays it (its failure is the proxy's). The client reads the same
    bytes, the router's counters end the same, and the next stream's headers count the failure
    once the lane has read the router's counters again (deliberate difference 16)."""
    for proxy in arms.values():
        send(proxy, LIMITED, 1)  # the worker knows the key (its first request is the proxy's)
        wait_until(lambda p=proxy: not state(p)["lane_backlog"], "batch pending")
    time.sleep(2 * REFRESH_S)  # the lane's next reading of the router's counters
    before = {name: state(proxy) for name, proxy in arms.items()}
    calls = sum(before["plain"]["router"]["success_calls"].values())
    first = openai_stream_events("gpt-4o-mini", stream_pieces(1))[0]
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    failing = Reply(body=first + error, headers={"Content-Type": "text/event-stream"})
    body = {"model": LIMITED, "messages": HI, "stream": True}
    upstream_server.set_default(f"{LIMITED_BASE}/chat/completions", failing, streamed=True)

    def send_two(proxy: ProxyProcess) -> list[httpx.Response]:
        first = proxy.post("/chat/completions", json=body)
        # Its replay's failure counted by the router; then the lane's next reading (0.25 s).
        wait_until(lambda: not state(proxy)["lane_backlog"], "replay pending")
        time.sleep(2 * REFRESH_S)
        return [first, proxy.post("/chat/completions", json=body)]

    try:
        bodies = {name: send_two(proxy) for name, proxy in arms.items()}
    finally:
        path = f"{LIMITED_BASE}/chat/completions"
        upstream_server.set_default(path, chat_stream(), streamed=True)
    assert [a.status_code for a in bodies["lane"]] == [200, 200], bodies["lane"][0].text
    assert list(map(stream_bytes, bodies["lane"])) == list(map(stream_bytes, bodies["plain"]))
    assert [a.headers["x-ratelimit-remaining-requests"] for a in bodies["lane"]] == [
        a.headers["x-ratelimit-remaining-requests"] for a in bodies["plain"]
    ]
    found = {name: settled(proxy, calls) for name, proxy in arms.items()}
    assert not (found_differences := differences(found["lane"], found["plain"])), found_differences
    lane, was = found["lane"]["lane"], before["lane"]["lane"]
    assert lane["replay_needed:stream_failed"] - was.get("replay_needed:stream_failed", 0) == 2


def stream_bytes(response: httpx.Response) -> bytes:
    """A stream's bytes as the client read them, but what differs per stream (its id, the
    proxy's clock at its first chunk)."""
    found = re.sub(rb'"created":\s*\d+', b"", response.content)
    return re.sub(rb'"id":\s*"[^"]*"', b"", found)


@pytest.mark.parametrize("route", ["stream", "stream-usage", "messages", "messages-stream"])
def test_streams_and_messages_are_accounted_once_their_shape_is_learnt(
    arms: dict[str, ProxyProcess], route: str
) -> None:
    """A stream and a `/v1/messages` answer or stream are replayed while their shape is learnt
    (two replays), then logged in the batch as the proxy would (a stream read by the proxy's own
    reader; their tokens counted by the limiter's own logging, as the batch has no usage of
    theirs): the router's and the limiter's state stay as LiteLLM's path leaves them. A stream
    whose client asked for its usage (`stream-usage`) gets the proxy's usage chunk from that
    reader in the batch: its client reads the same bytes as without the lane."""
    before = {name: state(proxy) for name, proxy in arms.items()}
    calls = sum(before["plain"]["router"]["success_calls"].values())
    group = MESSAGES_STREAM if route == "messages-stream" else "rust-anthropic"
    body: dict[str, Any] = {"model": group, "messages": HI}
    if route != "stream":
        body["max_tokens"] = 8
    if route != "messages":
        body["stream"] = True
    if route == "stream-usage":
        body["stream_options"] = {"include_usage": True}
    path = "/chat/completions" if route.startswith("stream") else "/v1/messages"
    read: dict[str, list[bytes]] = {}

    def send_route(proxy: ProxyProcess, count: int) -> list[bytes]:
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            answers = list(pool.map(lambda _: proxy.post(path, json=body), range(count)))
        assert [a.status_code for a in answers] == [200] * count, answers[0].text
        return [stream_bytes(a) for a in answers]

    for name, proxy in arms.items():
        # One at a time: the key (a worker's first request goes to the proxy) and the shape
        # (two replays) learnt.
        for _ in range(4):
            send_route(proxy, 1)
            wait_until(lambda p=proxy: not state(p)["lane_backlog"], "replays pending")
        read[name] = send_route(proxy, 16)
    if route.startswith("stream"):
        assert read["lane"] == read["plain"], (read["lane"][0], read["plain"][0])
    if route == "stream-usage":
        assert all(b'"usage"' in answer for answer in read["lane"]), read["lane"][0]
    found = {name: settled(proxy, calls + 20) for name, proxy in arms.items()}
    assert not (found_differences := differences(found["lane"], found["plain"])), found_differences
    lane, was = found["lane"]["lane"], before["lane"]["lane"]
    assert lane["accounted"] - was["accounted"] >= 16, lane
    assert lane.get("logging_failed", 0) == 0, lane


@pytest.mark.parametrize("group", list(LIMITED_REQUESTS))
def test_a_group_with_usage_in_its_headers_answers_as_the_router_does(
    arms: dict[str, ProxyProcess], group: str
) -> None:
    """The router's answers for a group with rpm and tpm limits carry the group's requests and
    tokens this minute, its own count of each answer included (a stream's request as it opens,
    its tokens once it ended): the lane's chat and `/v1/messages` answers and streams carry the
    same, request after request (each counted on the router's counters in the lane's batch),
    with the same headers and the same bodies."""
    was = collections.Counter(state(arms["lane"])["lane"])
    requests = LIMITED_REQUESTS[group]

    def steps(proxy: ProxyProcess) -> tuple[list[tuple[int, int]], set[str], list[bytes]]:
        """What each answer took off the remaining requests and tokens, the header names, and
        the bodies."""
        seen, names, bodies = [], set(), []
        for index, (path, stream) in enumerate(requests):
            if index == len(requests) - 1:
                # The last once the others are counted by the router and the lane has read its
                # counters again (every 0.25 s, unobservable): they count once.
                wait_until(lambda: not state(proxy)["lane_backlog"], "batch pending")
                time.sleep(2 * REFRESH_S)
            body: dict[str, Any] = {"model": group, "messages": HI, "max_tokens": 8}
            if stream:
                body["stream"] = True
                # The answers before it counted by the router (the lane's in its batch).
                wait_until(lambda: not state(proxy)["lane_backlog"], "batch pending")
                tokens = counted_tokens(proxy, group)
            answer = proxy.post(path, json=body)
            assert answer.status_code == 200, answer.text
            bodies.append(stream_bytes(answer))
            if stream:
                # The router counts a stream's tokens once its logging ran (after its end).
                wait_until(
                    lambda t=tokens: counted_tokens(proxy, group) > t, "stream's tokens uncounted"
                )
            assert answer.headers["x-ratelimit-limit-requests"] == "100000"
            assert answer.headers["x-ratelimit-limit-tokens"] == "10000000"
            names |= set(answer.headers)
            headers = answer.headers
            seen.append(
                (
                    int(headers["x-ratelimit-remaining-requests"]),
                    int(headers["x-ratelimit-remaining-tokens"]),
                )
            )
        taken = [(a[0] - b[0], a[1] - b[1]) for a, b in itertools.pairwise(seen)]
        return taken, names, bodies

    for _ in range(2):  # a minute's turn restarts the counts: once more then
        found = {name: steps(proxy) for name, proxy in arms.items()}
        if all(step[0] == 1 for taken, _, _ in found.values() for step in taken):
            break
    assert found["lane"] == found["plain"], found
    taken = found["lane"][0]
    assert all(step[0] == 1 for step in taken), found
    # A stream's own tokens are not in its headers (counted at its end), the next answer's are.
    streamed = [stream for _, stream in requests]
    expected = [before or not now for before, now in itertools.pairwise(streamed)]
    assert [step[1] > 0 for step in taken] == expected, taken
    lane = wait_until(lambda: not (s := state(arms["lane"]))["lane_backlog"] and s)["lane"]
    # The lane served them all (but a worker's first request of the key, if this was it),
    # streams and `/v1/messages` too, each shape learnt from its first two replays.
    assert lane["served"] - was["served"] >= len(requests) - 1, lane
    assert lane.get("replay_needed:deployment_usage", 0) == 0, lane


def counted_tokens(proxy: ProxyProcess, group: str) -> int:
    """The tokens the router counted for the group's deployment per minute, over the minutes."""
    cache = state(proxy)["router"]["cache"]
    counts = (v for k, v in cache.items() if f":{group}:" in k and ":tpm:" in k)
    return sum(v for v in counts if isinstance(v, (int, float)))


def test_a_recording_callback_gets_every_request_once_added(
    arms: dict[str, ProxyProcess],
) -> None:
    """Once an operator's callback that records requests is added (at runtime, as the proxy's
    config API adds one), it is given each request exactly once, as on LiteLLM's path, 8
    clients at once: the lane learns the request's shape from its first replays and runs
    LiteLLM's logging for the rest; the router's and the limiter's state stay the same."""
    before = {name: state(proxy) for name, proxy in arms.items()}
    calls = sum(before["plain"]["router"]["success_calls"].values())
    for proxy in arms.values():
        assert proxy.post(RECORDER_PATH).status_code == 200
        send(proxy, "rust-openai", 96)
    found = {name: settled(proxy, calls + 96) for name, proxy in arms.items()}
    for name, proxy in arms.items():
        found[name] = wait_until(
            lambda p=proxy: (s := state(p))["recorded"].get("success:rust-openai", 0) >= 96 and s,
            lambda p=proxy: state(p)["recorded"],
            timeout=30,
        )
    assert found["lane"]["recorded"] == found["plain"]["recorded"]
    assert found["lane"]["recorded"].get("logged_twice", 0) == 0
    assert not differences(found["lane"], found["plain"])
    lane, was = found["lane"]["lane"], before["lane"]["lane"]
    learning = lane.get("replay_needed:shape", 0) - was.get("replay_needed:shape", 0)
    assert lane["accounted"] - was["accounted"] == 96 - learning
    # Replayed while the shape was learnt: those served before its second replay ended.
    assert learning < 48, lane


PAYLOADS_PATH = "/state-probe/payloads"
# What differs between any two calls, whichever path: ids and clocks.
_IDS = frozenset(
    {
        "id",
        "litellm_call_id",
        "litellm_trace_id",
        "trace_id",
        "call_id",
        "x-litellm-call-id",
        "received_model_id",
    }
)
_CLOCKS = frozenset(
    {
        "created",
        "startTime",
        "endTime",
        "completionStartTime",
        "start_time",
        "end_time",
        "api_call_start_time",
        "completion_start_time",
        "response_time",
        "response_ms",
        "_response_ms",
        "litellm_overhead_time_ms",
        "queue_time_seconds",
        "time_to_first_token",
        "llm_api_timing_windows",
        "arrival_time",
        "llm_api_duration_ms",
        "llm_provider-date",
        "date",
        "created_at",
    }
)


def normalized(value: Any, ports: tuple[int, ...]) -> Any:
    """A recorded payload without what differs between two calls on any path: ids, clocks,
    and the proxy's port (in its request's headers and URLs)."""
    if isinstance(value, dict):
        return {
            k: "<id>" if k in _IDS else "<clock>" if k in _CLOCKS else normalized(v, ports)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [normalized(v, ports) for v in value]
    if isinstance(value, str):
        for port in ports:
            value = value.replace(f":{port}", ":<port>")
    return value


def recorded_by_marker(proxy: ProxyProcess) -> dict[str, Any]:
    """The recording callback's payloads, by the marker each request carried."""
    found = {}
    for payload in proxy.get(PAYLOADS_PATH).json():
        messages = payload["kwargs"].get("messages") or []
        text = messages[0].get("content") if messages else None
        if isinstance(text, str) and text.startswith("marker "):
            found[text] = payload
    return found


def all_recorded(proxy: ProxyProcess, count: int) -> dict[str, Any] | None:
    found = recorded_by_marker(proxy)
    return found if len(found) == count else None


def test_the_recording_callback_gets_the_same_payloads(
    arms: dict[str, ProxyProcess], upstream_server: RecordingUpstream
) -> None:
    """What an operator's recording callback is given for each request (its kwargs, the
    standard logging payload among them, and the response object) is the same, field by field
    but ids and clocks, with the lane on as on LiteLLM's path; streams as their providers send
    them (the text a stream is logged with is what its chunks spelt)."""
    markers = [
        f"marker {provider} {shape} {i}"
        for provider in PROVIDERS
        for shape in ("chat", "stream", "messages")
        for i in range(8 if shape == "chat" else 4)
        if (shape, provider) != ("stream", "bedrock")
        and (shape != "messages" or provider == "anthropic")
    ]
    # A stream of each plain twin (LiteLLM's own path, on both arms): what the others are to
    # equal.
    markers += [f"marker {provider} plain-stream 0" for provider in ("openai", "anthropic")]
    call_ids: dict[tuple[str, str], str] = {}
    for proxy in arms.values():  # the lane learns the key from its first request
        assert proxy.post("/chat/completions", json={"model": "rust-openai", "messages": HI})
    before = state(arms["lane"])["lane"]
    events = anthropic_stream_events("claude-sonnet-4-5", stream_pieces(3))
    streams = {
        "/chat/completions": chat_stream(),
        "/v1/messages": Reply(body=b"".join(events), headers={"Content-Type": "text/event-stream"}),
    }
    for suffix, reply in streams.items():
        upstream_server.set_default(suffix, reply, streamed=True)
    try:
        found = _recorded(arms, markers, call_ids)
    finally:
        for suffix in streams:
            upstream_server.set_default(suffix, None, streamed=True)
    lane = state(arms["lane"])["lane"]
    assert lane["served"] - before.get("served", 0) == len(markers) - 2
    # Past each shape's first replays, its requests were logged without a replay (streams and
    # `/v1/messages` too).
    others = sum(marker.split()[2] in ("stream", "messages") for marker in markers)
    assert lane["accounted"] - before.get("accounted", 0) >= len(PROVIDERS) + others // 2, lane
    for (name, marker), call_id in call_ids.items():
        # The call the client was told of is the one logged.
        assert found[name][marker]["kwargs"]["litellm_call_id"] == call_id
    ports = tuple(proxy.port for proxy in arms.values())
    for marker in markers:
        lane = normalized(found["lane"][marker], ports)
        plain = normalized(found["plain"][marker], ports)
        found_differences = differences_of(lane, plain)
        assert not found_differences, "\n".join(
            f"{marker} {path}: {a!r} != {b!r}" for path, (a, b) in found_differences.items()
        )
    for provider in ("openai", "anthropic"):
        # The text a stream is logged with (LiteLLM's record of what it served, and the
        # response) is the plain model's, with the lane and without it.
        plain = found["plain"][f"marker {provider} plain-stream 0"]["kwargs"]
        for name in arms:
            rust = found[name][f"marker {provider} stream 0"]["kwargs"]
            assert rust["served_output_texts"] == plain["served_output_texts"], (name, rust)
        assert "w0 w1 w2" in json.dumps(plain["served_output_texts"]), plain


def _recorded(
    arms: dict[str, ProxyProcess], markers: list[str], call_ids: dict[tuple[str, str], str]
) -> dict[str, dict[str, Any]]:
    """Each marker's request sent to each arm, and what the recording callback got for it."""
    for name, proxy in arms.items():
        assert proxy.post(RECORDER_PATH).status_code == 200
        for marker in markers:
            _, provider, shape, _ = marker.split()
            twin = "plain" if shape == "plain-stream" else "rust"
            content = [{"role": "user", "content": marker}]
            body = {"model": f"{twin}-{provider}", "messages": content}
            if shape == "messages":
                answer = proxy.post("/v1/messages", json={**body, "max_tokens": 8})
            else:
                answer = proxy.post("/chat/completions", json={**body, "stream": "stream" in shape})
            assert answer.status_code == 200, answer.text
            call_ids[(name, marker)] = answer.headers["x-litellm-call-id"]
            if marker.endswith((" chat 1", " stream 1", " messages 1")):
                # The shape's two replays done (learnt): its next requests are logged in the
                # batch, however soon they come.
                wait_until(lambda p=proxy: not state(p)["lane_backlog"], "replays pending")
    return {
        name: wait_until(
            lambda p=proxy: all_recorded(p, len(markers)),
            lambda p=proxy: sorted(recorded_by_marker(p)),
            timeout=30,
        )
        for name, proxy in arms.items()
    }


def test_litellm_s_info_logs_keep_the_replays(arms: dict[str, ProxyProcess]) -> None:
    """With LiteLLM's loggers at INFO (a replay logs per request there: the router's pick, its
    200 OK) the lane replays each request it serves (`verbose_logs`), and the router's and the
    limiter's state stay as LiteLLM's path leaves them."""
    before = {name: state(proxy) for name, proxy in arms.items()}
    calls = sum(before["plain"]["router"]["success_calls"].values())
    try:
        for proxy in arms.values():
            assert proxy.post(SETTINGS_PATH, json={"info_logs": True}).status_code == 200
            send(proxy, "rust-openai", 8)
        found = {name: settled(proxy, calls + 8) for name, proxy in arms.items()}
    finally:
        for proxy in arms.values():
            proxy.post(SETTINGS_PATH, json={"info_logs": False})
    assert not (found_differences := differences(found["lane"], found["plain"])), found_differences
    lane, was = found["lane"]["lane"], before["lane"]["lane"]
    assert lane["served"] - was["served"] == 8, lane
    replayed = lane.get("replay_needed:verbose_logs", 0) - was.get("replay_needed:verbose_logs", 0)
    assert replayed == 8, lane
    assert lane["accounted"] == was["accounted"]


def test_a_callback_with_its_own_redaction_keeps_the_replays(
    arms: dict[str, ProxyProcess],
) -> None:
    """A logging callback that replaces LiteLLM's per-callback redaction hook leaves the lane on,
    and the lane replays each request it serves while the callback is there
    (`callback:_Redactor`: the batch does not run that hook): the callback is shown each request
    once, redacted its way, as on LiteLLM's path, and the router's and the limiter's state stay
    the same. Once it is removed the batch takes the requests again (its shapes learnt anew)."""
    calls = sum(state(arms["plain"])["router"]["success_calls"].values())
    warming = 0

    def served() -> bool:  # a worker's first requests go to the proxy: it learns the key
        nonlocal warming
        warming += 1
        for proxy in arms.values():  # as many to each arm: their router's counts stay alike
            send(proxy, "rust-openai", 1)
        return bool(state(arms["lane"])["lane"].get("served"))

    wait_until(served, "the lane serves no request")
    calls += warming
    before = {name: settled(proxy, calls) for name, proxy in arms.items()}
    reason = "replay_needed:callback:_Redactor"
    try:
        for proxy in arms.values():
            assert proxy.post(SETTINGS_PATH, json={"redactor": True}).status_code == 200
            send(proxy, "rust-openai", 16)
        found = {name: settled(proxy, calls + 16) for name, proxy in arms.items()}
    finally:
        for proxy in arms.values():
            proxy.post(SETTINGS_PATH, json={"redactor": False})
    assert not (found_differences := differences(found["lane"], found["plain"])), found_differences
    redacted = {name: found[name]["redacted"] for name in arms}
    assert redacted["lane"] == redacted["plain"] == {"rust-openai:<hidden>": 16}, redacted
    lane, was = found["lane"]["lane"], before["lane"]["lane"]
    assert lane["served"] - was.get("served", 0) == 16, lane
    assert lane.get(reason, 0) - was.get(reason, 0) == 16, lane
    assert lane["accounted"] == was["accounted"]
    for proxy in arms.values():
        send(proxy, "rust-openai", 8)
    found = {name: settled(proxy, calls + 24) for name, proxy in arms.items()}
    assert not (found_differences := differences(found["lane"], found["plain"])), found_differences
    after = found["lane"]["lane"]
    assert after.get(reason, 0) == lane.get(reason, 0), after
    # The worker's callbacks changed: its request shapes are learnt anew from two replays.
    learnt = after.get("replay_needed:shape", 0) - lane.get("replay_needed:shape", 0)
    assert after["accounted"] - lane["accounted"] + learnt == 8, after


def test_a_stream_whose_client_left_is_logged_in_the_batch_with_what_was_streamed(
    arms: dict[str, ProxyProcess], upstream_server: RecordingUpstream
) -> None:
    """Once its shape is learnt, a stream whose client leaves mid-way is logged in the batch,
    once, with what was streamed until the client left (deliberate difference 4: LiteLLM's
    proxy reads such a stream to its end)."""
    proxy = arms["lane"]
    assert proxy.post(RECORDER_PATH).status_code == 200

    def body(text: str) -> dict[str, Any]:
        return {
            "model": "rust-openai",
            "messages": [{"role": "user", "content": text}],
            "stream": True,
        }

    # One at a time: the key (a worker's first request goes to the proxy) and the shape (two
    # replays) learnt, if they were not yet.
    for i in range(4):
        assert proxy.post("/chat/completions", json=body(f"learn {i}")).status_code == 200
        wait_until(lambda: not state(proxy)["lane_backlog"], "replays pending")
    before = state(proxy)["lane"]
    events = openai_stream_events("gpt-4o-mini", stream_pieces(40))
    upstream_server.enqueue(
        Reply(
            body=b"".join(events),
            headers={"content-type": "text/event-stream"},
            action="trickle",
            pieces=len(events),
            delay_s=0.1,
        )
    )
    marker = "marker client gone"
    with httpx.Client(timeout=5) as client:
        headers = {"Authorization": f"Bearer {MASTER_KEY}"}
        url = f"{proxy.url}/chat/completions"
        with client.stream("POST", url, json=body(marker), headers=headers) as response:
            assert response.headers["x-litellm-rust"] == "true"
            lines = response.iter_lines()
            while '"w1 "' not in next(lines):  # two words in, the client leaves
                pass
    found = wait_until(
        lambda: recorded_by_marker(proxy).get(marker),
        lambda: (state(proxy)["lane"], proxy.log_text()[-3000:]),
        timeout=30,
    )
    content = found["response"]["choices"][0]["message"]["content"]
    assert content.startswith("w0 w1 ") and "w39" not in content, content
    lane = state(proxy)["lane"]
    assert lane["accounted"] == before["accounted"] + 1, lane
    assert lane["client_gone"] == before.get("client_gone", 0) + 1, lane
    assert (
        sum(
            p["kwargs"]["litellm_call_id"] == found["kwargs"]["litellm_call_id"]
            for p in proxy.get(PAYLOADS_PATH).json()
        )
        == 1
    )
