"""WebSockets through the proxy with the fast lane on and off: the lane forwards an upgrade to the
proxy and then carries the session both ways, so every session ends as it does without the lane.

Each case runs one realtime session script against two proxies of one realtime deployment (lane
on, lane off) and compares what the client received, what the provider received and how each
side closed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from devtools import realtime
from devtools.deployments import twin_models
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.realtime import RealtimeUpstream

MODEL = "plain-realtime"
AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}


@pytest.fixture(scope="module")
def realtime_upstream() -> Iterator[RealtimeUpstream]:
    with RealtimeUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def proxies(realtime_upstream: RealtimeUpstream) -> Iterator[dict[str, ProxyProcess]]:
    """Lane on and lane off, one realtime deployment each (its plain and `rust: true` twins)."""
    params = {
        "model": "openai/gpt-4o-realtime-preview",
        "api_key": "sk-upstream",
        "api_base": realtime_upstream.url,
    }
    started: dict[str, ProxyProcess] = {}
    try:
        for lane in (True, False):
            settings: dict[str, Any] = {"callbacks": ["litellm_fastpath.proxy.accelerator"]}
            if lane:
                settings["fastpath_lane"] = True
            proxy = ProxyProcess(
                twin_models("realtime", params),
                litellm_settings=settings,
                router_settings={"num_retries": 0},
            )
            started["lane" if lane else "no_lane"] = proxy.start()
        yield started
    finally:
        for proxy in started.values():
            proxy.stop()
            proxy._cleanup_tmp()


@dataclass
class Transcript:
    """What a session looked like from both ends."""

    client_received: list[Any]
    client_close: tuple[int | None, str | None]
    upstream_received: list[Any]
    upstream_close: int | None


def _ws_url(proxy: ProxyProcess, model: str = MODEL) -> str:
    return proxy.url.replace("http://", "ws://") + f"/v1/realtime?model={model}"


async def _session(proxy: ProxyProcess, script: str) -> tuple[list[Any], tuple[Any, Any]]:
    run = await realtime.run_script(_ws_url(proxy), script, AUTH)
    return run.received, run.close


def run_script(proxy: ProxyProcess, upstream: RealtimeUpstream, script: str) -> Transcript:
    upstream.reset()
    received, close = asyncio.run(_session(proxy, script))
    sessions = upstream.wait_closed(1)
    assert len(sessions) == 1, sessions
    session = sessions[0]
    return Transcript(
        client_received=received,
        client_close=close,
        upstream_received=[realtime.normalized(m) for m in session.received],
        upstream_close=session.close_code,
    )


@pytest.mark.parametrize("script", realtime.SCRIPTS)
def test_a_session_through_the_lane_is_the_session_without_it(
    proxies: dict[str, ProxyProcess], realtime_upstream: RealtimeUpstream, script: str
) -> None:
    with_lane = run_script(proxies["lane"], realtime_upstream, script)
    without = run_script(proxies["no_lane"], realtime_upstream, script)
    assert with_lane == without
    if script == "conversation":
        # The session really ran: 20 echoes, an answer with its audio, a clean close.
        kinds = [e.get("type") for e in with_lane.client_received]
        assert kinds.count("mock.echo") == 20 and kinds[-1] == "response.done"
        assert with_lane.client_close[0] == 1000


def test_sessions_in_a_row_and_side_by_side(
    proxies: dict[str, ProxyProcess], realtime_upstream: RealtimeUpstream
) -> None:
    """Three sessions at once, then three more: each works, none waits on another."""

    async def three(proxy: ProxyProcess) -> list[tuple[list[Any], tuple[Any, Any]]]:
        return list(await asyncio.gather(*(_session(proxy, "conversation") for _ in range(3))))

    for name in ("lane", "no_lane"):
        for _ in range(2):
            realtime_upstream.reset()
            results = asyncio.run(three(proxies[name]))
            assert [close for _, close in results] == [(1000, "")] * 3, name
            assert len(realtime_upstream.wait_closed(3)) == 3


def test_a_client_that_vanishes_ends_its_upstream_session(
    proxies: dict[str, ProxyProcess], realtime_upstream: RealtimeUpstream
) -> None:
    """A client whose socket drops without a close frame: the provider's session is closed, and
    the proxy serves the next session as before."""
    for name in ("lane", "no_lane"):
        realtime_upstream.reset()

        asyncio.run(realtime.vanish(_ws_url(proxies[name]), AUTH))
        sessions = realtime_upstream.wait_closed(1)
        assert len(sessions) == 1 and sessions[0].closed, name
        realtime_upstream.reset()
        _, close = asyncio.run(_session(proxies[name], "client_close_code"))
        assert close == (4001, "client leaves"), name


def test_a_refused_handshake_reaches_the_client_alike(
    proxies: dict[str, ProxyProcess], realtime_upstream: RealtimeUpstream
) -> None:
    outcomes = []
    for name in ("lane", "no_lane"):
        realtime_upstream.reset()
        realtime_upstream.refuse_status = 429

        outcomes.append(asyncio.run(realtime.attempt(_ws_url(proxies[name]), AUTH)))
    realtime_upstream.reset()
    assert outcomes[0] == outcomes[1]


def test_a_key_the_proxy_refuses_is_refused_alike(proxies: dict[str, ProxyProcess]) -> None:
    outcomes = []
    for name in ("lane", "no_lane"):

        async def attempt(proxy: ProxyProcess = proxies[name]) -> tuple[Any, ...]:
            headers = {"Authorization": "Bearer sk-not-a-key"}
            try:
                async with connect(_ws_url(proxy), additional_headers=headers) as ws:
                    try:
                        await asyncio.wait_for(ws.recv(), 10)
                    except ConnectionClosed:
                        pass
                    return ("closed", ws.close_code)
            except InvalidStatus as refused:
                return ("refused", refused.response.status_code)

        outcomes.append(asyncio.run(attempt()))
    assert outcomes[0] == outcomes[1]
