"""A local mock of the OpenAI, Anthropic and Bedrock chat endpoints, for the demo,
the benchmarks and the tests.

`python -m devtools.mock_provider --port 0` listens on loopback and prints
`READY <port>`. It speaks HTTP/1.1 with keep-alive on a bare `asyncio.Protocol` (uvloop when
installed), so it answers tens of thousands of requests per second:

- `POST .../chat/completions`      OpenAI chat completion (echoes the request's `model`); with
                                   `"stream": true` an SSE stream of `max_tokens` chunks (default
                                   8), `--chunk-delay-ms` apart, usage when asked for
- `POST .../v1/messages`           Anthropic message (echoes the request's `model`); with
                                   `"stream": true` the same as an Anthropic SSE stream
- `POST .../model/<id>/converse`   Bedrock Converse
- `POST .../model/<id>/converse-stream`  Bedrock's event stream of `maxTokens` text deltas
- `POST .../embeddings`            OpenAI embeddings (float or base64, one vector per input)
- `POST .../model/<id>/invoke`     Bedrock embeddings (ids with `embed`): Titan text, Cohere;
                                   Claude ids: the Anthropic message (Invoke's body)
- `POST .../model/<id>/invoke-with-response-stream`  Claude's Anthropic events in Bedrock's
                                   event stream (`max_tokens` text deltas)
- `GET /health`                    `{"ok": true}`; anything else is a 404 JSON error.
With `--connect-delay-ms D` every new connection waits D ms before its first byte is read (a
slow connect and TLS handshake), connections are counted, and two more routes answer:
- `GET /mock/connections`: `opened` and `open` (connections that carried a request other than
  these two), `opened_by` and `open_by` (the same by their first request, e.g. `"OPTIONS /"`),
  `waited_by` (first requests sent as their connection opened, which paid for it)
- `POST /mock/close-idle`: closes the idle connections, as a server's keep-alive timeout does
  (`{"closed": n}`); with `--idle-close-s S` each closes S s after its last answer anyway.
The answers are `devtools.answers`' (the tests' recording upstream serves the same ones);
`devtools.deployments` gives LiteLLM params pointing at a server like this, and
`devtools.processes.ServerProcess` runs it in a process of its own.
Request bodies need a Content-Length, as every provider SDK sends: chunked ones get a 411.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from typing import Any, ClassVar

from devtools import answers
from devtools.answers import (
    CONVERSE_STREAM,
    INVOKE_STREAM,
    STREAM_CHUNKS,
    anthropic_stream_events,
    bedrock_invoke_stream_events,
    bedrock_stream_events,
    canned_response,
    json_request,
    openai_stream_events,
    request_model,
    stream_pieces,
)

HOST = "127.0.0.1"
_MAX_HEAD = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 411: "Length Required"}
# Delay between streamed chunks (`--chunk-delay-ms`); 0 sends the whole stream at once.
CHUNK_DELAY_S = 0.0
# Delay before a new connection's first byte is read (`--connect-delay-ms`).
CONNECT_DELAY_S = 0.0
# A connection idle this long after its last answer is closed (`--idle-close-s`; 0: never).
IDLE_CLOSE_S = 0.0
# A first request read within this of the connect delay's end was waiting for it.
_WAITED_SLACK_S = 0.1


def _stream_request(body: bytes | bytearray) -> tuple[str, int, bool] | None:
    """(model, chunks, include_usage) of a streamed OpenAI chat request, else None."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict) or request.get("stream") is not True:
        return None
    count = request.get("max_tokens") or request.get("max_completion_tokens") or STREAM_CHUNKS
    options = request.get("stream_options") or {}
    return (
        str(request.get("model")),
        max(0, min(int(count), 1_000_000)),
        bool(isinstance(options, dict) and options.get("include_usage")),
    )


def http_response(
    status: int, body: bytes, keep_alive: bool, content_type: str = "application/json"
) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\n"
        f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode() + body


