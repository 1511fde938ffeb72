"""Warm upstream connections (`fastpath_warm_connections`) through the real proxy.

Mock providers whose new connections wait 300 ms before they are read (a slow connect and TLS
handshake) count the connections that carried a request. One proxy per lane setting, with the
global setting 0 and a warming interval of 1 s: `rust-warm` (2 warm connections on the
deployment), `rust-cold` (the global 0) on a second mock, and `rust-down` (2 warm connections),
whose upstream is down when the proxy starts and comes up later."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.deployments import deployment_kwargs
from devtools.polling import wait_until
from devtools.processes import HOST, ProxyProcess, ServerProcess
from devtools.proxy_logger import logged_proxy, wait_for_count

WARM = 2
SLOW_CONNECT = ("--connect-delay-ms", "300")
HI = [{"role": "user", "content": "hi"}]


def connections(server: ServerProcess) -> dict[str, Any]:
    """The mock's connection counts (LiteLLM's own startup request, `GET /v1/models`, opens one
    of them; so do the tests' calls, `POST /chat/completions`)."""
    return httpx.get(f"{server.url}/mock/connections", timeout=10).json()


def warm_open(server: ServerProcess) -> int:
    """Connections open now that the warmer opened (their first request was `OPTIONS /`)."""
    return connections(server)["open_by"].get("OPTIONS /", 0)


def dialed_by_calls(server: ServerProcess) -> int:
    """Chat calls that waited for a new connection (sent as it opened)."""
    return connections(server)["waited_by"].get("POST /chat/completions", 0)


def warmed(server: ServerProcess) -> None:
    wait_until(lambda: warm_open(server) == WARM, lambda: connections(server))


@dataclass
class Setup:
    proxy: ProxyProcess
    warm: ServerProcess
    cold: ServerProcess
    down_port: int
    down_socket: socket.socket
    lane: bool
    log: Path


@pytest.fixture(scope="module", params=[False, True], ids=["fast-path", "lane"])
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    # The down upstream's port: bound, not listening (connections are refused) until a test
    # starts a mock on it.
    down = socket.socket()
    down.bind((HOST, 0))
    down_port = down.getsockname()[1]
    with ServerProcess(args=SLOW_CONNECT) as warm, ServerProcess(args=SLOW_CONNECT) as cold:

        def model(name: str, url: str, warm_connections: int | None) -> dict[str, Any]:
            entry: dict[str, Any] = {
                "model_name": name,
                "litellm_params": {**deployment_kwargs("openai", url), "rust": True},
            }
            if warm_connections is not None:
                entry["model_info"] = {"fastpath_warm_connections": warm_connections}
            return entry

        models = [
            model("rust-warm", warm.url, WARM),
            model("rust-cold", cold.url, None),
            model("rust-down", f"http://{HOST}:{down_port}", WARM),
        ]
        settings: dict[str, Any] = {"fastpath_warm_connections": 0, "fastpath_warm_interval_s": 1}
        if request.param:
            settings["fastpath_lane"] = True
        log = tmp_path_factory.mktemp("warm") / "events.jsonl"
        log.touch()
        with logged_proxy(models, log, **settings) as proxy:
            yield Setup(proxy, warm, cold, down_port, down, request.param, log)
    down.close()


def chat(proxy: ProxyProcess, model: str) -> httpx.Response:
    response = proxy.post("/chat/completions", json={"model": model, "messages": HI})
    assert response.status_code == 200, response.text
    assert response.headers.get("x-litellm-rust") == "true"
    return response


def test_startup_opens_the_connections_the_first_request_uses(setup: Setup) -> None:
    warmed(setup.warm)
    for _ in range(3):
        chat(setup.proxy, "rust-warm")
    assert dialed_by_calls(setup.warm) == 0
    if setup.lane:  # the proxy's first call teaches the lane the key; it served the others
        wait_for_count(setup.log, "served", 1)


def test_setting_zero_opens_no_connection(setup: Setup) -> None:
    # The warmer configures every deployment at once: once the warm one is warm, it has decided.
    warmed(setup.warm)
    assert "OPTIONS /" not in connections(setup.cold)["opened_by"]
    chat(setup.proxy, "rust-cold")
    assert dialed_by_calls(setup.cold) == 1


def test_the_warmer_dials_again_when_the_upstream_closes_idle_connections(setup: Setup) -> None:
    warmed(setup.warm)
    before = connections(setup.warm)["opened_by"]["OPTIONS /"]
    closed = httpx.post(f"{setup.warm.url}/mock/close-idle", timeout=10).json()["closed"]
    assert closed >= WARM
    wait_until(
        lambda: (
            warm_open(setup.warm) == WARM
            and connections(setup.warm)["opened_by"]["OPTIONS /"] >= before + WARM
        ),
        lambda: connections(setup.warm),
    )
    # Warm again: the next request dials nothing.
    chat(setup.proxy, "rust-warm")
    assert dialed_by_calls(setup.warm) == 0


def test_a_down_upstream_neither_breaks_startup_nor_stays_cold(setup: Setup) -> None:
    # The proxy started and serves while `rust-down`'s upstream refuses connections.
    chat(setup.proxy, "rust-warm")
    # The upstream starts listening: the warmer's next try (backoff at most the 1 s interval)
    # arrives, and shows what a warming request carries: nothing of the deployment.
    setup.down_socket.listen()
    setup.down_socket.settimeout(30)
    connection, _ = setup.down_socket.accept()
    with connection:
        connection.settimeout(30)
        head = b""
        while b"\r\n\r\n" not in head:
            piece = connection.recv(4096)
            assert piece, head
            head += piece
        # Reset, not closed: no socket of ours lingers on the port the mock binds next.
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    lines = head.decode("latin-1").lower().split("\r\n")
    assert lines[0] == "options / http/1.1"
    names = {line.partition(":")[0] for line in lines[1:] if line}
    assert names <= {"host", "accept", "content-length"}, names
    assert b"sk-upstream" not in head
    setup.down_socket.close()
    with ServerProcess(args=(*SLOW_CONNECT, "--port", str(setup.down_port))) as came_up:
        warmed(came_up)
        chat(setup.proxy, "rust-down")
        assert dialed_by_calls(came_up) == 0
