"""The Rust realtime relay (#25): with the fast lane on, a GA session for a `rust: true` realtime
group, from a key the lane serves, is relayed in Rust from the group's warm pool, and replayed
through LiteLLM afterwards for its logging. Every case runs the same session script against the
plain model (LiteLLM's relay, the specification) and its `rust: true` twin on one proxy, and
compares what the client received, what the provider received, how both sides closed, and the
session's success event; and checks that the rust session was the lane's."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from devtools import realtime
from devtools.polling import wait_until
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.proxy_logger import logged_proxy, read_events
from devtools.realtime import RealtimeUpstream
from tests.test_realtime_pool import (
    AUTH,
    BETA,
    _handshake,
    _logged,
    _pool_counts,
    _served,
    _url,
    _wait_warm,
)

POOL = 2
PLAIN, RUST = "plain-realtime", "rust-realtime"
# What the relay's handshake with the provider leaves out (deliberate difference: Rust's
# WebSocket client names no user agent and offers no compression).
NOT_SENT_BY_THE_RELAY = {"user-agent", "sec-websocket-extensions"}
AUDIO = base64.b64encode(os.urandom(4500)).decode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[RealtimeUpstream]:
    with RealtimeUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("realtime-relay") / "events.jsonl"


@pytest.fixture(scope="module")
def proxy(upstream: RealtimeUpstream, log: Path) -> Iterator[ProxyProcess]:
    params = {"model": "openai/gpt-realtime", "api_key": "sk-upstream", "api_base": upstream.url}
    models = [
        {"model_name": PLAIN, "litellm_params": params},
        {"model_name": RUST, "litellm_params": {**params, "rust": True}},
    ]
    server = logged_proxy(models, log, fastpath_realtime_pool=POOL, fastpath_lane=True)
    with server:
        yield server


def _counts(log: Path) -> dict[str, int]:
    return _pool_counts(log) if log.exists() else {}


def _relayed(log: Path) -> int:
    return _counts(log).get("relayed", 0)


def _events(log: Path, model: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [e for e in read_events(log) if e.get("model_group") == model]


async def _script_audio(ws: Any) -> list[Any]:
    """A voice turn: a beta-shaped `session.update` (LiteLLM lifts it to the GA shape for the
    provider), audio chunks of ~6 KiB, a commit, the provider's transcript (LiteLLM answers it
    with `response.create`), a user message and a response."""
    received: list[Any] = []
    update = {"modalities": ["audio", "text"], "voice": "alloy", "input_audio_format": "pcm16"}
    await ws.send(json.dumps({"type": "session.update", "session": update}))
    received += await realtime.receive_until(ws, "mock.echo")
    for _ in range(6):
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": AUDIO}))
        received += await realtime.receive_until(ws, "mock.echo")
    await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
    received += await realtime.receive_until(ws, "mock.echo")
    # The provider transcribes the speech: LiteLLM's relay asks it for a response itself.
    await ws.send(json.dumps({"type": "mock.transcribe", "transcript": "hello there"}))
    received += await realtime.receive_until(ws, "response.done")
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    received += await realtime.receive_until(ws, "mock.echo")
    await ws.send(json.dumps({"type": "response.create"}))
    received += await realtime.receive_until(ws, "response.done")
    # The session's last frame is an audio chunk: LiteLLM logs the last client frame as `input`.
    await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": AUDIO[:64]}))
    received += await realtime.receive_until(ws, "mock.echo")
    return received


async def _run_audio(url: str) -> realtime.ClientRun:
    async with connect(url, additional_headers=AUTH, open_timeout=20) as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), 10))
        received = [realtime.normalized(json.dumps(first)), *await _script_audio(ws)]
        await ws.close()
        session_id = str((first.get("session") or {}).get("id", ""))
    return realtime.ClientRun(received, (ws.close_code, ws.close_reason), session_id)


def _session(proxy: ProxyProcess, model: str, script: str) -> realtime.ClientRun:
    url = _url(proxy, model)
    if script == "audio":
        return asyncio.run(_run_audio(url))
    return asyncio.run(realtime.run_script(url, script, AUTH))


def _next_event(log: Path, model: str, logged_before: int) -> dict[str, Any]:
    """The session's event, once `model` has more than `logged_before`."""
    events = wait_until(
        lambda: e if len(e := _events(log, model)) > logged_before else None,
        f"no event for {model}",
    )
    assert len(events) == logged_before + 1, "one event per session"
    return events[-1]