class HttpServerProtocol(asyncio.Protocol):
    """HTTP/1.1 request framing for loopback mocks: the head is parsed, the body is streamed to
    `body_received` (no copy kept here), then `request_done` answers with `respond`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.head = bytearray()
        self.remaining = -1  # body bytes still expected; -1 while reading a head
        self.method = self.path = ""
        self.headers: dict[str, str] = {}
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        view = memoryview(data)
        while view and self.transport is not None:
            if self.remaining < 0:
                view = self._read_head(view)
                continue
            take = min(self.remaining, len(view))
            self.body_received(view[:take])
            self.remaining -= take
            view = view[take:]
            if self.remaining == 0:
                self.remaining = -1
                self.request_done()

    def _read_head(self, view: memoryview) -> memoryview:
        self.head += view
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > _MAX_HEAD:
                self.fail(400)
            return memoryview(b"")
        rest = memoryview(bytes(self.head[end + 4 :]))
        lines = self.head[:end].decode("latin-1").split("\r\n")
        self.head = bytearray()
        try:
            self.method, target, version = lines[0].split(" ", 2)
            self.headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
            self.remaining = int(self.headers.get("content-length") or 0)
        except ValueError:
            self.fail(400)
            return memoryview(b"")
        self.path = target.partition("?")[0]
        connection = self.headers.get("connection", "").lower()
        self.keep_alive = connection != "close" and (version == "HTTP/1.1" or "keep" in connection)
        self.request_started()
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.fail(411)
            return memoryview(b"")
        if self.remaining == 0:
            self.remaining = -1
            self.request_done()
        return rest

    def respond(self, response: bytes) -> None:
        assert self.transport is not None
        self.transport.write(response)
        if not self.keep_alive:
            self.transport.close()
            self.transport = None

    def fail(self, status: int) -> None:
        self.keep_alive = False
        self.remaining = -1
        self.respond(http_response(status, b"{}", False))

    def request_started(self) -> None:
        """The head of a request was parsed (`method`, `path`, `headers`, `keep_alive`)."""

    def body_received(self, chunk: memoryview) -> None:
        raise NotImplementedError

    def request_done(self) -> None:
        raise NotImplementedError


class MockProvider(HttpServerProtocol):
    """The provider endpoints listed at the top of this module."""

    _cache: ClassVar[dict[tuple[str, str | bytes, bool], bytes]] = {}

    def request_started(self) -> None:
        self.body = bytearray()

    def body_received(self, chunk: memoryview) -> None:
        self.body += chunk

    def request_done(self) -> None:
        streams = self.path.endswith(("/chat/completions", "/v1/messages"))
        if streams and b'"stream"' in self.body:
            stream = _stream_request(self.body)
            if stream is not None:
                self._stream(*stream)
                return
        if CONVERSE_STREAM.search(self.path):
            request = json_request(self.body)
            count = (request.get("inferenceConfig") or {}).get("maxTokens") or STREAM_CHUNKS
            self._stream("", int(count), False)
            return
        if INVOKE_STREAM.search(self.path):
            count = json_request(self.body).get("max_tokens") or STREAM_CHUNKS
            self._stream("", int(count), False)
            return
        # Rendered once per route, model and keep-alive: the mock must never be the bottleneck.
        # Embedding answers depend on the whole request.
        embedding = self.path.endswith(("/embeddings", "/invoke"))
        shape = bytes(self.body) if embedding else request_model(self.body)
        key = (f"{self.method} {self.path}", shape, self.keep_alive)
        response = self._cache.get(key)
        if response is None:
            if self.path == "/health":
                status, payload = 200, {"ok": True}
            else:
                status, payload = canned_response(self.method, self.path, self.body)
            response = http_response(status, json.dumps(payload).encode(), self.keep_alive)
            if len(self._cache) < 4096:
                self._cache[key] = response
        self.respond(response)

    def _stream(self, model: str, count: int, include_usage: bool) -> None:
        """An SSE answer in HTTP/1.1 chunked encoding, one HTTP chunk per event, paced by
        `CHUNK_DELAY_S`; the connection stays usable afterwards."""
        assert self.transport is not None
        content_type = "text/event-stream"
        if self.path.endswith("/v1/messages"):
            events = anthropic_stream_events(model, stream_pieces(count))
        elif self.path.endswith("/converse-stream"):
            events = bedrock_stream_events(stream_pieces(count))
            content_type = "application/vnd.amazon.eventstream"
        elif self.path.endswith("/invoke-with-response-stream"):
            events = bedrock_invoke_stream_events(stream_pieces(count))
            content_type = "application/vnd.amazon.eventstream"
        else:
            events = openai_stream_events(model, stream_pieces(count), include_usage=include_usage)
        head = (
            f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n"
            "transfer-encoding: chunked\r\n"
            f"connection: {'keep-alive' if self.keep_alive else 'close'}\r\n\r\n"
        )
        frames = [b"%x\r\n%s\r\n" % (len(event), event) for event in events] + [b"0\r\n\r\n"]
        if CHUNK_DELAY_S <= 0:
            self.respond(head.encode() + b"".join(frames))
            return
        transport = self.transport
        transport.write(head.encode() + frames[0])
        loop = asyncio.get_running_loop()
        start = loop.time()
        # Scheduled against the start (not chained), so the pace does not drift.
        for i, frame in enumerate(frames[1:], 1):
            last = i == len(frames) - 1
            loop.call_at(start + i * CHUNK_DELAY_S, self._write_frame, transport, frame, last)

    def _write_frame(self, transport: asyncio.Transport, frame: bytes, last: bool) -> None:
        if transport.is_closing():
            return
        transport.write(frame)
        if last and not self.keep_alive:
            transport.close()


class SlowConnectMock(MockProvider):
    """The mock provider behind a slow connect, counting its connections (`--connect-delay-ms`)."""

    opened_by: ClassVar[dict[str, int]] = {}  # by each connection's first request
    waited_by: ClassVar[dict[str, int]] = {}  # first requests that were waiting for the delay
    live: ClassVar[set[SlowConnectMock]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.counted = self.busy = False
        self.first = ""
        self.idle_timer: asyncio.TimerHandle | None = None
        self.readable_at = asyncio.get_running_loop().time() + CONNECT_DELAY_S
        self.live.add(self)
        # Bytes that arrive before the delay ends wait here (uvloop ignores `pause_reading` in
        # `connection_made`).
        self.held: bytearray | None = None
        if CONNECT_DELAY_S > 0:
            self.held = bytearray()
            asyncio.get_running_loop().call_later(CONNECT_DELAY_S, self._release)

    def data_received(self, data: bytes) -> None:
        if self.held is not None:
            self.held += data
            return
        super().data_received(data)

    def _release(self) -> None:
        held, self.held = self.held, None
        if held and self.transport is not None:
            super().data_received(bytes(held))

    def connection_lost(self, exc: Exception | None) -> None:
        self.live.discard(self)
        self.transport = None
        if self.idle_timer is not None:
            self.idle_timer.cancel()

    def request_started(self) -> None:
        super().request_started()
        self.busy = True
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if not self.counted and not self.path.startswith("/mock/"):
            self.counted = True
            self.first = f"{self.method} {self.path}"
            self.opened_by[self.first] = self.opened_by.get(self.first, 0) + 1
            # Read as soon as the delay ended: it was sent while the connection was opening (a
            # connection dialed ahead and used later gets its first request later than that).
            if asyncio.get_running_loop().time() - self.readable_at < _WAITED_SLACK_S:
                self.waited_by[self.first] = self.waited_by.get(self.first, 0) + 1

    def request_done(self) -> None:
        if self.path == "/mock/connections":
            open_by: dict[str, int] = {}
            for connection in self.live:
                if connection.counted:
                    open_by[connection.first] = open_by.get(connection.first, 0) + 1
            self._answer(
                {
                    "opened": sum(self.opened_by.values()),
                    "open": sum(open_by.values()),
                    "opened_by": self.opened_by,
                    "waited_by": self.waited_by,
                    "open_by": open_by,
                }
            )
        elif self.path == "/mock/close-idle":
            idle = [c for c in self.live if c is not self and not c.busy and c.transport]
            for connection in idle:
                assert connection.transport is not None
                connection.transport.close()
            self._answer({"closed": len(idle)})
        else:
            super().request_done()
        self.busy = False
        if IDLE_CLOSE_S > 0 and self.transport is not None:
            loop = asyncio.get_running_loop()
            self.idle_timer = loop.call_later(IDLE_CLOSE_S, self.transport.close)

    def _answer(self, payload: dict[str, Any]) -> None:
        self.respond(http_response(200, json.dumps(payload).encode(), self.keep_alive))


def serve(protocol: type[asyncio.Protocol], port: int = 0) -> None:
    """Runs `protocol` on HOST:port until SIGTERM/SIGINT; prints `READY <port>` once listening."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(protocol, HOST, port, backlog=4096, reuse_address=True)
        print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


def main() -> None:
    global CHUNK_DELAY_S, CONNECT_DELAY_S, IDLE_CLOSE_S
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--embedding-dims",
        type=int,
        default=answers.EMBEDDING_DIMS,
        help="vector length by default",
    )
    parser.add_argument(
        "--chunk-delay-ms", type=float, default=0.0, help="pause between streamed chunks"
    )
    parser.add_argument(
        "--idle-close-s", type=float, default=0.0, help="with --connect-delay-ms: keep-alive"
    )
    parser.add_argument(
        "--connect-delay-ms",
        type=float,
        default=None,
        help="pause before a new connection is read; counts connections (/mock/connections)",
    )
    args = parser.parse_args()
    answers.EMBEDDING_DIMS = args.embedding_dims
    CHUNK_DELAY_S = args.chunk_delay_ms / 1000
    if args.connect_delay_ms is None:
        serve(MockProvider, args.port)
        return
    CONNECT_DELAY_S = args.connect_delay_ms / 1000
    IDLE_CLOSE_S = args.idle_close_s
    serve(SlowConnectMock, args.port)


if __name__ == "__main__":
    main()
