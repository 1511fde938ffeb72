"""The fast lane (`fastpath_lane: true`) through the real proxy: a `rust: true` model served by
the lane against its plain twin served by the proxy, request by request."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.answers import openai_stream_events, stream_pieces
from devtools.deployments import PROVIDERS, deployment_kwargs, twin_models
from devtools.polling import PROMPTLY_S, wait_until
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.proxy_logger import (
    events_for,
    lane_counts,
    logged_proxy,
    read_events,
    wait_for_count,
    wait_for_events,
)
from devtools.upstream import RecordingUpstream, Reply
from tests.answer_hooks import STAMP
from tests.conftest import VOLATILE_HEADERS as BASE_VOLATILE
from tests.conftest import stable_headers
from tests.test_tools import (
    ANTHROPIC_TOOL_USE,
    CALLS_TWO,
    CALLS_WEATHER,
    CONVERSE_TOOL_USE,
    HISTORY,
    WEATHER,
)
from tests.test_tools import answer as tool_answer

pytestmark = pytest.mark.proxy

HI = [{"role": "user", "content": "hi"}]
CHAT_PATHS = ("/chat/completions", "/v1/chat/completions")
# Headers that differ on every call, or by transport.
VOLATILE_HEADERS = BASE_VOLATILE | {
    "x-litellm-model-id",
    "x-litellm-model-group",
    "x-litellm-key-spend",
}
# What the proxy logs when the lane and the fast path disagree on a request (`claims.py`).
REPLAY_DECLINED = "replay was declined by the fast path"


def lane_proxy(
    upstream: RecordingUpstream,
    log: Path,
    *,
    workers: int = 1,
    env: dict[str, str] | None = None,
) -> ProxyProcess:
    models = [m for p in PROVIDERS for m in twin_models(p, deployment_kwargs(p, upstream.url))]
    return logged_proxy(models, log, workers=workers, env=env, fastpath_lane=True)


@pytest.fixture(scope="module")
def proxy(upstream_server: RecordingUpstream, log: Path) -> Iterator[ProxyProcess]:
    with lane_proxy(upstream_server, log) as server:
        # The first request of a key goes through the proxy, which hands the lane its verdict.
        assert server.post("/chat/completions", json={"model": "plain-openai", "messages": HI})
        yield server
        # No request the lane served was one the fast path declines on its replay.
        assert REPLAY_DECLINED not in server.log_text()


def call(proxy: ProxyProcess, upstream: RecordingUpstream, model: str, **body: Any) -> Any:
    before = len(upstream.requests)
    response = proxy.post(body.pop("path", "/chat/completions"), json={"model": model, **body})
    return response, upstream.requests[before:]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("path", CHAT_PATHS)
@pytest.mark.parametrize(
    "params",
    [{}, {"max_tokens": 5, "temperature": 0.2, "stop": ["x"]}],
    ids=["plain", "params"],
)
def test_the_lane_answers_as_the_proxy_does(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    log: Path,
    provider: str,
    path: str,
    params: dict,
) -> None:
    messages = [{"role": "system", "content": "be brief"}, *HI]
    plain_model, rust_model = f"plain-{provider}", f"rust-{provider}"
    served_before = lane_counts(log).get("served", 0)
    plain, plain_sent = call(proxy, upstream, plain_model, path=path, messages=messages, **params)
    rust, rust_sent = call(proxy, upstream, rust_model, path=path, messages=messages, **params)
    assert plain.status_code == rust.status_code == 200
    assert len(plain_sent) == len(rust_sent) == 1
    assert plain_sent[0].json() == rust_sent[0].json()
    volatile = {"model": None, "id": None, "created": None}
    assert {**plain.json(), **volatile} == {**rust.json(), **volatile}
    assert rust.json()["model"] == rust_model
    assert rust.json()["id"][:9] == plain.json()["id"][:9]
    assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    assert rust.headers["x-litellm-rust"] == "true"
    assert rust.headers["x-litellm-model-group"] == rust_model
    assert float(rust.headers["x-litellm-response-cost"]) > 0
    # The replay logs the answer the client got.
    events = events_for(log, rust_model, 1)
    assert events[-1]["payload"]["id"] == rust.json()["id"]
    assert lane_counts(log).get("served", 0) > served_before


def _without_annotations(answer: dict) -> dict:
    message = {k: v for k, v in answer["choices"][0]["message"].items() if k != "annotations"}
    return {**answer, "choices": [{**answer["choices"][0], "message": message}]}


def _with_text(answer: dict) -> dict:
    message = {**answer["choices"][0]["message"], "content": "Let me check."}
    return {**answer, "choices": [{**answer["choices"][0], "message": message}]}


LET_ME_CHECK = {"type": "text", "text": "Let me check."}
TOOL_ANSWERS = {
    "openai": ("/chat/completions", CALLS_WEATHER),
    "openai-two-calls": ("/chat/completions", _without_annotations(CALLS_TWO)),
    "openai-text-and-call": ("/chat/completions", _with_text(CALLS_WEATHER)),
    "anthropic": ("/v1/messages", ANTHROPIC_TOOL_USE),
    "anthropic-text-and-call": (
        "/v1/messages",
        {**ANTHROPIC_TOOL_USE, "content": [LET_ME_CHECK, *ANTHROPIC_TOOL_USE["content"]]},
    ),
    "bedrock": ("/converse", CONVERSE_TOOL_USE),
    "bedrock-text-and-call": (
        "/converse",
        {
            **CONVERSE_TOOL_USE,
            "output": {
                "message": {
                    "role": "assistant",
                    "content": [
                        {"text": "Let me check."},
                        *CONVERSE_TOOL_USE["output"]["message"]["content"],
                    ],
                }
            },
        },
    ),
}


def same_bytes(plain: httpx.Response, rust: httpx.Response) -> bool:
    """The answers byte for byte, but for the model group's name and the minted id and time."""

    def bare(response: httpx.Response, model: str) -> bytes:
        content = re.sub(rb'^\{"id":"chatcmpl-[^"]*","created":\d+,', b"", response.content)
        return content.replace(f'"model":"{model}"'.encode(), b"")

    return bare(plain, plain.json()["model"]) == bare(rust, rust.json()["model"])


@pytest.mark.parametrize(
    ("provider", "answer"),
    [
        *((provider, "text") for provider in PROVIDERS),
        *((a.split("-")[0], a) for a in TOOL_ANSWERS),
    ],
)
def test_tool_calling_takes_the_lane(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, provider: str, answer: str
) -> None:
    """Tools, a tool exchange in the history and tool params: the same upstream body and the
    same answer, text or tool calls, both written by the lane."""
    path, reply = TOOL_ANSWERS[answer if answer != "text" else provider]
    if answer != "text":
        upstream.set_default(path, Reply(json=reply))
    body = {
        "messages": HISTORY,
        "tools": [WEATHER],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
    }
    if provider != "bedrock":  # LiteLLM's Converse path refuses it
        body["parallel_tool_calls"] = False
    counts_before = lane_counts(log)
    try:
        plain, plain_sent = call(proxy, upstream, f"plain-{provider}", **body)
        rust, rust_sent = call(proxy, upstream, f"rust-{provider}", **body)
    finally:
        upstream.set_default(path, None)
    assert plain.status_code == rust.status_code == 200, (plain.text, rust.text)
    assert len(plain_sent) == len(rust_sent) == 1
    assert plain_sent[0].json() == rust_sent[0].json()
    volatile = {"model": None, "id": None, "created": None}
    assert {**plain.json(), **volatile} == {**rust.json(), **volatile}
    assert same_bytes(plain, rust), (plain.content, rust.content)
    assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    assert rust.headers["x-litellm-rust"] == "true"
    if answer != "text":
        assert rust.json()["choices"][0]["message"]["tool_calls"]
    if answer.endswith("text-and-call"):
        assert rust.json()["choices"][0]["message"]["content"] == "Let me check."
    wait_for_count(log, "served", counts_before.get("served", 0) + 1)