def _transcript(
    proxy: ProxyProcess, upstream: RealtimeUpstream, log: Path, model: str, script: str
) -> dict[str, Any]:
    if model == RUST:
        _wait_warm(upstream)
    logged_before = len(_events(log, model))
    relayed_before = _relayed(log)
    run = _session(proxy, model, script)
    served = _served(upstream, run)
    events = wait_until(
        lambda: e if len(e := _events(log, model)) > logged_before else None,
        f"no event for {model}",
    )
    assert len(events) == logged_before + 1, "one event per session"
    if model == RUST:
        wait_until(lambda: _relayed(log) > relayed_before, "the session was not relayed in Rust")
    return {
        "client": run.received,
        "client_close": run.close,
        "provider": [realtime.normalized(m) for m in served.received],
        "provider_close": served.close_code,
        "handshake": {
            k: v for k, v in _handshake(served).items() if k not in NOT_SENT_BY_THE_RELAY
        },
        "event": events[-1]["event"],
        "logged": _logged(events[-1]["payload"]),
    }


@pytest.mark.parametrize(
    "script", ["conversation", "audio", "upstream_close_code", "client_close_code", "binary"]
)
def test_a_relayed_session_is_litellms_session(
    proxy: ProxyProcess, upstream: RealtimeUpstream, log: Path, script: str
) -> None:
    plain = _transcript(proxy, upstream, log, PLAIN, script)
    rust = _transcript(proxy, upstream, log, RUST, script)
    assert rust == plain


ODD_FRAMES = [
    "not json",
    "[1, 2]",
    '{"type": 5}',
    '{"no": "type"}',
    '{"type": "session.update", "session": null}',
    '{"type": "session.update", "session": {"modalities": "audio", "voice": "x"}}',
    '{"type": "session.update", "session": {"modalities": [1]}}',
    '{"type": "session.update", "session": {"audio": 0, "voice": "x"}}',
    '{"type": "conversation.item.create", "item": "x"}',
    '{"type": "conversation.item.create", "item": {"role": "user", "content": "hi"}}',
    '{"type": "conversation.item.create", "item": {"role": "user", "content": [1, {"a": 2}]}}',
    '{"type":"input_audio_buffer.append"}',
    '  {"type" : "response.create"}',
]
# Frames LiteLLM's relay fails on (a TypeError its client loop does not catch): it ends the
# session as if the client had left, and uvicorn drops the connection.
FATAL_FRAMES = [
    '{"type": "conversation.item.create", "item": {"role": "user", "content": null}}',
    '{"type": "conversation.item.create", "item": {"role": "user", "content": 7}}',
    '{"type": "session.update", "session": {"modalities": 5}}',
    '{"type": "session.update", "session": {"voice": "x", "audio": [1]}}',
]


def _as_sent(frame: str | bytes) -> Any:
    """A frame the provider received, as JSON when it is JSON."""
    try:
        return realtime.normalized(frame)
    except (ValueError, AttributeError):  # not JSON, or not an object
        return {"raw": frame}


async def _run_frames(url: str, frames: list[str]) -> realtime.ClientRun:
    """Sends each frame, then takes what comes back until its echo (or the response it asked
    for), or the end of the session."""
    received: list[Any] = []
    async with connect(url, additional_headers=AUTH, open_timeout=20) as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), 10))
        received.append(realtime.normalized(json.dumps(first)))
        try:
            for frame in frames:
                await ws.send(frame)
                while True:
                    event = realtime.normalized(await asyncio.wait_for(ws.recv(), 10))
                    received.append(event)
                    if event.get("type") in ("mock.echo", "response.done"):
                        break
            await ws.close()
        except ConnectionClosed:
            pass
        session_id = str((first.get("session") or {}).get("id", ""))
    return realtime.ClientRun(received, (ws.close_code, ws.close_reason), session_id)


@pytest.mark.parametrize(
    "frames",
    [ODD_FRAMES, *([frame, '{"type": "response.create"}'] for frame in FATAL_FRAMES)],
    ids=["odd", "null-content", "number-content", "number-modalities", "list-audio"],
)
def test_odd_and_malformed_frames_go_as_on_litellms_relay(
    proxy: ProxyProcess, upstream: RealtimeUpstream, log: Path, frames: list[str]
) -> None:
    transcripts = {}
    for model in (PLAIN, RUST):
        if model == RUST:
            _wait_warm(upstream)
        logged_before = len(_events(log, model))
        run = asyncio.run(_run_frames(_url(proxy, model), frames))
        served = _served(upstream, run)
        transcripts[model] = (
            run.received,
            run.close,
            [_as_sent(m) for m in served.received],
            served.close_code,
            _logged(_next_event(log, model, logged_before)["payload"]),
        )
    assert transcripts[RUST] == transcripts[PLAIN]


