"""A hashing HTTP sink for the media benchmarks: bodies are hashed chunk by chunk, never kept.

Answers `POST /model/<id>/converse` (any POST outside the control paths) with a tiny valid
Bedrock Converse response and records, per request, the body length, its SHA-256, the
`Content-Length` header, whether chunked transfer encoding was used and whether the request
carried SigV4 headers. Control endpoints:

- `GET /results` -> `{"requests": [...], "max_inflight": n}` (since the last reset)
- `POST /reset`  -> clears the records
- `GET /health`  -> `ok`

    python benches/media_sink.py --port 0     # prints "READY <port>" once listening

Raw `asyncio.Protocol` (uvloop when installed), HTTP/1.1 keep-alive. Imports nothing heavy, so
`SinkProcess` can be used from any bench without loading LiteLLM.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import ChildServer

HOST = "127.0.0.1"
MAX_HEAD = 64 * 1024
CONVERSE_RESPONSE = json.dumps(
    {
        "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
    },
    separators=(",", ":"),
).encode()


class State:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.inflight = 0
        self.max_inflight = 0

    def reset(self) -> None:
        self.records = []
        self.max_inflight = self.inflight


STATE = State()


def _response(status: str, body: bytes, content_type: str, keep_alive: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nx-amzn-requestid: sink\r\n"
        f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode() + body


class Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.head = bytearray()
        self.remaining = -1  # body bytes still expected; -1 while reading the head
        self.hasher: Any = None
        self.received = 0
        self.request: dict[str, Any] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.remaining > 0 and self.request.get("record"):
            STATE.inflight -= 1
            STATE.records.append({**self._record(), "error": "connection lost mid-body"})
        self.remaining = -1

    def data_received(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.remaining < 0:
                view = self._read_head(view)
            else:
                take = min(self.remaining, len(view))
                if self.hasher is not None:
                    self.hasher.update(view[:take])
                self.received += take
                self.remaining -= take
                view = view[take:]
                if self.remaining == 0:
                    self._finish()

    def _read_head(self, view: memoryview) -> memoryview:
        self.head += view
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > MAX_HEAD:
                self._fail("431 Request Header Fields Too Large")
            return memoryview(b"")
        rest = memoryview(bytes(self.head[end + 4 :]))
        lines = bytes(self.head[:end]).decode("latin-1").split("\r\n")
        self.head = bytearray()
        method, path, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        record = method == "POST" and path not in ("/reset", "/results")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.request = {
            "method": method,
            "path": path,
            "headers": headers,
            "record": record,
            "t0": time.monotonic(),
        }
        self.received = 0
        self.hasher = hashlib.sha256() if record else None
        if chunked:
            # The fast path must never use chunked encoding: record it and refuse the request.
            if record:
                STATE.records.append({**self._record(), "error": "chunked transfer encoding"})
            self._fail("411 Length Required")
            return memoryview(b"")
        try:
            self.remaining = int(headers.get("content-length", "0"))
        except ValueError:
            self._fail("400 Bad Request")
            return memoryview(b"")
        if record:
            STATE.inflight += 1
            STATE.max_inflight = max(STATE.max_inflight, STATE.inflight)
        if self.remaining == 0:
            self._finish()
        return rest

    def _record(self) -> dict[str, Any]:
        headers = self.request["headers"]
        auth = headers.get("authorization", "")
        return {
            "path": self.request["path"],
            "content_length": int(headers.get("content-length", "-1") or -1),
            "received": self.received,
            "sha256": self.hasher.hexdigest() if self.hasher is not None else None,
            "chunked": "chunked" in headers.get("transfer-encoding", "").lower(),
            "sigv4": auth.startswith("AWS4-HMAC-SHA256 Credential=")
            and "/bedrock/aws4_request" in auth
            and "x-amz-date" in headers,
            "content_type": headers.get("content-type"),
            "seconds": time.monotonic() - self.request["t0"],
        }

    def _finish(self) -> None:
        assert self.transport is not None
        request = self.request
        self.remaining = -1
        keep_alive = request["headers"].get("connection", "").lower() != "close"
        path = request["path"]
        if request["record"]:
            STATE.inflight -= 1
            STATE.records.append(self._record())
            out = _response("200 OK", CONVERSE_RESPONSE, "application/json", keep_alive)
        elif path == "/results":
            body = json.dumps({"requests": STATE.records, "max_inflight": STATE.max_inflight})
            out = _response("200 OK", body.encode(), "application/json", keep_alive)
        elif path == "/reset":
            STATE.reset()
            out = _response("200 OK", b"{}", "application/json", keep_alive)
        elif path == "/health":
            out = _response("200 OK", b"ok", "text/plain", keep_alive)
        else:
            out = _response("404 Not Found", b"{}", "application/json", keep_alive)
        self.hasher = None
        self.transport.write(out)
        if not keep_alive:
            self.transport.close()

    def _fail(self, status: str) -> None:
        assert self.transport is not None
        self.transport.write(_response(status, b"{}", "application/json", False))
        self.transport.close()
        self.remaining = -1


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Connection, HOST, port, backlog=256)
    actual = server.sockets[0].getsockname()[1]
    print(f"READY {actual}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.run(serve(args.port))
    except ImportError:
        asyncio.run(serve(args.port))


# -- client side ---------------------------------------------------------------------------


class SinkProcess(ChildServer):
    """This module as a subprocess in its own session (killed as a group)."""

    name = "media sink"

    def __init__(self, startup_timeout: float = 15.0) -> None:
        super().__init__(Path(__file__).resolve(), ["--port", "0"], startup_timeout)

    def reset(self) -> None:
        reset(self.url)

    def results(self) -> dict[str, Any]:
        return results(self.url)


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def reset(url: str) -> None:
    request = urllib.request.Request(f"{url}/reset", data=b"", method="POST")
    with _NO_PROXY.open(request, timeout=10) as response:
        response.read()


def results(url: str) -> dict[str, Any]:
    with _NO_PROXY.open(f"{url}/results", timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
        return data


if __name__ == "__main__":
    main()