def test_a_callers_call_id_is_kept(proxy: ProxyProcess, upstream: RecordingUpstream) -> None:
    for model in ("plain-openai", "rust-openai"):
        response = proxy.post(
            "/chat/completions",
            json={"model": model, "messages": HI},
            headers={"x-litellm-call-id": "call-123"},
        )
        assert response.headers["x-litellm-call-id"] == "call-123"


def concurrent_rust_calls(
    proxy: ProxyProcess, upstream: RecordingUpstream, total: int, clients: int
) -> None:
    """`total` requests to `rust-openai` from `clients` threads: every one answered by Rust,
    with one provider call each (the replays through the proxy never call it again)."""
    upstream_before = len(upstream.requests)

    def one(_: int) -> httpx.Response:
        return proxy.post("/chat/completions", json={"model": "rust-openai", "messages": HI})

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        responses = list(pool.map(one, range(total)))
    assert [r.status_code for r in responses] == [200] * total
    assert all(r.headers["x-litellm-rust"] == "true" for r in responses)
    assert len(upstream.requests) - upstream_before == total


def test_every_served_request_is_logged_once(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path
) -> None:
    before = len(events_for(log, "rust-openai", 0))
    full_auths = litellm_auths(log)
    total = 400
    concurrent_rust_calls(proxy, upstream, total, clients=8)
    events = events_for(log, "rust-openai", before + total, timeout=60)
    assert len(events) - before == total
    assert all(e["event"] == "success" and e["response_cost"] > 0 for e in events[before:])
    # Their replays took LiteLLM's auth without its checks (`lane.reauth`), none the full one.
    assert litellm_auths(log) == full_auths


def litellm_auths(log: Path) -> dict[str, int]:
    """Replays given LiteLLM's full auth, by why, as the lane's counts last logged them."""
    return {k: v for k, v in lane_counts(log).items() if k.startswith("replay_litellm_auth:")}


@pytest.mark.parametrize("status", [429, 500])
def test_upstream_errors_are_the_proxys(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, status: int
) -> None:
    error = {"error": {"message": "nope", "type": "x", "param": None, "code": str(status)}}
    answers = {}
    for model in ("plain-openai", "rust-openai"):
        upstream.enqueue(Reply(status=status, json=error))
        response, sent = call(proxy, upstream, model, messages=HI)
        assert len(sent) == 1
        answers[model] = response
    plain, rust = answers["plain-openai"], answers["rust-openai"]
    assert plain.status_code == rust.status_code == status
    assert plain.text.replace("plain-openai", "rust-openai") == rust.text
    failures = [e for e in events_for(log, "rust-openai", 1) if e["event"] == "failure"]
    assert failures and failures[-1]["status_code"] == status
    assert lane_counts(log).get("replayed", 0) >= 1


@pytest.mark.parametrize(
    "body",
    [
        {"messages": HI, "stream": True},
        {"messages": HI, "tools": [{"type": "function", "function": {"name": "f"}}]},
        {"messages": HI, "metadata": {"tags": ["a"]}},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {"messages": HI, "max_tokens": "five"},
        {"messages": "hi"},
    ],
    ids=["stream", "tools", "metadata", "parts", "bad-max-tokens", "bad-messages"],
)
def test_requests_the_lane_does_not_take_get_the_proxys_answer(
    proxy: ProxyProcess, upstream: RecordingUpstream, body: dict
) -> None:
    plain, plain_sent = call(proxy, upstream, "plain-openai", **body)
    rust, rust_sent = call(proxy, upstream, "rust-openai", **body)
    assert plain.status_code == rust.status_code
    assert len(plain_sent) == len(rust_sent)
    if not body.get("stream") and plain.status_code == 200:
        assert {**plain.json(), "model": None} == {**rust.json(), "model": None}


def test_bad_keys_get_the_proxys_answer(proxy: ProxyProcess, upstream: RecordingUpstream) -> None:
    for headers in ({"Authorization": "Bearer sk-wrong"}, {"Authorization": "sk-wrong"}):
        answers = [
            proxy.post("/chat/completions", json={"model": m, "messages": HI}, headers=headers)
            for m in ("plain-openai", "rust-openai")
        ]
        # This DB-less proxy answers 400 for an unknown key, 500 for a malformed header.
        assert answers[0].status_code == answers[1].status_code >= 400
        assert answers[0].text == answers[1].text


def test_a_client_cannot_send_a_ticket(proxy: ProxyProcess, upstream: RecordingUpstream) -> None:
    response, sent = call(proxy, upstream, "rust-openai", messages=HI)
    assert response.status_code == 200
    forged = proxy.post(
        "/chat/completions",
        json={"model": "rust-openai", "messages": HI, "stream": True},
        headers={"x-fastpath-lane-ticket": "0" * 64},
    )
    assert forged.status_code == 200
    assert len(sent) == 1


def test_litellm_sees_the_clients_address(proxy: ProxyProcess, log: Path) -> None:
    """Forwarded over the lane's Unix socket or replayed, a request keeps its client address; a
    client cannot claim another one through the lane's header."""
    for model in ("plain-openai", "rust-openai"):
        before = len(events_for(log, model, 0))
        for headers in ({}, {"x-fastpath-lane-peer": "10.9.9.9:1"}):
            response = proxy.post(
                "/chat/completions", json={"model": model, "messages": HI}, headers=headers
            )
            assert response.status_code == 200
        events = events_for(log, model, before + 2)[before:]
        assert [e["requester_ip"] for e in events] == ["127.0.0.1", "127.0.0.1"]


def test_other_routes_pass_through(proxy: ProxyProcess) -> None:
    assert proxy.request("GET", "/health/liveliness").status_code == 200
    models = proxy.request("GET", "/v1/models").json()
    assert {m["id"] for m in models["data"]} >= {"plain-openai", "rust-openai"}


def test_served_requests_are_logged_before_the_worker_exits(
    upstream: RecordingUpstream, tmp_path: Path
) -> None:
    """8 clients, then SIGTERM right after the last answer: the worker logs what it served
    before it exits, exactly once, whether a request was replayed or logged in a batch."""
    log = tmp_path / "events.jsonl"
    log.touch()
    with lane_proxy(upstream, log) as proxy:
        proxy.post("/chat/completions", json={"model": "plain-openai", "messages": HI})

        def send(client: httpx.Client) -> None:
            for _ in range(25):
                response = client.post(
                    "/chat/completions",
                    json={"model": "rust-openai", "messages": HI},
                    headers={"Authorization": f"Bearer {MASTER_KEY}"},
                )
                assert response.headers["x-litellm-rust"] == "true"

        with contextlib.ExitStack() as stack:
            clients = [
                stack.enter_context(httpx.Client(base_url=proxy.url, trust_env=False))
                for _ in range(8)
            ]
            with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
                list(pool.map(send, clients))
        # SIGTERM right away: the worker replays or logs what it served before it exits.
        proxy.stop(term_timeout=40)
    events = read_events(log)
    served = [e for e in events if e.get("model_group") == "rust-openai"]
    assert len(served) == 200
    assert len({e["payload"]["litellm_call_id"] for e in served}) == 200
    # Most were logged in the lane's batches (past the replays that learnt their shape).
    assert lane_counts(log)["accounted"] >= 100


