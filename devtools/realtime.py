"""A realtime (WebSocket) provider on loopback, for the proxy's `/v1/realtime` route.

It speaks enough of OpenAI's realtime protocol for LiteLLM's relay: `session.created` on connect,
`response.create` answered with `response.created`, audio deltas and `response.done` with usage,
and anything else echoed back (text as a `mock.echo` event, with the frame under `raw` when it is
not a JSON object; binary as the same bytes). A client
event `{"type": "mock.close", "code": N}` makes it close the session with code N, and
`{"type": "mock.transcribe", "transcript": T}` makes it report T as the user's speech transcribed
(`conversation.item.input_audio_transcription.completed`). Every session's
handshake headers, received frames and close code are recorded, and every upgrade attempt counted
(`dials`); the handshake can be delayed (a slow provider, or one that stalls) or refused with an
HTTP status, and the sessions that wait idle can be closed from the provider's side
(`close_idle`).

`python -m devtools.realtime --port 0` runs it in a process of its own (uvloop when installed)
until SIGTERM, printing `READY <port>` once it listens (`devtools.processes.ServerProcess`); that
one keeps only each session's first frame (a bench's long sessions would pile up);
`--no-compression` declines permessage-deflate.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.http11 import Request, Response

USAGE = {
    "total_tokens": 60,
    "input_tokens": 20,
    "output_tokens": 40,
    "input_token_details": {"text_tokens": 20, "audio_tokens": 0, "cached_tokens": 0},
    "output_token_details": {"text_tokens": 10, "audio_tokens": 30},
}


@dataclass
class Session:
    """One upstream session as the provider saw it."""

    path: str
    headers: dict[str, str]
    received: list[str | bytes] = field(default_factory=list)
    close_code: int | None = None
    closed: bool = False
    id: str = ""  # `session.created`'s session id, unique per mock: which session a client got
    connection: ServerConnection | None = field(default=None, repr=False, compare=False)


class RealtimeUpstream:
    """The mock in a thread of its own (its own event loop), started and stopped by the test."""

    def __init__(
        self,
        handshake_delay_s: float = 0.0,
        audio_deltas: int = 3,
        *,
        keep_frames: bool = True,
        bind_port: int = 0,
        compression: bool = True,
    ) -> None:
        self.handshake_delay_s = handshake_delay_s
        self.audio_deltas = audio_deltas
        # False: a session records only its first frame (still enough for `idle_sessions`).
        self.keep_frames = keep_frames
        self.bind_port = bind_port
        self.compression = compression  # False: permessage-deflate is declined
        self.refuse_status: int | None = None
        self.dials = 0
        self._created = 0
        self.sessions: list[Session] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RealtimeUpstream:
        self._thread = threading.Thread(target=self._run, name="realtime-upstream", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the realtime mock did not start")
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is not None and server is not None:
            loop.call_soon_threadsafe(server.close)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> RealtimeUpstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reset(self) -> None:
        with self._lock:
            self.sessions.clear()
        self.refuse_status = None

    def snapshot(self) -> list[Session]:
        with self._lock:
            return list(self.sessions)

    def session(self, session_id: str) -> Session:
        return next(s for s in self.snapshot() if s.id == session_id)

    def idle_sessions(self) -> list[Session]:
        """Open sessions no client has spoken on yet (a pool's warm sessions)."""
        return [s for s in self.snapshot() if not s.closed and not s.received]

    def close_idle(self, code: int = 1001) -> int:
        """Closes every idle session from the provider's side; how many there were."""
        idle = self.idle_sessions()
        loop = self._loop
        assert loop is not None
        for session in idle:
            if session.connection is not None:
                asyncio.run_coroutine_threadsafe(
                    session.connection.close(code=code, reason="provider ends it"), loop
                ).result(10)
        return len(idle)

    def wait_closed(self, count: int, timeout: float = 10.0) -> list[Session]:
        """The first `count` sessions once each has closed (the relay closes them after the
        client: allow it a moment)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                sessions = list(self.sessions)
            if len(sessions) >= count and all(s.closed for s in sessions[:count]):
                return sessions
            if time.monotonic() > deadline:
                return sessions
            time.sleep(0.02)

    # -- the server, on its own loop ------------------------------------------------------

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        async with serve(
            self._session,
            "127.0.0.1",
            self.bind_port,
            process_request=self._handshake,
            max_size=None,
            compression="deflate" if self.compression else None,
        ) as server:
            self._server = server
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await server.wait_closed()

    async def _handshake(self, connection: ServerConnection, request: Request) -> Response | None:
        if "websocket" not in request.headers.get("Upgrade", "").lower():
            # Plain HTTP (the proxy asks an OpenAI-compatible base for `/v1/models` at startup).
            return Response(404, "Not Found", Headers([("Content-Length", "0")]), b"")
        with self._lock:
            self.dials += 1
        if self.handshake_delay_s:
            await asyncio.sleep(self.handshake_delay_s)
        if self.refuse_status is not None:
            body = json.dumps({"error": {"message": "refused by the mock"}}).encode()
            return Response(
                self.refuse_status,
                "Refused",
                Headers([("Content-Type", "application/json")]),
                body,
            )
        return None

    async def _session(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None
        session = Session(
            path=request.path,
            headers={k.lower(): v for k, v in request.headers.raw_items()},
            connection=connection,
        )
        with self._lock:
            self.sessions.append(session)
            self._created += 1
            session.id = f"sess_mock_{self._created}"
        model = request.path.partition("model=")[2].partition("&")[0] or "gpt-4o-realtime-preview"
        try:
            await connection.send(
                _event("session.created", session={"id": session.id, "model": model})
            )
            async for message in connection:
                if self.keep_frames or not session.received:
                    session.received.append(message)
                if isinstance(message, bytes):
                    await connection.send(message)
                    continue
                try:
                    event = json.loads(message)
                except ValueError:
                    event = None
                if not isinstance(event, dict):
                    # Not an event: echoed as it came.
                    await connection.send(_event("mock.echo", raw=message))
                    continue
                await self._answer(connection, event)
        except ConnectionClosed:
            pass
        finally:
            session.close_code = connection.close_code
            session.closed = True

    async def _answer(self, connection: ServerConnection, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "mock.close":
            await connection.close(code=int(event.get("code", 1000)), reason="mock closes")
            return
        if kind == "mock.transcribe":
            # What the provider says when it has transcribed the user's committed speech.
            await connection.send(
                _event(
                    "conversation.item.input_audio_transcription.completed",
                    item_id="item_spoken",
                    content_index=0,
                    transcript=str(event.get("transcript", "")),
                )
            )
            return
        if kind != "response.create":
            await connection.send(_event("mock.echo", event=event))
            return
        response = {"id": "resp_mock", "object": "realtime.response", "status": "in_progress"}
        await connection.send(_event("response.created", response=response))
        chunk = base64.b64encode(bytes(range(256)) * 16).decode()
        for index in range(self.audio_deltas):
            await connection.send(
                _event(
                    "response.audio.delta",
                    response_id="resp_mock",
                    item_id="item_mock",
                    output_index=0,
                    content_index=0,
                    delta=chunk,
                    event_id=f"event_delta_{index}",
                )
            )
        done = {**response, "status": "completed", "output": [], "usage": USAGE}
        await connection.send(_event("response.done", response=done))


# -- the client side: session scripts, as the tests and benches run them ---------------------

SCRIPTS = ("conversation", "binary", "client_close_code", "upstream_close_code")


def normalized(message: str | bytes) -> Any:
    """A frame as compared across runs: JSON, the mock's per-session id made one."""
    if isinstance(message, bytes):
        return {"binary": message.hex()}
    event = json.loads(message)
    if event.get("type") == "session.created" and isinstance(event.get("session"), dict):
        event["session"] = {**event["session"], "id": "sess_mock"}
    return event


async def receive_until(ws: ClientConnection, kind: str) -> list[Any]:
    """Events up to and including the first of `kind`."""
    events = []
    while True:
        event = normalized(await asyncio.wait_for(ws.recv(), 10))
        events.append(event)
        if isinstance(event, dict) and event.get("type") == kind:
            return events


@dataclass
class ClientRun:
    """One scripted session as its client saw it: frames, close, and the mock session it got."""

    received: list[Any]
    close: tuple[int | None, str | None]
    session_id: str


async def run_script(url: str, script: str, headers: dict[str, str]) -> ClientRun:
    """Runs one of `SCRIPTS` against `url` (`ws://.../v1/realtime?model=...`)."""
    received: list[Any] = []
    async with connect(url, additional_headers=headers, open_timeout=20) as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), 10))
        session_id = str((first.get("session") or {}).get("id", ""))
        received.append(normalized(json.dumps(first)))
        if first.get("type") != "session.created":
            received += await receive_until(ws, "session.created")
        if script == "conversation":
            for index in range(20):
                item = {"type": "message", "role": "user", "content": [f"turn {index}"]}
                await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
                received += await receive_until(ws, "mock.echo")
            await ws.send(json.dumps({"type": "response.create"}))
            received += await receive_until(ws, "response.done")
            await ws.ping()
            await ws.close(code=1000)
        elif script == "binary":
            await ws.send(bytes(range(256)))
            try:
                received.append(normalized(await asyncio.wait_for(ws.recv(), 5)))
            except ConnectionClosed:
                pass
            await ws.close()
        elif script == "client_close_code":
            await ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
            received += await receive_until(ws, "mock.echo")
            await ws.close(code=4001, reason="client leaves")
        elif script == "upstream_close_code":
            await ws.send(json.dumps({"type": "mock.close", "code": 4002}))
            try:
                while True:
                    received.append(normalized(await asyncio.wait_for(ws.recv(), 10)))
            except ConnectionClosed:
                pass
        return ClientRun(received, (ws.close_code, ws.close_reason), session_id)


