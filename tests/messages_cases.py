"""`/v1/messages` requests and answers shared by the SDK, proxy and lane tests."""

from __future__ import annotations

import base64
import json
from typing import Any

from devtools.answers import anthropic_stream_events, aws_event_frame

ANTHROPIC_MODEL = "claude-sonnet-4-5"
BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8).decode()


def answer(text: str = "Hello ✓", **extra: Any) -> dict[str, Any]:
    """A `/v1/messages` answer as Anthropic sends it."""
    return {
        "id": "msg_01XYZ",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 1200,
            "output_tokens": 35,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 300,
        },
        **extra,
    }


def tool_answer() -> dict[str, Any]:
    return {
        **answer(),
        "content": [
            {"type": "thinking", "thinking": "Let me look.", "signature": "sig=="},
            {"type": "text", "text": "Reading the file."},
            tool_use("toolu_02", "read_file", {"path": "src/main.rs", "limit": 1e16}),
        ],
        "stop_reason": "tool_use",
    }


def tool_use(id_: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": id_, "name": name, "input": arguments}


def tool(index: int) -> dict[str, Any]:
    return {
        "name": f"tool_{index}",
        "description": f"Tool number {index}: does one thing well.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "A path"},
                "limit": {"type": "integer"},
                "flags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["path"],
        },
    }


def coding_agent_request() -> dict[str, Any]:
    """What a coding agent sends: a long cached system prompt, 20 tools, a tool exchange with
    an image result, thinking, a document and an image URL."""
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0"},
        {"type": "text", "text": "You are a coding agent. " * 2000},
        {
            "type": "text",
            "text": "Project rules: keep it simple. " * 500,
            "cache_control": {"type": "ephemeral"},
        },
    ]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug in main.rs"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "The bug is in main.", "signature": "c2ln"},
                {"type": "text", "text": ""},
                tool_use("toolu_01", "tool_0", {"path": "src/main.rs"}),
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [
                        {"type": "text", "text": 'fn main() { println!("héllo") }\n' * 200},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        },
                    ],
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
                    "cache_control": {"type": "ephemeral"},
                },
                {
                    "type": "image",
                    "source": {"type": "url", "url": "https://example.com/screenshot.png"},
                },
                {"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    return {
        "system": system,
        "messages": messages,
        "tools": [tool(i) for i in range(20)],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "max_tokens": 8192,
        "metadata": {"user_id": "session-42", "trace": "dropped"},
    }


def tool_stream_events() -> list[bytes]:
    """A streamed answer with thinking, text and a tool call (deltas split mid-JSON)."""

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    start = {
        "id": "msg_stream",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 900, "output_tokens": 1, "cache_read_input_tokens": 100},
    }
    out = [event("message_start", {"message": start})]
    out.append(
        event(
            "content_block_start",
            {"index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        )
    )
    for piece in ("Think", "ing…"):
        out.append(
            event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "thinking_delta", "thinking": piece}},
            )
        )
    out.append(
        event(
            "content_block_delta",
            {"index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}},
        )
    )
    out.append(event("content_block_stop", {"index": 0}))
    out.append(event("ping", {}))
    out.append(
        event("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}})
    )
    for piece in ("Let me ", "read it ✓"):
        out.append(
            event(
                "content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": piece}}
            )
        )
    out.append(event("content_block_stop", {"index": 1}))
    out.append(
        event(
            "content_block_start",
            {
                "index": 2,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_9",
                    "name": "tool_1",
                    "input": {},
                },
            },
        )
    )
    for piece in ('{"pa', 'th": "a.', 'rs"}'):
        out.append(
            event(
                "content_block_delta",
                {"index": 2, "delta": {"type": "input_json_delta", "partial_json": piece}},
            )
        )
    out.append(event("content_block_stop", {"index": 2}))
    out.append(
        event(
            "message_delta",
            {
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 40},
            },
        )
    )
    out.append(event("message_stop", {}))
    return out


def text_stream(pieces: int) -> bytes:
    return b"".join(anthropic_stream_events(ANTHROPIC_MODEL, [f"w{i} " for i in range(pieces)]))


def bedrock_invoke_stream(events: list[dict[str, Any]]) -> bytes:
    """Anthropic events as Bedrock's `invoke-with-response-stream` frames them."""
    return b"".join(
        aws_event_frame("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()})
        for e in events
    )


def bedrock_events(*, cache: bool = False, stop: bool = True) -> list[dict[str, Any]]:
    """A Bedrock Invoke Claude stream: usage in `amazon-bedrock-invocationMetrics` at the end."""
    metrics: dict[str, Any] = {
        "inputTokenCount": 8,
        "outputTokenCount": 3,
        "invocationLatency": 500,
        "firstByteLatency": 200,
    }
    if cache:
        metrics |= {"cacheReadInputTokenCount": 50, "cacheWriteInputTokenCount": 100}
    start = {
        "id": "msg_bdrk_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-3-5-sonnet-20240620",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 8, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hé"}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "✓ 1.5"},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 3},
        },
    ]
    if stop:
        events.append({"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics})
    return events
