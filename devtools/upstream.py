"""A real, recording HTTP/1.1 upstream that stands in for OpenAI, Anthropic and Bedrock, in a
thread of the test's own process; it serves `devtools.answers`' canned bodies by default.

The proxy under test talks to this server over loopback exactly as it would to a
provider, so tests can assert on the bytes the proxy put on the wire and can inject
failures (slow replies, dropped connections, truncated bodies) that mocks cannot.
"""

from __future__ import annotations

import collections
import json as jsonlib
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs

from devtools.answers import canned_response

Action = Literal["disconnect", "disconnect_mid_body", "stall", "trickle"]

_STOP_JOIN_BUDGET_S = 1.0


@dataclass(frozen=True)
class Recorded:
    """One request exactly as it arrived (body already de-chunked)."""

    method: str
    path: str  # without the query string, still percent-encoded as sent
    query: str  # raw query string, "" when absent
    headers: dict[str, str]  # lowercase keys; repeated headers joined with ", "
    raw_headers: list[tuple[str, str]]  # original case and order, for wire-level asserts
    body: bytes
    chunked: bool  # True when the client used Transfer-Encoding: chunked
    http_version: str
    # time.monotonic() once the body was fully read (when the record is made)
    received_at: float = field(default_factory=time.monotonic)

    def json(self) -> Any:
        return jsonlib.loads(self.body)

    @property
    def params(self) -> dict[str, list[str]]:
        return parse_qs(self.query, keep_blank_values=True)


@dataclass
class Reply:
    """A scripted response; fields left at their defaults yield the path's default body."""

    status: int = 200
    json: dict[str, Any] | None = None
    body: bytes | None = None  # wins over `json` so tests can send invalid JSON or SSE
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    action: Action | None = None
    # "trickle": the body goes out in this many pieces, `delay_s` apart (after the headers).
    pieces: int = 5


