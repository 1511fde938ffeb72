"""The fast lane's listener in front of uvicorn on a private Unix socket,
as the proxy runs it: every request it does not take reaches the app as it came, and the app's
answer comes back as it comes (a stream piece by piece)."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from devtools.polling import wait_until
from litellm_fastpath import _native


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/stream":
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(5):
            chunk = f"data: {i}\n\n".encode()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b""})
        return
    out = f"{scope['method']} {scope['path']} {len(body)}".encode()
    headers = [(b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


@pytest.fixture(scope="module")
def lane_url() -> Iterator[str]:
    path = os.path.join(tempfile.mkdtemp(), "app.sock")
    config = uvicorn.Config(_app, uds=path, http="h11", loop="asyncio", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: os.path.exists(path), "uvicorn never listened", interval=0.01)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    _native.start_lane(listener.fileno(), path, shared_socket=False, keep_alive_timeout=5.0)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=5)
    listener.close()


def test_requests_reach_the_app_as_they_came(lane_url: str) -> None:
    with httpx.Client(base_url=lane_url) as client:
        for size in (0, 10, 1 << 20):
            resp = client.post("/chat/completions", content=b"x" * size)
            assert resp.status_code == 200
            assert resp.text == f"POST /chat/completions {size}"


def test_streams_come_back_piece_by_piece(lane_url: str) -> None:
    arrivals = []
    with httpx.Client(base_url=lane_url) as client:
        started = time.perf_counter()
        with client.stream("GET", "/stream") as resp:
            for line in resp.iter_lines():
                if line:
                    arrivals.append(time.perf_counter() - started)
    assert len(arrivals) == 5
    assert arrivals[-1] - arrivals[0] > 0.15