async def attempt(url: str, headers: dict[str, str]) -> tuple[Any, ...]:
    """A session attempt the proxy may refuse: `("refused", status)` for a refused upgrade, else
    `("open", first frame, close code)` once the proxy has closed the session."""
    try:
        async with connect(url, additional_headers=headers, open_timeout=20) as ws:
            try:
                message = normalized(await asyncio.wait_for(ws.recv(), 10))
            except ConnectionClosed:
                message = None
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            except ConnectionClosed:
                pass
            return ("open", message, ws.close_code)
    except InvalidStatus as refused:
        return ("refused", refused.response.status_code)


async def vanish(url: str, headers: dict[str, str]) -> str:
    """A client that has its `session.created` and then is simply gone (RST, no close frame);
    the id of the mock session it got."""
    ws = await connect(url, additional_headers=headers, open_timeout=20)
    first = json.loads(await asyncio.wait_for(ws.recv(), 10))
    transport = ws.transport
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    transport.abort()
    return str((first.get("session") or {}).get("id", ""))


def _event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "event_id": fields.pop("event_id", f"event_{kind}"), **fields})


def quiet_refused_requests() -> None:
    """Drops websockets' traceback for a request that is no upgrade at all (`OPTIONS /`, which
    the fast path's warmer sends every `rust: true` deployment's origin): the mock refuses it
    before it can answer, as a provider's WebSocket endpoint may."""

    class Refused(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return record.getMessage() != "opening handshake failed"

    logging.getLogger("websockets.server").addFilter(Refused())


def main(argv: list[str] | None = None) -> None:
    """The mock in a process of its own, until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description="The realtime mock provider, on loopback.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--handshake-delay-ms", type=float, default=0.0)
    parser.add_argument("--no-compression", action="store_true", help="decline permessage-deflate")
    args = parser.parse_args(argv)
    quiet_refused_requests()
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # the server's thread inherits the mask
    upstream = RealtimeUpstream(
        args.handshake_delay_ms / 1000,
        keep_frames=False,
        bind_port=args.port,
        compression=not args.no_compression,
    ).start()
    print(f"READY {upstream.port}", flush=True)
    signal.sigwait(stop)
    upstream.stop()


if __name__ == "__main__":
    main()
