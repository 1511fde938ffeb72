"""A local mock of the OpenAI, Anthropic and Bedrock chat endpoints, for the demo,
the benchmarks and the tests.

`python -m litellm_fastpath.mock_provider --port 0` listens on loopback and prints
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

`canned_response` is the one source of these answers (the test harness's recording upstream
serves the same ones); `deployment_kwargs` gives LiteLLM params pointing at a server like this.
Request bodies need a Content-Length, as every provider SDK sends: chunked ones get a 411.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import re
import select
import signal
import struct
import subprocess
import sys
import time
import zlib
from types import TracebackType
from typing import Any, ClassVar, Self

PROVIDERS = ("openai", "anthropic", "bedrock")
HOST = "127.0.0.1"
REPLY_TEXT = "Hello from upstream"
CREATED = 1_700_000_000  # fixed so answers are byte-for-byte reproducible
BEDROCK_MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
_CONVERSE = re.compile(r"/model/[^/]+/converse$")
_CONVERSE_STREAM = re.compile(r"/model/[^/]+/converse-stream$")
_INVOKE = re.compile(r"/model/([^/]+)/invoke$")
_INVOKE_STREAM = re.compile(r"/model/([^/]+)/invoke-with-response-stream$")
# Vector length when the request names no `dimensions` (benchmarks set 1536).
EMBEDDING_DIMS = 16
# Floats at the edges of float64 (subnormal, largest, smallest normal, negative zero): the first
# vector carries them so that bit-for-bit comparisons see them.
_EDGE_FLOATS = (5e-324, 1.7976931348623157e308, 2.2250738585072014e-308, -0.0, 0.1, -1e-7)
_MAX_HEAD = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 411: "Length Required"}


def canned_response(
    method: str, path: str, request_body: bytes | bytearray
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) a provider answers to `path`; a fresh dict on every call."""
    if path.endswith("/chat/completions"):
        return 200, {
            "id": "chatcmpl-upstream",
            "object": "chat.completion",
            "created": CREATED,
            "model": request_model(request_body),
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
    if path.endswith("/v1/messages"):
        return 200, {
            "id": "msg_upstream",
            "type": "message",
            "role": "assistant",
            "model": request_model(request_body),
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
    if _CONVERSE.search(path):
        return 200, {
            "output": {"message": {"role": "assistant", "content": [{"text": REPLY_TEXT}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18},
            "metrics": {"latencyMs": 12},
        }
    if path.endswith("/embeddings"):
        return _openai_embeddings(request_body)
    invoke = _INVOKE.search(path)
    if invoke is not None and "embed" in invoke.group(1):
        return _bedrock_embeddings(invoke.group(1), request_body)
    if invoke is not None and "claude" in invoke.group(1):
        # Bedrock Invoke answers Claude with the Anthropic Messages body.
        _status, message = canned_response(method, "/v1/messages", request_body)
        return 200, {**message, "model": invoke.group(1)}
    return 404, {
        "error": {"type": "not_found", "message": f"no upstream route for {method} {path}"}
    }


def embedding_vector(index: int, dims: int) -> list[float]:
    """A deterministic vector of full-precision floats (`index` picks which)."""
    vector = [math.sin(index * 1.618033988749895 + d * 0.5772156649015329) / 7 for d in range(dims)]
    if index == 0:
        vector[: len(_EDGE_FLOATS)] = _EDGE_FLOATS[:dims]
    return vector


def _json_request(body: bytes | bytearray) -> dict[str, Any]:
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _dims(request: dict[str, Any], key: str) -> int:
    dims = request.get(key)
    return dims if isinstance(dims, int) and 0 < dims <= 8192 else EMBEDDING_DIMS


def _openai_embeddings(body: bytes | bytearray) -> tuple[int, dict[str, Any]]:
    request = _json_request(body)
    inputs = request.get("input")
    single_tokens = isinstance(inputs, list) and bool(inputs) and isinstance(inputs[0], int)
    if isinstance(inputs, str) or single_tokens:
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs:
        return 400, {"error": {"type": "invalid_request_error", "message": "bad input"}}
    dims = _dims(request, "dimensions")
    as_base64 = request.get("encoding_format") == "base64"
    data = []
    for index in range(len(inputs)):
        vector: Any = embedding_vector(index, dims)
        if as_base64:
            vector = [x if abs(x) < 3e38 else 0.0 for x in vector]  # float32's range
            vector = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = 3 * len(inputs)
    return 200, {
        "object": "list",
        "data": data,
        "model": request_model(body),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _bedrock_embeddings(model_id: str, body: bytes | bytearray) -> tuple[int, dict[str, Any]]:
    request = _json_request(body)
    if "cohere" in model_id:
        texts = request.get("texts") or []
        dims = _dims(request, "output_dimension")
        vectors = [embedding_vector(index, dims) for index in range(len(texts))]
        types = request.get("embedding_types")
        if types:
            return 200, {
                "id": "cohere-upstream",
                "embeddings": {kind: vectors for kind in types},
                "response_type": "embeddings_by_type",
                "texts": texts,
            }
        return 200, {
            "id": "cohere-upstream",
            "embeddings": vectors,
            "response_type": "embeddings_floats",
            "texts": texts,
        }
    text = request.get("inputText")
    dims = _dims(request, "dimensions")
    vector = embedding_vector(len(text) if isinstance(text, str) else 0, dims)
    answer: dict[str, Any] = {
        "embedding": vector,
        "inputTextTokenCount": len(text) // 4 + 1 if isinstance(text, str) else 1,
    }
    if "v2" in model_id:
        kinds = request.get("embeddingTypes") or ["float"]
        answer["embeddingsByType"] = {
            kind: [1 if x > 0 else 0 for x in vector] if kind == "binary" else vector
            for kind in kinds
        }
    return 200, answer


STREAM_CHUNKS = 8
# Delay between streamed chunks (`--chunk-delay-ms`); 0 sends the whole stream at once.
CHUNK_DELAY_S = 0.0


def stream_pieces(count: int) -> list[str]:
    """The text of a streamed answer of `count` chunks (one word each)."""
    return [f"w{i} " for i in range(count)]


def openai_stream_events(
    model: str, pieces: list[str], *, include_usage: bool = False, prompt_tokens: int = 11
) -> list[bytes]:
    """An OpenAI chat stream as the API sends it: a role chunk, one chunk per piece, a finish
    chunk, the usage chunk when asked for, `[DONE]`; each item one SSE event."""

    def event(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-upstream",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_test",
            "choices": choices,
            "usage": usage,
        }
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    def choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]

    events = [event(choice({"role": "assistant", "content": "", "refusal": None}))]
    events += [event(choice({"content": piece})) for piece in pieces]
    events.append(event(choice({}, "stop")))
    if include_usage:
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(pieces),
            "total_tokens": prompt_tokens + len(pieces),
        }
        events.append(event([], usage))
    events.append(b"data: [DONE]\n\n")
    return events


def anthropic_stream_events(
    model: str, pieces: list[str], *, stop_reason: str = "end_turn", input_tokens: int = 11
) -> list[bytes]:
    """An Anthropic Messages stream as the API sends it: `message_start`, one text block with a
    `text_delta` per piece, `message_delta` with the stop reason and usage, `message_stop`."""

    def event(name: str, data: dict[str, Any]) -> bytes:
        payload = json.dumps({"type": name, **data}, separators=(",", ":"))
        return f"event: {name}\ndata: {payload}\n\n".encode()

    message: dict[str, Any] = {
        "id": "msg_upstream",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    events = [
        event("message_start", {"message": message}),
        event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        event("ping", {}),
    ]
    events += [
        event(
            "content_block_delta",
            {"index": 0, "delta": {"type": "text_delta", "text": piece}},
        )
        for piece in pieces
    ]
    events += [
        event("content_block_stop", {"index": 0}),
        event(
            "message_delta",
            {
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": len(pieces)},
            },
        ),
        event("message_stop", {}),
    ]
    return events


def aws_event_frame(
    event_type: str | None, payload: Any, *, exception_type: str | None = None
) -> bytes:
    """One AWS event-stream message (prelude, string headers, JSON payload, CRC32s): an event,
    or an exception when `exception_type` is given."""

    def header(name: str, value: str) -> bytes:
        raw_name, raw_value = name.encode(), value.encode()
        return (
            bytes([len(raw_name)])
            + raw_name
            + b"\x07"
            + struct.pack(">H", len(raw_value))
            + raw_value
        )

    body = (
        payload
        if isinstance(payload, bytes)
        else json.dumps(payload, separators=(",", ":")).encode()
    )
    if exception_type is not None:
        headers = header(":exception-type", exception_type) + header(":message-type", "exception")
    else:
        headers = header(":event-type", event_type or "") + header(":message-type", "event")
    headers += header(":content-type", "application/json")
    prelude = struct.pack(">II", 12 + len(headers) + len(body) + 4, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


def bedrock_invoke_stream_events(pieces: list[str]) -> list[bytes]:
    """A Bedrock Invoke Claude stream: each Anthropic event base64-encoded in a `chunk` frame,
    usage in `amazon-bedrock-invocationMetrics` on `message_stop`."""
    frames = []
    for raw in anthropic_stream_events("claude", pieces):
        event = json.loads(raw.split(b"data: ", 1)[1])
        if event["type"] == "message_stop":
            event["amazon-bedrock-invocationMetrics"] = {
                "inputTokenCount": 11,
                "outputTokenCount": len(pieces),
                "invocationLatency": 10,
                "firstByteLatency": 5,
            }
        payload = base64.b64encode(json.dumps(event, separators=(",", ":")).encode()).decode()
        frames.append(aws_event_frame("chunk", {"bytes": payload}))
    return frames


def bedrock_stream_events(pieces: list[str], *, stop_reason: str = "end_turn") -> list[bytes]:
    """A Bedrock `converse-stream` answer: `messageStart`, a `contentBlockDelta` per piece,
    `contentBlockStop`, `messageStop`, `metadata` with usage."""
    events = [aws_event_frame("messageStart", {"role": "assistant"})]
    events += [
        aws_event_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}})
        for piece in pieces
    ]
    usage = {"inputTokens": 11, "outputTokens": len(pieces), "totalTokens": 11 + len(pieces)}
    return [
        *events,
        aws_event_frame("contentBlockStop", {"contentBlockIndex": 0}),
        aws_event_frame("messageStop", {"stopReason": stop_reason}),
        aws_event_frame("metadata", {"usage": usage, "metrics": {"latencyMs": 12}}),
    ]


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


def request_model(body: bytes | bytearray) -> str:
    try:
        model = json.loads(body).get("model")
    except (ValueError, AttributeError):
        return "unknown"
    return model if isinstance(model, str) else "unknown"


def deployment_kwargs(provider: str, url: str) -> dict[str, Any]:
    """LiteLLM `litellm_params` of one deployment of `provider` whose upstream is `url`."""
    if provider == "openai":
        return {"model": "openai/gpt-4o-mini", "api_key": "sk-upstream", "api_base": url}
    if provider == "anthropic":
        return {"model": "anthropic/claude-sonnet-4-5", "api_key": "sk-ant", "api_base": url}
    if provider == "bedrock":
        return {
            "model": f"bedrock/converse/{BEDROCK_MODEL_ID}",
            "aws_access_key_id": "AKIDTEST",
            "aws_secret_access_key": "secret-test-key",
            "aws_region_name": "us-east-1",
            "aws_bedrock_runtime_endpoint": url,
        }
    raise ValueError(provider)


# Embedding deployments of each kind the fast path serves (LiteLLM model names).
EMBEDDING_MODELS = {
    "openai": "openai/text-embedding-3-small",
    "openai-compatible": "openai/my-embed",
    "titan-v1": "bedrock/amazon.titan-embed-text-v1",
    "titan-v2": "bedrock/amazon.titan-embed-text-v2:0",
    "cohere": "bedrock/cohere.embed-english-v3",
    "cohere-v4": "bedrock/us.cohere.embed-v4:0",
}


def embedding_deployment_kwargs(kind: str, url: str) -> dict[str, Any]:
    """LiteLLM `litellm_params` of one embedding deployment (`EMBEDDING_MODELS`) at `url`."""
    model = EMBEDDING_MODELS[kind]
    if model.startswith("openai/"):
        return {"model": model, "api_key": "sk-upstream", "api_base": f"{url}/v1"}
    return {**deployment_kwargs("bedrock", url), "model": model}


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
        if _CONVERSE_STREAM.search(self.path):
            request = _json_request(self.body)
            count = (request.get("inferenceConfig") or {}).get("maxTokens") or STREAM_CHUNKS
            self._stream("", int(count), False)
            return
        if _INVOKE_STREAM.search(self.path):
            count = _json_request(self.body).get("max_tokens") or STREAM_CHUNKS
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


class ServerProcess:
    """`python -m <module> --port 0 ...` in its own session (killed as a group), for a server
    such as this module that prints `READY <port>` once it listens."""

    def __init__(self, module: str = __name__, args: tuple[str, ...] = (), timeout: float = 15.0):
        self.cmd = [sys.executable, "-m", module, "--port", "0", *args]
        self.timeout = timeout
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen(
            self.cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True
        )
        assert self.proc.stdout is not None
        deadline, line = time.monotonic() + self.timeout, b""
        while not line and time.monotonic() < deadline and self.proc.poll() is None:
            if select.select([self.proc.stdout], [], [], 0.2)[0]:
                line = self.proc.stdout.readline()
        if not line.startswith(b"READY "):
            self.__exit__(None, None, None)
            raise RuntimeError(f"{' '.join(self.cmd[1:3])} did not start (got {line!r})")
        self.port = int(line.split()[1])
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(wait_s)
                break
            except ProcessLookupError:
                proc.wait()
                break
            except subprocess.TimeoutExpired:
                pass
        if proc.stdout is not None:
            proc.stdout.close()


def main() -> None:
    global EMBEDDING_DIMS, CHUNK_DELAY_S
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--embedding-dims", type=int, default=EMBEDDING_DIMS, help="vector length by default"
    )
    parser.add_argument(
        "--chunk-delay-ms", type=float, default=0.0, help="pause between streamed chunks"
    )
    args = parser.parse_args()
    EMBEDDING_DIMS = args.embedding_dims
    CHUNK_DELAY_S = args.chunk_delay_ms / 1000
    serve(MockProvider, args.port)


if __name__ == "__main__":
    main()