def test_the_relays_handshake_differs_only_as_documented(
    proxy: ProxyProcess, upstream: RealtimeUpstream, log: Path
) -> None:
    runs = {}
    for model in (PLAIN, RUST):
        if model == RUST:
            _wait_warm(upstream)
        run = _session(proxy, model, "conversation")
        runs[model] = _handshake(_served(upstream, run))
    assert set(runs[PLAIN]) - set(runs[RUST]) <= NOT_SENT_BY_THE_RELAY
    assert {k: v for k, v in runs[PLAIN].items() if k not in NOT_SENT_BY_THE_RELAY} == runs[RUST]


def test_the_relay_answers_the_upgrade_itself(
    proxy: ProxyProcess, upstream: RealtimeUpstream
) -> None:
    """The lane's 101 names it (`x-litellm-rust: true`); LiteLLM's does not."""

    async def upgrade_headers(model: str) -> dict[str, str]:
        async with connect(_url(proxy, model), additional_headers=AUTH) as ws:
            await asyncio.wait_for(ws.recv(), 10)
            assert ws.response is not None
            return {k.lower(): v for k, v in ws.response.headers.raw_items()}

    _wait_warm(upstream)
    assert asyncio.run(upgrade_headers(RUST)).get("x-litellm-rust") == "true"
    assert "x-litellm-rust" not in asyncio.run(upgrade_headers(PLAIN))


@pytest.mark.parametrize(
    ("headers", "query", "options"),
    [(BETA, "", {}), (AUTH, "", {"subprotocols": ["realtime"]}), (AUTH, "&intent=x", {})],
    ids=["beta", "subprotocol", "other-query"],
)
def test_sessions_the_relay_leaves_to_litellm(
    proxy: ProxyProcess,
    upstream: RealtimeUpstream,
    log: Path,
    headers: dict[str, str],
    query: str,
    options: dict[str, Any],
) -> None:
    """The beta protocol (LiteLLM translates its events), a subprotocol and other query
    parameters go to the proxy: served by LiteLLM's relay exactly as for the plain model."""

    async def first_event(model: str) -> tuple[Any, Any]:
        try:
            url = _url(proxy, model) + query
            async with connect(url, additional_headers=headers, **options) as ws:
                event = realtime.normalized(await asyncio.wait_for(ws.recv(), 10))
                return event, ws.response.headers.get("x-litellm-rust") if ws.response else None
        except InvalidStatus as refused:
            return ("refused", refused.response.status_code), None
        except ConnectionClosed as closed:
            return ("closed", closed.rcvd.code if closed.rcvd else None), None

    _wait_warm(upstream)
    relayed_before = _relayed(log)
    plain, rust = asyncio.run(first_event(PLAIN)), asyncio.run(first_event(RUST))
    assert rust == plain
    assert rust[1] is None
    wait_until(lambda: len(_events(log, RUST)) > 0, "no event")
    assert _relayed(log) == relayed_before


def test_a_key_the_lane_does_not_know_is_refused_as_litellm_refuses_it(
    proxy: ProxyProcess,
) -> None:
    bad = {"Authorization": "Bearer sk-not-a-key"}
    outcomes = [asyncio.run(realtime.attempt(_url(proxy, model), bad)) for model in (PLAIN, RUST)]
    assert outcomes[0] == outcomes[1]


def test_a_burst_larger_than_the_pool_is_served(
    proxy: ProxyProcess, upstream: RealtimeUpstream, log: Path
) -> None:
    """Clients that find the pool empty go to LiteLLM, which dials: every session works."""
    expected = _session(proxy, PLAIN, "conversation").received
    _wait_warm(upstream)
    counts_before = _counts(log)

    async def burst() -> list[realtime.ClientRun]:
        url = _url(proxy, RUST)
        return await asyncio.gather(
            *(realtime.run_script(url, "conversation", AUTH) for _ in range(2 * POOL + 2))
        )

    # A slow provider: the pool cannot refill while the burst lasts.
    upstream.handshake_delay_s = 0.5
    try:
        runs = asyncio.run(burst())
    finally:
        upstream.handshake_delay_s = 0.0
    assert all(run.received == expected for run in runs)
    assert all(run.close == (1000, "") for run in runs)
    counts = wait_until(
        lambda: (
            c if (c := _counts(log)).get("misses", 0) > counts_before.get("misses", 0) else None
        ),
        lambda: f"pool {_counts(log)}",
    )
    assert counts["hits"] > counts_before.get("hits", 0)