def test_streams_in_flight_at_shutdown_finish_and_are_logged(tmp_path: Path) -> None:
    from devtools.processes import ServerProcess

    log = tmp_path / "events.jsonl"
    log.touch()
    with ServerProcess(args=("--chunk-delay-ms", "20")) as paced:
        models = twin_models("openai", deployment_kwargs("openai", paced.url))
        with logged_proxy(models, log, fastpath_lane=True) as proxy:
            assert proxy.post("/chat/completions", json={"model": "plain-openai", "messages": HI})
            started = threading.Barrier(6)
            bodies: list[bytes] = []

            def stream() -> None:
                body = {"model": "rust-openai", "messages": HI, "stream": True, "max_tokens": 40}
                headers = {"Authorization": f"Bearer {MASTER_KEY}"}
                with httpx.Client(timeout=30, trust_env=False) as client:
                    url = f"{proxy.url}/chat/completions"
                    with client.stream("POST", url, json=body, headers=headers) as response:
                        lines = response.iter_lines()
                        first = next(lines)
                        started.wait()
                        bodies.append("\n".join([first, *lines]).encode())

            threads = [threading.Thread(target=stream) for _ in range(5)]
            for thread in threads:
                thread.start()
            started.wait()
            # SIGTERM while the five streams are half way: they finish, then their replays.
            proxy.stop(term_timeout=40)
            for thread in threads:
                thread.join(timeout=30)
    assert len(bodies) == 5
    assert all(body.rstrip().endswith(b"data: [DONE]") for body in bodies)
    events = read_events(log)
    assert sum(e.get("model_group") == "rust-openai" for e in events) == 5


