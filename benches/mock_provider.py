"""A fast loopback mock of OpenAI, Anthropic and Bedrock Converse for benchmarks.

Runs as its own process: ``python benches/mock_provider.py --port 0`` prints ``READY <port>``
once listening. It speaks HTTP/1.1 with keep-alive (and tolerates pipelining) on a bare
``asyncio.Protocol`` (uvloop when available) and answers

- ``POST .../chat/completions``         -> OpenAI chat completion
- ``POST .../v1/messages``              -> Anthropic message
- ``POST .../model/<id>/converse``      -> Bedrock Converse
- ``GET  /health``                      -> ``{"ok": true}`` (used to measure the mock and the
  load generator without any JSON work)

with the same bodies as ``tests/harness/upstream.py`` (the request's ``model`` is echoed for
OpenAI and Anthropic, like the real APIs). Bodies are rendered once per model and cached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys

REPLY_TEXT = "Hello from upstream"
CREATED = 1_700_000_000
_MODEL_RE = re.compile(rb'"model"\s*:\s*"([^"\\]{1,200})"')
_MAX_HEADER = 64 * 1024


def _openai(model: str) -> dict[str, object]:
    return {
        "id": "chatcmpl-upstream",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": REPLY_TEXT},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        "system_fingerprint": "fp_test",
    }


def _anthropic(model: str) -> dict[str, object]:
    return {
        "id": "msg_upstream",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": REPLY_TEXT}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 11,
            "output_tokens": 7,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


_BEDROCK = {
    "output": {"message": {"role": "assistant", "content": [{"text": REPLY_TEXT}]}},
    "stopReason": "end_turn",
    "usage": {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18},
    "metrics": {"latencyMs": 12},
}


def _response(status: int, payload: object, keep_alive: bool) -> bytes:
    body = json.dumps(payload).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "OK")
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode() + body


_cache: dict[tuple[str, bytes, bool], bytes] = {}
_HEALTH = {True: _response(200, {"ok": True}, True), False: _response(200, {"ok": True}, False)}


def _model_of(body: bytes) -> bytes:
    match = _MODEL_RE.search(body)
    return match.group(1) if match else b"unknown"


def render(path: str, body: bytes, keep_alive: bool) -> bytes:
    """The complete HTTP response for one request (cached per route, model and keep-alive)."""
    if path.endswith("/chat/completions"):
        key = ("openai", _model_of(body), keep_alive)
    elif path.endswith("/v1/messages"):
        key = ("anthropic", _model_of(body), keep_alive)
    elif path.endswith("/converse") and "/model/" in path:
        key = ("bedrock", b"", keep_alive)
    elif path == "/health":
        return _HEALTH[keep_alive]
    else:
        key = ("404:" + path[:200], b"", keep_alive)
    cached = _cache.get(key)
    if cached is None:
        kind, model = key[0], key[1].decode("utf-8", "replace")
        if kind == "openai":
            cached = _response(200, _openai(model), keep_alive)
        elif kind == "anthropic":
            cached = _response(200, _anthropic(model), keep_alive)
        elif kind == "bedrock":
            cached = _response(200, _BEDROCK, keep_alive)
        else:
            err = {"error": {"type": "not_found", "message": f"no route for {path}"}}
            cached = _response(404, err, keep_alive)
        if len(_cache) < 4096:
            _cache[key] = cached
    return cached


class _Conn(asyncio.Protocol):
    __slots__ = ("buf", "transport")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        out: list[bytes] = []
        close = False
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEADER:
                    close = True
                break
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                _method, target, version = lines[0].split(" ", 2)
            except ValueError:
                close = True
                break
            length = 0
            chunked = False
            keep_alive = version == "HTTP/1.1"
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip())
                elif name == "transfer-encoding" and "chunked" in value.lower():
                    chunked = True
                elif name == "connection":
                    v = value.strip().lower()
                    keep_alive = v != "close" and (keep_alive or v == "keep-alive")
            start = end + 4
            if chunked:
                consumed = _dechunk(self.buf, start)
                if consumed is None:
                    break
                body, stop = consumed
            else:
                if len(self.buf) < start + length:
                    break
                body = bytes(self.buf[start : start + length])
                stop = start + length
            del self.buf[:stop]
            out.append(render(target.partition("?")[0], body, keep_alive))
            if not keep_alive:
                close = True
                break
        if out and self.transport is not None:
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        if close and self.transport is not None:
            self.transport.close()


def _dechunk(buf: bytearray, pos: int) -> tuple[bytes, int] | None:
    """(body, end offset) of a complete chunked body starting at `pos`, or None if incomplete."""
    parts: list[bytes] = []
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip() or b"0", 16)
        pos = eol + 2
        if size == 0:
            # No trailers support beyond the terminating empty line.
            if len(buf) < pos + 2:
                return None
            return b"".join(parts), pos + 2
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        pos += size + 2


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Conn, host, port, backlog=4096, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"READY {bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("mock_provider listens on loopback only")
    use_uvloop = not args.no_uvloop and os.environ.get("MOCK_NO_UVLOOP") != "1"
    if use_uvloop:
        try:
            import uvloop

            uvloop.run(serve(args.host, args.port))
            return
        except ImportError:
            pass
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