def test_warm_sessions_the_provider_closes_are_not_handed_out(
    proxy: ProxyProcess, upstream: RealtimeUpstream, log: Path
) -> None:
    warm = _wait_warm(upstream)
    dead_before = _counts(log).get("dead", 0)
    assert upstream.close_idle(code=1001) >= len(warm)
    run = _session(proxy, RUST, "conversation")
    assert run.session_id not in warm
    assert run.close == (1000, "")
    wait_until(lambda: _counts(log).get("dead", 0) >= dead_before + len(warm), "dead")


def test_a_client_that_vanishes_ends_its_session(
    proxy: ProxyProcess, upstream: RealtimeUpstream, log: Path
) -> None:
    _wait_warm(upstream)
    relayed_before = _relayed(log)
    logged_before = len(_events(log, RUST))
    session_id = asyncio.run(realtime.vanish(_url(proxy, RUST), AUTH))
    wait_until(lambda: upstream.session(session_id).closed, "the provider session stays open")
    wait_until(lambda: len(_events(log, RUST)) > logged_before, "the session was not logged")
    assert _relayed(log) > relayed_before


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
def test_the_openai_sdk_client_through_the_lane(
    proxy: ProxyProcess, upstream: RealtimeUpstream, log: Path, beta: bool
) -> None:
    """The official SDK's `client.realtime.connect()` (GA: relayed in Rust) and
    `client.beta.realtime.connect()` (beta: LiteLLM's relay) get what the plain model gives."""
    openai = pytest.importorskip("openai")

    async def session(model: str) -> list[Any]:
        ws_base = proxy.url.replace("http://", "ws://") + "/v1"
        client = openai.AsyncOpenAI(
            api_key=MASTER_KEY, base_url=f"{proxy.url}/v1", websocket_base_url=ws_base
        )
        api = client.beta.realtime if beta else client.realtime
        async with api.connect(model=model) as connection:
            first = json.loads(await asyncio.wait_for(connection.recv_bytes(), 10))
            events = [realtime.normalized(json.dumps(first))]
            await connection.response.create()
            while events[-1].get("type") != "response.done":
                frame = await asyncio.wait_for(connection.recv_bytes(), 10)
                events.append(realtime.normalized(frame.decode()))
        return events

    plain = asyncio.run(session(PLAIN))
    _wait_warm(upstream)
    relayed_before = _relayed(log)
    assert asyncio.run(session(RUST)) == plain
    assert plain[-1]["type"] == "response.done"
    if beta:
        assert _relayed(log) == relayed_before
    else:
        wait_until(lambda: _relayed(log) > relayed_before, "the GA session was not relayed")


def test_usage_based_routing_leaves_sessions_to_litellm(
    upstream: RealtimeUpstream, tmp_path: Path
) -> None:
    """Under usage-based routing the router picks a session's deployment by usage, the relay
    by shuffle: its sessions go to LiteLLM's relay (no `x-litellm-rust` on the 101), logged
    as LiteLLM logs them."""
    params = {"model": "openai/gpt-realtime", "api_key": "sk-upstream", "api_base": upstream.url}
    models = [{"model_name": RUST, "litellm_params": {**params, "rust": True}}]
    routed_log = tmp_path / "events.jsonl"
    routing = {"num_retries": 0, "routing_strategy": "usage-based-routing-v2"}
    server = logged_proxy(
        models, routed_log, router_settings=routing, fastpath_realtime_pool=POOL, fastpath_lane=True
    )

    async def upgrade_headers() -> dict[str, str]:
        async with connect(_url(server, RUST), additional_headers=AUTH) as ws:
            await asyncio.wait_for(ws.recv(), 10)
            assert ws.response is not None
            return {k.lower(): v for k, v in ws.response.headers.raw_items()}

    with server:
        assert "x-litellm-rust" not in asyncio.run(upgrade_headers())
        wait_until(lambda: _events(routed_log, RUST), "no event for the session")
        assert _relayed(routed_log) == 0
