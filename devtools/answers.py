"""What the providers answer, as the mocks serve it: canned bodies per route and the streamed
wire formats (OpenAI and Anthropic SSE, AWS event-stream frames).

`canned_response` is the one source of the canned answers: the fast mock provider
(`devtools.mock_provider`), the tests' recording upstream (`devtools.upstream`) and the demo all
serve these.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import zlib
from typing import Any

REPLY_TEXT = "Hello from upstream"
CREATED = 1_700_000_000  # fixed so answers are byte-for-byte reproducible
CONVERSE = re.compile(r"/model/[^/]+/converse$")
CONVERSE_STREAM = re.compile(r"/model/[^/]+/converse-stream$")
INVOKE = re.compile(r"/model/([^/]+)/invoke$")
INVOKE_STREAM = re.compile(r"/model/([^/]+)/invoke-with-response-stream$")

# Vector length when the request names no `dimensions` (benchmarks set 1536).
EMBEDDING_DIMS = 16
# Floats at the edges of float64 (subnormal, largest, smallest normal, negative zero): the first
# vector carries them so that bit-for-bit comparisons see them.
_EDGE_FLOATS = (5e-324, 1.7976931348623157e308, 2.2250738585072014e-308, -0.0, 0.1, -1e-7)


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
        usage = {"input_tokens": 11, "output_tokens": 7}
        usage |= {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        text = [{"type": "text", "text": REPLY_TEXT}]
        return 200, anthropic_message(request_model(request_body), text, "end_turn", usage)
    if CONVERSE.search(path):
        return 200, {
            "output": {"message": {"role": "assistant", "content": [{"text": REPLY_TEXT}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18},
            "metrics": {"latencyMs": 12},
        }
    if path.endswith("/embeddings"):
        return _openai_embeddings(request_body)
    invoke = INVOKE.search(path)
    if invoke is not None and "embed" in invoke.group(1):
        return _bedrock_embeddings(invoke.group(1), request_body)
    if invoke is not None and "claude" in invoke.group(1):
        # Bedrock Invoke answers Claude with the Anthropic Messages body.
        _status, message = canned_response(method, "/v1/messages", request_body)
        return 200, {**message, "model": invoke.group(1)}
    return 404, {
        "error": {"type": "not_found", "message": f"no upstream route for {method} {path}"}
    }


def anthropic_message(
    model: str, content: list[dict[str, Any]], stop_reason: str | None, usage: dict[str, int]
) -> dict[str, Any]:
    """An Anthropic Messages API message (as answered, or as a stream's `message_start`)."""
    return {
        "id": "msg_upstream",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def embedding_vector(index: int, dims: int) -> list[float]:
    """A deterministic vector of full-precision floats (`index` picks which)."""
    vector = [math.sin(index * 1.618033988749895 + d * 0.5772156649015329) / 7 for d in range(dims)]
    if index == 0:
        vector[: len(_EDGE_FLOATS)] = _EDGE_FLOATS[:dims]
    return vector


def json_request(body: bytes | bytearray) -> dict[str, Any]:
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _dims(request: dict[str, Any], key: str) -> int:
    dims = request.get(key)
    return dims if isinstance(dims, int) and 0 < dims <= 8192 else EMBEDDING_DIMS


def _openai_embeddings(body: bytes | bytearray) -> tuple[int, dict[str, Any]]:
    request = json_request(body)
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
    request = json_request(body)
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

    message = anthropic_message(model, [], None, {"input_tokens": input_tokens, "output_tokens": 1})
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


def request_model(body: bytes | bytearray) -> str:
    try:
        model = json.loads(body).get("model")
    except (ValueError, AttributeError):
        return "unknown"
    return model if isinstance(model, str) else "unknown"