class _Server(ThreadingHTTPServer):
    # Handler threads must never keep pytest alive; stop() closes their sockets instead.
    daemon_threads = True
    # Two proxies open their pools at once under 8 clients each: past socketserver's default
    # backlog of 5 the kernel falls back to SYN cookies (seen in dmesg during test runs) and a
    # connection can stall or reset, which one arm would answer as an upstream error.
    request_queue_size = 128
    owner: RecordingUpstream

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Peers vanishing (and stop() cutting sockets) is routine here, not worth a traceback.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real providers; the proxy pools connections
    disable_nagle_algorithm = True  # headers and body go in two writes; don't delay the second
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # request logs would drown pytest output; the recordings carry the same data

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        owner = self.server.owner
        path, _, query = self.path.partition("?")
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        body = self._read_chunked() if chunked else self._read_sized()
        raw_headers = list(self.headers.items())
        headers: dict[str, str] = {}
        for name, value in raw_headers:
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        recorded = Recorded(
            self.command, path, query, headers, raw_headers, body, chunked, self.request_version
        )
        reply = owner._record_and_pick(recorded)
        self._respond(recorded, reply)

    def _read_sized(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_line = self.rfile.readline(65537)
            if not size_line:
                raise ConnectionError("client closed mid chunked body")
            size = int(size_line.split(b";", 1)[0].strip(), 16)  # drop chunk extensions
            if size == 0:
                break
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # CRLF after each chunk
        # Trailers end with an empty line; consuming them keeps keep-alive framing intact.
        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
            pass
        return b"".join(parts)

    def _respond(self, recorded: Recorded, reply: Reply | None) -> None:
        stop = self.server.owner._stopping
        reply = reply or Reply()
        if reply.action == "disconnect":
            self._drop()
            return
        if reply.action == "stall":
            # delay_s <= 0 means "until the server stops", so tests can't hang forever either way.
            stop.wait(reply.delay_s if reply.delay_s > 0 else None)
            self._drop()
            return
        if reply.action != "trickle" and reply.delay_s > 0 and stop.wait(reply.delay_s):
            self._drop()
            return

        status, payload = canned_response(recorded.method, recorded.path, recorded.body)
        if reply.status != 200 or reply.json is not None or reply.body is not None:
            status = reply.status
        if reply.json is not None:
            payload = reply.json
        body = reply.body if reply.body is not None else jsonlib.dumps(payload).encode()

        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        lower = {k.lower() for k in reply.headers}
        headers = {k: v for k, v in headers.items() if k.lower() not in lower} | reply.headers
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()  # flushes status line + headers

        if reply.action == "disconnect_mid_body":
            # The advertised length stays the full body's, so the client must notice truncation.
            self.wfile.write(body[: len(body) // 2])
            self._drop()
            return
        if reply.action == "trickle":
            # A slow but steady answer: every gap is `delay_s`, the whole body takes longer.
            size = -(-len(body) // reply.pieces)
            for start in range(0, len(body), size):
                if stop.wait(reply.delay_s):
                    self._drop()
                    return
                self.wfile.write(body[start : start + size])
                self.wfile.flush()
            return
        self.wfile.write(body)

    def _drop(self) -> None:
        """Close without (finishing) a response; the client sees EOF, not an HTTP error."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already gone, e.g. stop() shut it first


class RecordingUpstream:
    """Threaded loopback HTTP/1.1 server that records requests and serves scripted replies.

    Reply precedence per request: enqueued replies (FIFO) > set_default(suffix, streamed=True)
    for a request whose JSON body has `"stream": true` > set_default(suffix) > built-in default
    for the path.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
        self._lock = threading.Condition()
        self._requests: list[Recorded] = []
        self._queue: collections.deque[Reply] = collections.deque()
        self._defaults: dict[str, Reply] = {}
        self._stream_defaults: dict[str, Reply] = {}
        self._conns: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> RecordingUpstream:
        if self._server is not None:
            return self
        server = _Server((self._host, 0), _Handler)
        server.owner = self
        self._server = server
        self._stopping.clear()
        # A short poll interval makes shutdown() return quickly.
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="upstream",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes stalled/delayed handlers
        server.shutdown()
        server.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            # Idle keep-alive handlers block in readline(); shutting the socket unblocks them.
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + _STOP_JOIN_BUDGET_S
        with self._lock:
            while self._conns and self._lock.wait(max(0.0, deadline - time.monotonic())):
                pass
        if self._thread is not None:
            self._thread.join(timeout=_STOP_JOIN_BUDGET_S)

    def __enter__(self) -> RecordingUpstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("upstream is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    # -- scripting -------------------------------------------------------------------------

    def enqueue(self, *replies: Reply) -> None:
        """The next len(replies) requests, whatever their path, get these replies in order."""
        with self._lock:
            self._queue.extend(replies)

    def set_default(self, suffix: str, reply: Reply | None, *, streamed: bool = False) -> None:
        """Persistently answer paths ending in `suffix` with `reply` (None removes it);
        `streamed`: only requests asking for a stream (`"stream": true` in a JSON body)."""
        defaults = self._stream_defaults if streamed else self._defaults
        with self._lock:
            if reply is None:
                defaults.pop(suffix, None)
            else:
                defaults[suffix] = reply

    # -- recordings ------------------------------------------------------------------------

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._requests)

    @property
    def open_connections(self) -> int:
        """Connections a handler still serves (a client that closed one is noticed at the
        handler's next write)."""
        with self._lock:
            return len(self._conns)

    def clear(self) -> None:
        """Forget recorded requests (scripted replies stay)."""
        with self._lock:
            self._requests.clear()

    def discard_queued(self) -> None:
        """Forget scripted replies not served yet (a request the proxy answered itself)."""
        with self._lock:
            self._queue.clear()

    def reset(self) -> None:
        """Forget recorded requests, queued replies and per-suffix defaults."""
        with self._lock:
            self._requests.clear()
            self._queue.clear()
            self._defaults.clear()
            self._stream_defaults.clear()

    def wait_for(self, n: int, timeout: float = 5.0) -> list[Recorded]:
        """Block until at least `n` requests were recorded; raise TimeoutError otherwise."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"expected {n} upstream requests, got {len(self._requests)}")
            return list(self._requests)

    # -- handler callbacks -----------------------------------------------------------------

    def _record_and_pick(self, recorded: Recorded) -> Reply | None:
        with self._lock:
            # A proxy lists its providers' models (`GET .../models`) at startup, in the
            # background, at a time of its own: a test counting calls must not see it.
            if not (recorded.method == "GET" and recorded.path.endswith("/models")):
                self._requests.append(recorded)
                self._lock.notify_all()
            if self._queue:
                return self._queue.popleft()
            # Longest matching suffix wins so "/v1/chat/completions" can refine "/completions".
            for defaults in (self._stream_defaults, self._defaults):
                matches = [s for s in defaults if recorded.path.endswith(s)]
                if matches and (defaults is self._defaults or _asks_stream(recorded)):
                    return defaults[max(matches, key=len)]
            return None

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)
                self._lock.notify_all()


def _asks_stream(recorded: Recorded) -> bool:
    try:
        body = recorded.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("stream") is True