def test_two_workers_share_the_port(upstream: RecordingUpstream, tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.touch()
    with lane_proxy(upstream, log, workers=2) as proxy:
        answers = []
        for _ in range(20):
            for model in ("plain-openai", "rust-openai"):
                answers.append(
                    proxy.post("/chat/completions", json={"model": model, "messages": HI})
                )
        assert all(a.status_code == 200 for a in answers)
        assert events_for(log, "rust-openai", 20, timeout=30)


@pytest.mark.parametrize("workers", [2, 1])
def test_a_busy_worker_leaves_its_clients_next_connection_to_the_others(
    upstream: RecordingUpstream, tmp_path: Path, workers: int
) -> None:
    """With several workers on one socket, a worker whose replays fall behind closes the
    connection after its answer (and pauses accepting), so the client's next connection can go
    to a less busy worker; a lone worker keeps its connections. Busy here from the first
    waiting replay (the default is 32), so every lane answer of two workers closes."""
    log = tmp_path / "events.jsonl"
    log.touch()
    env = {"LITELLM_FASTPATH_LANE_BUSY_BACKLOG": "1"}
    with lane_proxy(upstream, log, workers=workers, env=env) as proxy:
        answers = [
            proxy.post("/chat/completions", json={"model": "rust-openai", "messages": HI})
            for _ in range(12)
        ]
        assert all(a.status_code == 200 for a in answers)
        closed = sum(a.headers.get("connection") == "close" for a in answers)
        events = events_for(log, "rust-openai", len(answers), timeout=30)
        assert len(events) == len(answers)
        # Each worker's counts as its last event saw them (they only grow).
        counts: dict[int, dict[str, int]] = {}
        for event in events:
            counts[event["pid"]] = event["lane"] or {}
        served = sum(c.get("served", 0) for c in counts.values())
        closed_busy = sum(c.get("closed_busy", 0) for c in counts.values())
        # A worker leaves requests to the proxy until it has the key's verdict.
        assert served >= len(answers) // 2
        if workers == 1:
            assert closed == closed_busy == 0
        else:
            assert closed == closed_busy == served


# -- virtual keys: the lane against the normal path, key by key --------------------------------


@pytest.fixture(scope="module")
def key_proxies(
    upstream_server: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator:
    """Two proxies with the same seeded keys (`tests.lane_keys`): lane on, and lane off."""
    models = twin_models("openai", deployment_kwargs("openai", upstream_server.url))
    proxies = []
    for lane in (True, False):
        log = tmp_path_factory.mktemp("keys") / "events.jsonl"
        log.touch()
        settings = {"fastpath_lane": True} if lane else {}
        proxy = logged_proxy(models, log, callbacks=("tests.lane_keys.seeder",), **settings)
        proxy.log_file = log  # type: ignore[attr-defined]
        proxies.append(proxy)
    try:
        for proxy in proxies:
            proxy.start()
        for proxy in proxies:  # until the keys are seeded (just after startup)
            wait_until(
                lambda p=proxy: (
                    p.post(
                        "/chat/completions",
                        json={"model": "plain-openai", "messages": HI},
                        headers={"Authorization": "Bearer sk-lane-plain-only"},
                    ).status_code
                    == 200
                ),
                "the keys were never seeded",
                interval=0.1,
            )
        yield proxies
    finally:
        for proxy in proxies:
            proxy.stop()
            proxy._cleanup_tmp()


@pytest.mark.parametrize(
    "key",
    [
        "sk-lane-any-model",
        "sk-lane-plain-only",
        "sk-lane-rust-only",
        "sk-lane-over-budget",
        "sk-lane-with-budget",
        "sk-lane-expired",
        "sk-lane-rate-limited",
        "sk-lane-token-limited",
        "sk-lane-parallel-limited",
        "sk-lane-blocked",
        "sk-lane-unknown",
    ],
)
def test_virtual_keys_get_the_normal_paths_answer(key_proxies: list, key: str) -> None:
    lane, normal = key_proxies
    headers = {"Authorization": f"Bearer {key}"}
    for model in ("rust-openai", "plain-openai"):
        # Twice: the first request of a key teaches the lane its verdict.
        for attempt in range(3):
            logged = [len(events_for(p.log_file, model, 0)) for p in (lane, normal)]
            answers = [
                p.post("/chat/completions", json={"model": model, "messages": HI}, headers=headers)
                for p in (lane, normal)
            ]
            for proxy, before, answer in zip((lane, normal), logged, answers, strict=True):
                if answer.status_code == 200:
                    # The next request's rate-limit headers count this one's tokens once its
                    # post-call work (the limiter's reconciliation, the lane's replay) ran.
                    wait_for_events(
                        proxy.log_file,
                        lambda e, m=model: e.get("model_group") == m,
                        before + 1,
                        grace=0,
                    )
            assert answers[0].status_code == answers[1].status_code, (model, attempt)
            if answers[0].status_code == 200:
                assert {**answers[0].json(), "id": None} == {**answers[1].json(), "id": None}
                assert stable_headers(answers[0], VOLATILE_HEADERS) == {
                    k: v for k, v in stable_headers(answers[1], VOLATILE_HEADERS).items()
                }
            else:
                # An expired key's message carries the time of the check.
                lane_text, normal_text = (
                    re.sub(r"current time [^']*", "", a.text) for a in answers
                )
                assert lane_text == normal_text


def test_the_lane_serves_keys_it_can_judge_and_only_those(key_proxies: list) -> None:
    lane = key_proxies[0]

    def served_after(key: str, model: str = "rust-openai") -> int:
        for _ in range(3):
            response = lane.post(
                "/chat/completions",
                json={"model": model, "messages": HI},
                headers={"Authorization": f"Bearer {key}"},
            )
        events_for(lane.log_file, model, 1)
        return lane_counts(lane.log_file).get("served", 0), response

    before, _ = served_after("sk-lane-any-model")
    after, response = served_after("sk-lane-any-model")
    assert after >= before + 3 and response.status_code == 200
    # A budget, an rpm, tpm or parallel-request limit far from spent takes the lane (see
    # test_budgets_proxy.py for each close to it).
    limited = ("sk-lane-with-budget", "sk-lane-rate-limited", "sk-lane-token-limited")
    for key in (*limited, "sk-lane-parallel-limited"):
        before, _ = served_after(key)
        after, response = served_after(key)
        assert after >= before + 3 and response.status_code == 200, key


# Standard logging payload fields that differ per call (ids, clocks, durations).
VOLATILE_PAYLOAD = {
    "id",
    "trace_id",
    "litellm_call_id",
    "startTime",
    "endTime",
    "completionStartTime",
    "response_time",
    "api_base_response_time",
    "queue_time_seconds",
    "start_time",
    "end_time",
    "created_at",
    "arrival_time",
    "x-litellm-call-id",
    "x-litellm-response-duration-ms",
    "x-litellm-overhead-duration-ms",
    "litellm_overhead_time_ms",
    "timings",
    "llm_provider-date",
    "date",
    "host",  # each proxy's own port
}


def without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if k not in VOLATILE_PAYLOAD}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    return value


def test_lane_served_requests_log_what_the_normal_path_logs(key_proxies: list) -> None:
    """The same requests to the same `rust: true` deployment, lane on and lane off: the same
    standard logging payloads, field by field (but ids and clocks)."""
    payloads = []
    for proxy in key_proxies:
        before = len(events_for(proxy.log_file, "rust-openai", 0))
        for key in ("sk-lane-any-model", "sk-lane-any-model", "sk-lane-rust-only"):
            response = proxy.post(
                "/v1/chat/completions",
                json={"model": "rust-openai", "messages": HI, "max_tokens": 9},
                headers={"Authorization": f"Bearer {key}", "x-litellm-call-id": "c"},
            )
            assert response.status_code == 200
        events = events_for(proxy.log_file, "rust-openai", before + 3)[before:]
        # Logged in the order the logging finished, which need not be the requests' order.
        logged = [without_volatile(e["payload"]) for e in events]
        payloads.append(sorted(logged, key=lambda p: p["metadata"]["user_api_key_hash"]))
    lane, normal = payloads
    assert len(lane) == len(normal) == 3
    for lane_payload, normal_payload in zip(lane, normal, strict=True):
        differing = {
            k
            for k in lane_payload.keys() | normal_payload.keys()
            if lane_payload.get(k) != normal_payload.get(k)
        }
        detail = {
            f"{k}.{sub}": (lane_payload[k].get(sub), normal_payload[k].get(sub))
            if isinstance(lane_payload.get(k), dict) and isinstance(normal_payload.get(k), dict)
            else None
            for k in differing
            for sub in (
                {
                    s
                    for s in lane_payload[k].keys() | normal_payload[k].keys()
                    if lane_payload[k].get(s) != normal_payload[k].get(s)
                }
                if isinstance(lane_payload.get(k), dict) and isinstance(normal_payload.get(k), dict)
                else {""}
            )
        }
        assert not differing, detail


class _StallingUpstream:
    """A provider that reads a request and never answers (or, given `first`, starts an SSE
    stream with that event and stalls); it notes when each connection's request arrived and
    when the other side closed it."""

    def __init__(self, first: bytes | None = None) -> None:
        self.first = first
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.connections: list[dict[str, float]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with conn:
            record = {"request": time.monotonic()} if conn.recv(65536) else {}
            self.connections.append(record)
            if record and self.first is not None:
                head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                head += b"Transfer-Encoding: chunked\r\n\r\n"
                conn.sendall(head + b"%x\r\n%s\r\n" % (len(self.first), self.first))
            while True:
                try:
                    if not conn.recv(65536):
                        break
                except OSError:
                    break
            record["closed"] = time.monotonic()


@contextlib.contextmanager
def stalled_lane_proxy(
    tmp_path: Path, first: bytes | None = None
) -> Iterator[tuple[_StallingUpstream, ProxyProcess, Path]]:
    """A lane proxy in front of a stalling provider, once the lane knows the master key (from
    a first request the proxy served, and which timed out)."""
    upstream = _StallingUpstream(first)
    log = tmp_path / "events.jsonl"
    log.touch()
    models = twin_models("openai", deployment_kwargs("openai", upstream.url))
    # No warm connections: each connection the provider sees is a call.
    settings = {"fastpath_lane": True, "fastpath_warm_connections": 0}
    with logged_proxy(models, log, **settings) as proxy:
        body = {"model": "rust-openai", "messages": HI}
        with pytest.raises(httpx.TimeoutException):
            proxy.post("/chat/completions", json=body, timeout=1.0)
        # The proxy hands the lane the key's verdict before it calls the provider.
        wait_until(lambda: any("request" in c for c in upstream.connections), "no provider call")
        yield upstream, proxy, log
    upstream.server.close()


def provider_calls_closed(upstream: _StallingUpstream, already: int) -> list[dict[str, float]]:
    """The provider calls made after the first `already` connections, once each has closed."""

    def closed() -> list[dict[str, float]] | None:
        calls = [c for c in upstream.connections[already:] if "request" in c]
        return calls if calls and all("closed" in c for c in calls) else None

    return wait_until(closed, lambda: upstream.connections[already:], timeout=30)


def test_a_client_that_leaves_cancels_the_provider_call(tmp_path: Path) -> None:
    with stalled_lane_proxy(tmp_path) as (upstream, proxy, _log):
        body = {"model": "rust-openai", "messages": HI}
        already = len(upstream.connections)
        left_at = time.monotonic()
        with pytest.raises(httpx.TimeoutException):  # the lane's path
            proxy.post("/chat/completions", json=body, timeout=1.0)
        left_at += 1.0
        served = provider_calls_closed(upstream, already)
        assert served, "the lane never called the provider"
        # Promptly: left alone, the call would wait out the deployment's timeout (600 s).
        assert all(c["closed"] - left_at < PROMPTLY_S for c in served)


FIRST_EVENT = (
    b'data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}'
    b"\n\n"
)


def test_a_client_that_leaves_mid_stream_closes_the_provider_stream(tmp_path: Path) -> None:
    with stalled_lane_proxy(tmp_path, FIRST_EVENT) as (upstream, proxy, log):
        body = {"model": "rust-openai", "messages": HI}
        already = len(upstream.connections)
        proxied = proxy.log_text().count('"POST /chat/completions')
        headers = {"Authorization": f"Bearer {MASTER_KEY}"}
        with httpx.Client(timeout=5) as client:
            stream_body = {**body, "stream": True}
            url = f"{proxy.url}/chat/completions"
            with client.stream("POST", url, json=stream_body, headers=headers) as response:
                assert response.headers["x-litellm-rust"] == "true"
                first = next(response.iter_lines())
                assert '"content":"Hel"' in first
        left_at = time.monotonic()
        served = provider_calls_closed(upstream, already)
        assert len(served) == 1
        assert served[0]["closed"] - left_at < PROMPTLY_S
        # The lane served it: the proxy's access log never saw it.
        assert proxy.log_text().count('"POST /chat/completions') == proxied
        # Its replay logs what was streamed until the client left.
        [event] = [e for e in events_for(log, "rust-openai", 1) if e["event"] == "success"]
        assert event["payload"]["response"]["choices"][0]["message"]["content"] == "Hel"
        assert event["response_cost"] > 0


@pytest.mark.parametrize(
    "timeouts", [{"timeout": 1}, {"timeout": 30, "stream_timeout": 1}], ids=["timeout", "stream"]
)
def test_a_stream_that_stalls_past_the_timeout_ends_as_on_the_proxy(
    tmp_path: Path, timeouts: dict
) -> None:
    upstream = _StallingUpstream(first=FIRST_EVENT)
    log = tmp_path / "events.jsonl"
    log.touch()
    params = {**deployment_kwargs("openai", upstream.url), **timeouts}
    with logged_proxy(twin_models("openai", params), log, fastpath_lane=True) as proxy:
        # The lane learns the key from the proxy's first request (a stream the proxy serves).
        warm = {"model": "plain-openai", "messages": HI, "stream": True}
        assert proxy.post("/chat/completions", json=warm, timeout=10).status_code == 200
        bodies = {}
        for model in ("rust-openai", "plain-openai"):
            started = time.monotonic()
            body = {"model": model, "messages": HI, "stream": True}
            response = proxy.post("/chat/completions", json=body, timeout=10)
            assert response.status_code == 200
            assert time.monotonic() - started < 5
            bodies[model] = re.sub(rb'"created":\d+', b"", response.content).replace(
                model.encode(), b"M"
            )
        assert bodies["rust-openai"] == bodies["plain-openai"]
        assert b'"error"' in bodies["rust-openai"] and b"Timeout" in bodies["rust-openai"]
        assert lane_counts(log).get("served", 0) >= 1
    upstream.server.close()


@pytest.mark.parametrize(
    ("general", "litellm_settings"),
    [
        (
            {
                "master_key": MASTER_KEY,
                "custom_auth": "tests.lane_keys.custom_auth",
                "custom_auth_settings": {"mode": "auto"},
            },
            {},
        ),
        (None, {"redact_user_api_key_info": True}),
    ],
    ids=["custom_auth", "unknown-setting"],
)
def test_settings_the_lane_does_not_reproduce_keep_it_off(
    upstream: RecordingUpstream, tmp_path: Path, general: Any, litellm_settings: dict
) -> None:
    """Both arms, lane on and lane off: the same answers, and the lane serves nothing."""
    answers: list[list[tuple[int, Any]]] = []
    for lane in (True, False):
        log = tmp_path / f"events-{lane}.jsonl"
        log.touch()
        models = twin_models("openai", deployment_kwargs("openai", upstream.url))
        settings = {**litellm_settings, **({"fastpath_lane": True} if lane else {})}
        proxy = logged_proxy(models, log, **settings)
        if general is not None:
            proxy.general_settings = general
        with proxy:
            seen = []
            for key in ("sk-custom-ok", MASTER_KEY, "sk-wrong"):
                response = proxy.post(
                    "/chat/completions",
                    json={"model": "rust-openai", "messages": HI},
                    headers={"Authorization": f"Bearer {key}"},
                )
                body = response.json() if response.status_code == 200 else response.text
                if response.status_code == 200:
                    body = {**body, "id": None}
                seen.append((response.status_code, body))
            answers.append(seen)
            if lane:
                assert "fastpath_lane: off" in proxy.log_text()
                assert lane_counts(log).get("served", 0) == 0
    assert answers[0] == answers[1]
    assert any(status == 200 for status, _ in answers[0])


def test_params_the_router_adds_to_every_call_reach_the_provider(
    upstream: RecordingUpstream, tmp_path: Path
) -> None:
    """The router adds its `default_litellm_params` to every call (before a deployment's own):
    the lane stays off under them, and the provider gets the plain twin's body."""
    log = tmp_path / "events.jsonl"
    log.touch()
    models = twin_models("openai", deployment_kwargs("openai", upstream.url))
    defaults = {"default_litellm_params": {"temperature": 0.25, "max_tokens": 7}}
    router_settings = {"num_retries": 0, **defaults}
    with logged_proxy(models, log, router_settings=router_settings, fastpath_lane=True) as proxy:
        warm = proxy.post("/chat/completions", json={"model": "plain-openai", "messages": HI})
        assert warm.status_code == 200
        sent = {}
        for model in ("plain-openai", "rust-openai"):
            answer, calls = call(proxy, upstream, model, messages=HI)
            assert answer.status_code == 200, answer.text
            sent[model] = json.loads([c for c in calls if c.method == "POST"][-1].body)
        assert sent["rust-openai"] == sent["plain-openai"]
        assert sent["plain-openai"]["temperature"] == 0.25
        assert "fastpath_lane: off (router.default_litellm_params" in proxy.log_text()
        assert lane_counts(log).get("served", 0) == 0


def _said(response: httpx.Response) -> str:
    """What the client was told: an answer's content, or a stream's content deltas joined."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return str(response.json()["choices"][0]["message"]["content"])
    said = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[len("data: ") :]).get("choices") or []:
                said.append((choice.get("delta") or {}).get("content") or "")
    return "".join(said)


@pytest.mark.parametrize(
    ("callback", "stream"),
    [("deployment_stamp", False), ("stream_stamp", True)],
    ids=["deployment-success-hook", "streaming-iterator-hook"],
)
def test_a_callback_that_changes_answers_keeps_the_lane_off(
    upstream: RecordingUpstream, tmp_path: Path, callback: str, stream: bool
) -> None:
    """An operator's hook that edits answers after the provider call (LiteLLM's per-deployment
    success hook, the proxy's streaming iterator hook): lane on, the client gets the edited
    answer as with the lane off, and the lane serves nothing, saying why."""
    sse = openai_stream_events("gpt-4o-mini", stream_pieces(3), include_usage=True)
    upstream.set_default(
        "/chat/completions",
        Reply(body=b"".join(sse), headers={"Content-Type": "text/event-stream"})
        if stream
        else None,
    )
    said: list[str] = []
    for lane in (True, False):
        log = tmp_path / f"events-{lane}.jsonl"
        log.touch()
        models = twin_models("openai", deployment_kwargs("openai", upstream.url))
        settings = {"fastpath_lane": True} if lane else {}
        with logged_proxy(
            models, log, callbacks=(f"tests.answer_hooks.{callback}",), **settings
        ) as proxy:
            body = {"model": "rust-openai", "messages": HI, "stream": stream}
            said += [_said(proxy.post("/chat/completions", json=body)) for _ in range(2)]
            if lane:
                name = {"deployment_stamp": "DeploymentStamp", "stream_stamp": "StreamStamp"}
                reason = f"lane_off:callback.{name[callback]}"
                assert wait_for_count(log, reason, 2)[reason] >= 2
                assert lane_counts(log).get("served", 0) == 0
    assert len(set(said)) == 1, said
    assert STAMP in said[0]


@pytest.mark.parametrize(
    ("reason", "body", "headers"),
    [
        ("lane_header", {"messages": HI}, {"x-litellm-tags": "a"}),
        ("lane_header", {"messages": HI}, {"Origin": "http://example.com"}),
        ("lane_body", {"messages": HI, "user": "u-1"}, {}),
        ("lane_body", {"messages": HI, "n": 2}, {}),
        ("lane_auth", {"messages": HI}, {"x-api-key": "sk-other"}),
    ],
    ids=["litellm-header", "origin", "user", "n", "second-key-header"],
)
def test_each_reason_to_leave_a_request_to_the_proxy_is_counted(
    proxy: ProxyProcess, log: Path, reason: str, body: dict, headers: dict
) -> None:
    before = lane_counts(log).get(reason, 0)
    response = proxy.post(
        "/chat/completions", json={"model": "rust-openai", **body}, headers=headers
    )
    plain = proxy.post("/chat/completions", json={"model": "plain-openai", **body}, headers=headers)
    assert response.status_code == plain.status_code
    # Both requests count: these reasons are found before the model is looked at. Counts ride
    # on logged events: wait for one logged after both requests.
    assert wait_for_count(log, reason, before + 2)[reason] == before + 2


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
@pytest.mark.parametrize(
    "header",
    [
        {"anthropic-version": "2023-01-01"},
        {"anthropic-beta": "prompt-caching-2024-07-31"},
        {"typesafe-danger-zone-x": "1"},
    ],
    ids=["version", "beta", "typesafe"],
)
def test_headers_the_proxy_passes_to_the_provider_go_to_the_proxy(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, provider: str, header: dict
) -> None:
    """The proxy hands some client headers to the provider (`provider_specific_header`): such
    requests go to the proxy (`lane_header`), which sends what the plain model sends, once."""
    before = lane_counts(log).get("lane_header", 0)
    sent = {}
    for model in (f"plain-{provider}", f"rust-{provider}"):
        upstream.clear()
        logged = len(events_for(log, model, 0))
        response = proxy.post(
            "/chat/completions", json={"model": model, "messages": HI}, headers=header
        )
        assert response.status_code == 200, response.text
        # The call's event is logged after any replay of it: a second provider call (a replay
        # calling again) would have landed by then.
        events_for(log, model, logged + 1)
        # Calls only: LiteLLM's background work may ask the mock for its models meanwhile.
        [call] = [r for r in upstream.requests if r.method == "POST"]
        sent[model] = (
            call.json(),
            {k: v for k, v in call.headers.items() if k.startswith("anthropic")},
        )
    assert sent[f"plain-{provider}"] == sent[f"rust-{provider}"]
    assert wait_for_count(log, "lane_header", before + 2)["lane_header"] == before + 2


def test_a_request_the_fast_path_would_not_send_as_is_goes_to_the_proxy(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path
) -> None:
    """`json_schema` for Anthropic: LiteLLM's form of it depends on the model (`lane_param`);
    the proxy serves it, as it serves the plain model."""
    schema = {"name": "s", "schema": {"type": "object", "properties": {}}}
    body = {"messages": HI, "response_format": {"type": "json_schema", "json_schema": schema}}
    before = lane_counts(log).get("lane_param", 0)
    rust, rust_sent = call(proxy, upstream, "rust-anthropic", **body)
    plain, plain_sent = call(proxy, upstream, "plain-anthropic", **body)
    assert rust.status_code == plain.status_code
    assert [r.json() for r in rust_sent] == [r.json() for r in plain_sent]
    assert wait_for_count(log, "lane_param", before + 1)["lane_param"] == before + 1


@contextlib.contextmanager
def openai_lane_proxy(
    upstream: RecordingUpstream, log: Path, env: dict[str, str]
) -> Iterator[ProxyProcess]:
    """A lane proxy of its own for the OpenAI twins, under `env`, with the master key's verdict
    handed to the lane (by a first request through the proxy)."""
    log.touch()
    models = twin_models("openai", deployment_kwargs("openai", upstream.url))
    with logged_proxy(models, log, env=env, fastpath_lane=True) as proxy:
        lane_judges(proxy, log, "plain-openai")
        yield proxy


def lane_judges(proxy: ProxyProcess, log: Path, plain_model: str) -> None:
    """Requests to `plain_model` (no lane group) through the proxy until the lane has judged one
    by its model (`lane_model`): its table is in place, and the first request handed it the
    master key's verdict."""

    def judged() -> bool:
        assert proxy.post("/chat/completions", json={"model": plain_model, "messages": HI})
        return bool(lane_counts(log).get("lane_model"))

    wait_until(judged, lambda: lane_counts(log))


def test_streams_under_another_repetition_guard_go_to_the_proxy(
    upstream: RecordingUpstream, tmp_path: Path
) -> None:
    """The lane applies LiteLLM's default repetition guard only: with another one set, its
    streams go to the proxy (`lane_stream`), while plain calls still take the lane."""
    log = tmp_path / "events.jsonl"
    env = {"REPEATED_STREAMING_CHUNK_LIMIT": "50"}
    with openai_lane_proxy(upstream, log, env) as proxy:
        sse = b"".join(openai_stream_events("gpt-4o-mini", stream_pieces(3), include_usage=True))
        upstream.set_default("/chat/completions", Reply(body=sse))
        try:
            body = {"messages": HI, "stream": True}
            rust = proxy.post("/chat/completions", json={"model": "rust-openai", **body})
            plain = proxy.post("/chat/completions", json={"model": "plain-openai", **body})
        finally:
            upstream.set_default("/chat/completions", None)
        assert rust.status_code == plain.status_code == 200
        assert rust.headers["x-litellm-rust"] == "true"

        # `created` is the proxy's clock at the first event (the two may straddle a second).
        def frames(response: httpx.Response, model: bytes) -> bytes:
            return re.sub(rb'"created":\d+', b"", response.content).replace(model, b"M")

        assert frames(rust, b"rust-openai") == frames(plain, b"plain-openai")
        assert proxy.post("/chat/completions", json={"model": "rust-openai", "messages": HI})
        counts = wait_for_count(log, "served", 1)
        assert counts.get("lane_stream") == 1 and counts.get("served") == 1, counts


@pytest.mark.parametrize(
    "provider_headers",
    [{"x-request-id": "req-a"}, {"request-id": "req-b", "x-request-id": "req-a"}, {"cf-ray": "r"}],
    ids=["x-request-id", "both", "none"],
)
def test_the_providers_request_id_is_passed_on_as_the_proxy_does(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, provider_headers: dict
) -> None:
    """LiteLLM names the provider's request id `request-id` (and `llm_provider-request-id`)."""
    served_before = lane_counts(log).get("served", 0)
    answers = []
    for model in ("plain-openai", "rust-openai"):
        upstream.enqueue(Reply(headers=provider_headers))
        answers.append(call(proxy, upstream, model, messages=HI)[0])
    plain, rust = answers
    assert rust.headers["x-litellm-rust"] == "true"
    assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    named = {k: v for k, v in rust.headers.items() if k.endswith("request-id")}
    expected = provider_headers.get("request-id") or provider_headers.get("x-request-id")
    assert (named.get("request-id"), named.get("llm_provider-request-id")) == (expected, expected)
    wait_for_count(log, "served", served_before + 1)


def twin_answers(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str, path: str, answer: dict
) -> tuple[httpx.Response, httpx.Response]:
    """The plain and the `rust: true` model's answers when the upstream at `path` answers
    `answer`."""
    upstream.set_default(path, Reply(json=answer))
    try:
        plain, _ = call(proxy, upstream, f"plain-{provider}", messages=HI)
        rust, _ = call(proxy, upstream, f"rust-{provider}", messages=HI)
    finally:
        upstream.set_default(path, None)
    return plain, rust


CITATION = {
    "type": "url_citation",
    "url_citation": {"url": "https://example.com", "title": "t", "start_index": 0, "end_index": 1},
}


@pytest.mark.parametrize(
    ("annotations", "outcome"), [([], "served"), ([CITATION], "replayed")], ids=["none", "cited"]
)
def test_openai_answers_with_annotations_match_the_proxy(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    log: Path,
    annotations: list,
    outcome: str,
) -> None:
    """OpenAI sends `annotations` on every message: none the lane writes, citations it leaves to
    the proxy (through the ticket); either way the answer is the proxy's."""
    message = {"role": "assistant", "content": "hi", "refusal": None, "annotations": annotations}
    before = lane_counts(log).get(outcome, 0)
    answer = tool_answer(message)
    plain, rust = twin_answers(proxy, upstream, "openai", "/chat/completions", answer)
    assert plain.status_code == rust.status_code == 200
    assert {**plain.json(), "model": None} == {**rust.json(), "model": None}
    assert rust.json()["choices"][0]["message"]["annotations"] == annotations
    wait_for_count(log, outcome, before + 1)


def _openai_as_sent_now(
    cached: int = 0, reasoning: int = 0, tier: str = "default", audio: int = 0
) -> dict:
    """An OpenAI answer as the API sends it today: token details, `service_tier`."""
    message = {"role": "assistant", "content": "Hello!", "refusal": None, "annotations": []}
    answer = tool_answer(message)
    answer["usage"] = {
        "prompt_tokens": 1919,
        "completion_tokens": 7,
        "total_tokens": 1926,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": audio,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    answer["service_tier"] = tier
    return answer


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (_openai_as_sent_now(), "served"),
        (_openai_as_sent_now(reasoning=5), "served"),
        (_openai_as_sent_now(cached=1024), "served"),
        (_openai_as_sent_now(tier="flex"), "replayed"),
        (_openai_as_sent_now(audio=2), "replayed"),
    ],
    ids=["details", "reasoning", "cached", "flex", "audio"],
)
def test_openai_answers_as_sent_today_match_the_proxy(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path, answer: dict, outcome: str
) -> None:
    """Token details and `service_tier` as OpenAI sends them: written by the lane byte for byte
    as the proxy writes them, cost headers included (the cached and reasoning tokens' shares
    too); other tiers and audio tokens (prices of their own) through the ticket."""
    before = lane_counts(log).get(outcome, 0)
    plain, rust = twin_answers(proxy, upstream, "openai", "/chat/completions", answer)
    assert plain.status_code == rust.status_code == 200
    assert same_bytes(plain, rust), (plain.content, rust.content)
    assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    assert float(rust.headers["x-litellm-response-cost"]) > 0
    assert ("x-litellm-response-cost-reasoning" in rust.headers) == (
        answer["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
    )
    assert ("x-litellm-response-cost-cache-read" in rust.headers) == (
        answer["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    )
    wait_for_count(log, outcome, before + 1)


def _anthropic_as_sent_now(cache_read: int = 0, write_5m: int = 0, write_1h: int = 0) -> dict:
    usage = {
        "input_tokens": 12,
        "cache_creation_input_tokens": write_5m + write_1h,
        "cache_read_input_tokens": cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": write_5m,
            "ephemeral_1h_input_tokens": write_1h,
        },
        "output_tokens": 6,
        "service_tier": "standard",
    }
    text = {"type": "text", "text": "Hello!"}
    return {**ANTHROPIC_TOOL_USE, "content": [text], "stop_reason": "end_turn", "usage": usage}


CONVERSE_AS_SENT_NOW = {
    "output": {"message": {"role": "assistant", "content": [{"text": "Hello!"}]}},
    "stopReason": "end_turn",
    "usage": {
        "inputTokens": 12,
        "outputTokens": 6,
        "totalTokens": 18,
        "cacheReadInputTokens": 0,
        "cacheWriteInputTokens": 0,
    },
    "metrics": {"latencyMs": 321},
}


@pytest.mark.parametrize(
    ("provider", "path", "answer", "outcome"),
    [
        ("anthropic", "/v1/messages", _anthropic_as_sent_now(), "served"),
        ("anthropic", "/v1/messages", _anthropic_as_sent_now(cache_read=100), "served"),
        ("anthropic", "/v1/messages", _anthropic_as_sent_now(300, 500, 200), "served"),
        ("bedrock", "/converse", CONVERSE_AS_SENT_NOW, "served"),
    ],
    ids=["anthropic", "anthropic-cache-read", "anthropic-cache-writes", "bedrock"],
)
def test_converted_answers_as_sent_today_match_the_proxy(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    log: Path,
    provider: str,
    path: str,
    answer: dict,
    outcome: str,
) -> None:
    """Anthropic's usage as its API sends it now (the cache split by TTL, the service tier; cache
    reads and writes priced by the lane) and Bedrock's with its cache counts: the proxy's answer
    byte for byte, and its headers."""
    before = lane_counts(log).get(outcome, 0)
    plain, rust = twin_answers(proxy, upstream, provider, path, answer)
    assert plain.status_code == rust.status_code == 200
    assert same_bytes(plain, rust), (plain.content, rust.content)
    assert stable_headers(plain, VOLATILE_HEADERS) == stable_headers(rust, VOLATILE_HEADERS)
    wait_for_count(log, outcome, before + 1)


def test_a_group_in_cooldown_goes_to_the_proxy(tmp_path: Path) -> None:
    """One deployment of a two-deployment group answers 429: LiteLLM's router cools it down, and
    while it cools the lane leaves the group to the proxy (`lane_cooldown`)."""
    log = tmp_path / "events.jsonl"
    log.touch()
    with RecordingUpstream() as failing, RecordingUpstream() as working:
        failing.set_default(
            "/chat/completions", Reply(status=429, json={"error": {"message": "slow down"}})
        )
        models = [
            {
                "model_name": "pair",
                "litellm_params": {**deployment_kwargs("openai", up.url), "rust": True},
            }
            for up in (failing, working)
        ]
        with logged_proxy(models, log, fastpath_lane=True) as proxy:
            body = {"model": "pair", "messages": HI}
            statuses = []

            def calls() -> int:
                # The chat calls alone: the warmer's `OPTIONS /` reach both upstreams too.
                return sum(r.method == "POST" for r in failing.requests)

            while calls() == 0 and len(statuses) < 40:
                statuses.append(proxy.post("/chat/completions", json=body).status_code)
            assert statuses[-1] == 429, "no request reached the failing deployment"
            # The lane learns of cooldowns from the router every 0.25 s. Until it does, a
            # request it leaves to the proxy anyway (`tool_choice` without tools, which the fast
            # path declines: `lane_param`) is judged first: once cooling, it is `lane_cooldown`.
            probe = {**body, "tool_choice": "auto"}

            def refused_for_cooldown() -> bool:
                judged = lane_counts(log).get("lane_param", 0) + cooled(lane_counts(log))
                proxy.post("/chat/completions", json=probe)
                counts = wait_until(
                    lambda: (c := lane_counts(log)).get("lane_param", 0) + cooled(c) > judged and c
                )
                return cooled(counts) > 0

            wait_until(refused_for_cooldown, lambda: lane_counts(log))
            before, cooled_before = calls(), cooled(lane_counts(log))
            answers = [proxy.post("/chat/completions", json=body) for _ in range(5)]
            assert all(a.status_code == 200 for a in answers)
            assert calls() == before  # cooling: the router sends none there
            counts = wait_for_count(log, "lane_cooldown", cooled_before + 4)
            assert cooled(counts) >= cooled_before + 4, counts


def cooled(counts: dict[str, int]) -> int:
    return counts.get("lane_cooldown", 0)


def twins(
    name: str, deployments: list[tuple[RecordingUpstream, dict]], info: dict | None = None
) -> list[dict]:
    """`plain-<name>` and `rust-<name>`: a group of these deployments (an upstream, extra
    params; the last one's `model_info` is `info`), without and with `rust: true`."""
    return [
        {
            "model_name": f"{arm}-{name}",
            "litellm_params": {**deployment_kwargs("openai", up.url), **extra, **rust},
            "model_info": dict(info or {}) if index == len(deployments) - 1 else {},
        }
        for arm, rust in (("plain", {}), ("rust", {"rust": True}))
        for index, (up, extra) in enumerate(deployments)
    ]


def posts(upstream: RecordingUpstream) -> int:
    """The chat calls an upstream got (the warmer's `OPTIONS /` aside)."""
    return sum(r.method == "POST" for r in upstream.requests)


def test_a_group_the_router_narrows_is_picked_as_the_router_picks(tmp_path: Path) -> None:
    """The router picks among a group's deployments only those an admin did not pause
    (`model_info.blocked`; every one paused: LiteLLM's 403), those of the lowest `order` while
    they are healthy (falling back to the next order on a failure), a team's deployment only for
    that team, and with tag filtering those the request's tags (or the default tag) select: the
    lane serves a group from the deployments the router would pick, and leaves the groups whose
    pick depends on the request (several orders, a team, tags) to the proxy; every call goes
    where the plain twin's go, with the same status."""
    log = tmp_path / "events.jsonl"
    log.touch()
    with RecordingUpstream() as first, RecordingUpstream() as other:
        models = [
            *twins("one-order", [(first, {"order": 1}), (other, {})]),
            *twins("two-orders", [(first, {"order": 1}), (other, {"order": 2})]),
            *twins("one-paused", [(first, {}), (other, {})], {"blocked": True}),
            *twins("paused", [(other, {})], {"blocked": True}),
            *twins("team", [(first, {})], {"team_id": "team-x"}),
            *twins(
                "tagged",
                [(first, {"tags": ["default"]}), (other, {"tags": ["batch"]})],
                {"enable_tag_filtering": True},
            ),
        ]
        cases = [
            # (group, status, calls to each upstream, how many of 8 the lane serves)
            ("one-order", 200, (8, 0), 8),
            ("two-orders", 200, (8, 0), 0),
            ("one-paused", 200, (8, 0), 8),
            ("paused", 403, (0, 0), 0),
            ("team", 200, (8, 0), 0),
            ("tagged", 200, (8, 0), 0),
        ]
        with logged_proxy(models, log, fastpath_lane=True) as proxy:
            lane_judges(proxy, log, "plain-one-order")
            for name, status, calls, served in cases:
                for arm in ("plain", "rust"):
                    before = posts(first), posts(other), lane_counts(log).get("served", 0)
                    for _ in range(8):
                        body = {"model": f"{arm}-{name}", "messages": HI}
                        answer = proxy.post("/chat/completions", json=body)
                        assert answer.status_code == status, (arm, name, answer.text)
                    assert (posts(first) - before[0], posts(other) - before[1]) == calls, name
                    if arm == "rust":
                        # One request the lane serves, so that counts logged after it are read.
                        sentinel = {"model": "rust-one-order", "messages": HI}
                        assert proxy.post("/chat/completions", json=sentinel).status_code == 200
                        expected = before[2] + served + 1
                        assert wait_for_count(log, "served", expected)["served"] == expected


def test_a_deployments_slots_are_one_count_for_the_lane_and_the_proxy(tmp_path: Path) -> None:
    """LiteLLM's router refuses a call past a deployment's `max_parallel_requests` (a 429,
    nothing sent). The lane takes its slots from the same count as the router: 4 requests at
    once get one answer and three 429s, as on the plain twin, whichever path holds the slot (the
    lane's call, or the proxy's for a request the lane does not take), and replays take none.
    In a group of several, no deployment ever has more calls in flight than its slots, on either
    arm (the lane's refusals differ there: deliberate difference 15 with the lane on)."""
    log = tmp_path / "events.jsonl"
    log.touch()
    with RecordingUpstream() as slow, RecordingUpstream() as also_slow:
        for upstream in (slow, also_slow):
            upstream.set_default("/chat/completions", Reply(delay_s=1.0))
        one_slot = {"max_parallel_requests": 1}
        models = [
            *twins("capped", [(slow, one_slot)]),
            *twins("capped-pair", [(slow, one_slot), (also_slow, one_slot)]),
        ]
        # The fast path declines `tool_choice` without tools: LiteLLM's own path, via the router.
        proxy_only = {"tool_choice": "auto"}
        with logged_proxy(models, log, fastpath_lane=True) as proxy:

            def chat(model: str, **extra: Any) -> int:
                body = {"model": model, "messages": HI, **extra}
                return proxy.post("/chat/completions", json=body).status_code

            lane_judges(proxy, log, "plain-capped-pair")
            for arm, rounds in (("plain", 1), ("rust", 2)):
                for _ in range(rounds):
                    with concurrent.futures.ThreadPoolExecutor(4) as pool:
                        statuses = sorted(pool.map(chat, [f"{arm}-capped"] * 4))
                    assert statuses == [200, 429, 429, 429], (arm, statuses)
            counts = wait_for_count(log, "lane_deployment_slots", 6)
            assert counts["lane_deployment_slots"] == 6, counts
            # The slot held by one path refuses the other's request.
            for arm in ("plain", "rust"):
                for holder, other in ((proxy_only, {}), ({}, proxy_only)):
                    with concurrent.futures.ThreadPoolExecutor(1) as pool:
                        before = posts(slow)
                        held = pool.submit(chat, f"{arm}-capped", **holder)
                        wait_until(lambda before=before: posts(slow) > before)
                        assert chat(f"{arm}-capped", **other) == 429, (arm, holder)
                        assert held.result() == 200
            assert chat("rust-capped") == 200
            # The lane served the first of each round, one holder and the last request alone.
            counts = wait_for_count(log, "served", 4)
            assert counts["served"] == 4, counts
            for arm in ("plain", "rust"):
                before = posts(slow), posts(also_slow)
                with concurrent.futures.ThreadPoolExecutor(8) as pool:
                    statuses = list(pool.map(chat, [f"{arm}-capped-pair"] * 8))
                calls = posts(slow) - before[0], posts(also_slow) - before[1]
                assert max(calls) == 1 and statuses.count(200) == sum(calls), (arm, calls)
                assert statuses.count(429) == 8 - sum(calls), (arm, statuses)
            assert wait_for_count(log, "served", 5)["served"] >= 5


def test_past_the_backlog_new_requests_go_to_the_proxy(
    upstream: RecordingUpstream, tmp_path: Path
) -> None:
    """With more served requests waiting for their replay than the backlog allows (here 2, by
    `LITELLM_FASTPATH_LANE_BACKLOG`), the lane hands new requests to the proxy (`lane_backlog`):
    every request is still answered and logged once, with one provider call."""
    log = tmp_path / "events.jsonl"
    with openai_lane_proxy(upstream, log, {"LITELLM_FASTPATH_LANE_BACKLOG": "2"}) as proxy:
        total = 200
        concurrent_rust_calls(proxy, upstream, total, clients=16)
        events = events_for(log, "rust-openai", total, timeout=60)
        assert len(events) == total
        assert all(e["event"] == "success" and e["response_cost"] > 0 for e in events)
        counts = lane_counts(log)
        assert counts.get("lane_backlog", 0) > 0 and counts.get("served", 0) > 0, counts
        assert counts["lane_backlog"] + counts["served"] == total, counts
