"""Tools and structured output on the chat fast path (OpenAI-compatible deployments),
differential against LiteLLM's Python path: the same upstream body and the same response.

Anthropic and Bedrock map tools to their own blocks; those requests still decline (counted), and
so do the tool shapes LiteLLM rewrites before sending them to an OpenAI-compatible upstream.
"""

from __future__ import annotations

import json
from typing import Any

import litellm
import pytest

import litellm_fastpath
from tests.conftest import comparable, deployment_kwargs, served_by_rust
from tests.harness import RecordingUpstream, Reply

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
STRICT = {
    "type": "function",
    "function": {
        "name": "lookup",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
CALL = {
    "id": "call_0",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
}
HISTORY = [
    *ASK,
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 24°C"},
]


def answer(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-tools",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
        "system_fingerprint": "fp_tools",
    }


def tool_call_answer(*calls: tuple[str, str, str]) -> dict[str, Any]:
    return answer(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
                for id_, name, args in calls
            ],
            "refusal": None,
            "annotations": [],
        },
        "tool_calls",
    )


CALLS_WEATHER = tool_call_answer(("call_1", "get_weather", '{"city":"Paris"}'))
CALLS_TWO = tool_call_answer(
    ("call_1", "get_weather", '{"city":"Paris"}'), ("call_2", "get_time", "{}")
)
JSON_TEXT = answer({"role": "assistant", "content": '{"a": "b"}', "refusal": None})
PLAIN_TEXT = answer({"role": "assistant", "content": "It is sunny.", "refusal": None})

# (request kwargs, upstream answer): served in Rust, equal to LiteLLM's path.
SERVED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "tools_auto": ({"messages": ASK, "tools": [WEATHER], "tool_choice": "auto"}, CALLS_WEATHER),
    "tools_default_choice": ({"messages": ASK, "tools": [WEATHER, TIME]}, CALLS_TWO),
    "tool_choice_required": (
        {"messages": ASK, "tools": [WEATHER], "tool_choice": "required"},
        CALLS_WEATHER,
    ),
    "tool_choice_none": ({"messages": ASK, "tools": [WEATHER], "tool_choice": "none"}, PLAIN_TEXT),
    "tool_choice_named": (
        {
            "messages": ASK,
            "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
        CALLS_WEATHER,
    ),
    "parallel_tool_calls_false": (
        {"messages": ASK, "tools": [WEATHER, TIME], "parallel_tool_calls": False},
        CALLS_WEATHER,
    ),
    "strict_tool": ({"messages": ASK, "tools": [STRICT]}, PLAIN_TEXT),
    "history_with_tool_result": ({"messages": HISTORY, "tools": [WEATHER]}, PLAIN_TEXT),
    "history_without_tools_param": ({"messages": HISTORY}, PLAIN_TEXT),
    "assistant_tool_call_without_content_key": (
        {
            "messages": [
                *ASK,
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
            ]
        },
        PLAIN_TEXT,
    ),
    "assistant_text_and_tool_call": (
        {
            "messages": [
                *ASK,
                {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL]},
                {
                    "role": "tool",
                    "tool_call_id": "call_0",
                    "content": [{"type": "text", "text": "sunny"}],
                },
            ]
        },
        PLAIN_TEXT,
    ),
    "json_object": ({"messages": ASK, "response_format": {"type": "json_object"}}, JSON_TEXT),
    "json_schema_strict": (
        {
            "messages": ASK,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "answer",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                        "required": ["a"],
                        "additionalProperties": False,
                    },
                },
            },
        },
        JSON_TEXT,
    ),
    "json_schema_loose": (
        {
            "messages": ASK,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": {"type": "object"}},
            },
        },
        JSON_TEXT,
    ),
    "response_format_text": ({"messages": ASK, "response_format": {"type": "text"}}, PLAIN_TEXT),
}


async def both_arms(
    upstream: RecordingUpstream, provider: str, call: dict[str, Any], reply: dict[str, Any] | None
) -> list[tuple[Any, list[Any]]]:
    out = []
    for rust in (True, False):
        upstream.clear()
        if reply is not None:
            upstream.enqueue(Reply(json=reply))
        try:
            outcome: Any = await litellm.acompletion(
                **{**deployment_kwargs(provider, upstream.url), **call}, rust=rust
            )
        except Exception as exc:
            outcome = exc
        out.append((outcome, [r.json() for r in upstream.requests]))
    return out


def view(outcome: Any) -> Any:
    if isinstance(outcome, Exception):
        return (type(outcome).__name__, str(outcome))
    return comparable(outcome)


@pytest.mark.parametrize("shape", list(SERVED))
async def test_openai_tools_and_structured_output_match_python(
    upstream: RecordingUpstream, shape: str
) -> None:
    call, reply = SERVED[shape]
    (rust, rust_sent), (python, python_sent) = await both_arms(upstream, "openai", call, reply)
    assert litellm_fastpath.decline_counts() == {}
    assert served_by_rust(rust), view(rust)
    assert rust_sent == python_sent
    assert view(rust) == view(python)


async def test_tool_calls_come_back_as_litellm_objects(upstream: RecordingUpstream) -> None:
    call, reply = SERVED["tools_default_choice"]
    (rust, _), (python, _) = await both_arms(upstream, "openai", call, reply)
    rust_calls = rust.choices[0].message.tool_calls
    python_calls = python.choices[0].message.tool_calls
    assert [type(c) for c in rust_calls] == [type(c) for c in python_calls]
    assert rust_calls[0].function.name == "get_weather"
    assert json.loads(rust_calls[0].function.arguments) == {"city": "Paris"}
    assert rust.choices[0].finish_reason == python.choices[0].finish_reason == "tool_calls"


def test_sync_completion_with_tools(upstream: RecordingUpstream) -> None:
    upstream.enqueue(Reply(json=CALLS_WEATHER), Reply(json=CALLS_WEATHER))
    kwargs = {**deployment_kwargs("openai", upstream.url), "messages": ASK, "tools": [WEATHER]}
    rust = litellm.completion(**kwargs, rust=True)
    python = litellm.completion(**kwargs)
    assert served_by_rust(rust)
    assert comparable(rust) == comparable(python)


PATTERN_TOOL = {
    "type": "function",
    "function": {
        "name": "f",
        "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a"}}},
    },
}
COMBINATOR_TOOL = {
    "type": "function",
    "function": {"name": "f", "parameters": {"anyOf": [{"type": "object"}]}},
}
CACHED_TOOL = {**WEATHER, "cache_control": {"type": "ephemeral"}}
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "f"}}

# (provider, request kwargs, decline code): LiteLLM rewrites these, so its path serves them.
DECLINED: dict[str, tuple[str, dict[str, Any], str]] = {
    "tool_schema_with_pattern": ("openai", {"messages": ASK, "tools": [PATTERN_TOOL]}, "tools"),
    "tool_schema_top_level_anyof": (
        "openai",
        {"messages": ASK, "tools": [COMBINATOR_TOOL]},
        "tools",
    ),
    "tool_with_cache_control": ("openai", {"messages": ASK, "tools": [CACHED_TOOL]}, "tools"),
    "custom_tool": ("openai", {"messages": ASK, "tools": [CUSTOM_TOOL]}, "tools"),
    "empty_tools": ("openai", {"messages": ASK, "tools": []}, "tools"),
    "tool_choice_without_tools": (
        "openai",
        {"messages": ASK, "tool_choice": "auto"},
        "tool_choice",
    ),
    "parallel_tool_calls_not_bool": (
        "openai",
        {"messages": ASK, "tools": [WEATHER], "parallel_tool_calls": "no"},
        "parallel_tool_calls",
    ),
    "response_format_unknown_type": (
        "openai",
        {"messages": ASK, "response_format": {"type": "xml"}},
        "response_format",
    ),
    "tool_message_with_image": (
        "openai",
        {
            "messages": [
                *HISTORY[:2],
                {
                    "role": "tool",
                    "tool_call_id": "call_0",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                    ],
                },
            ]
        },
        "content_part",
    ),
    "tool_calls_odd_shape": (
        "openai",
        {
            "messages": [
                *ASK,
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]},
            ]
        },
        "message_field",
    ),
    "tool_call_id_on_user": (
        "openai",
        {"messages": [{"role": "user", "content": "hi", "tool_call_id": "c"}]},
        "message_field",
    ),
    "tool_message_without_id": (
        "openai",
        {"messages": [*ASK, {"role": "tool", "content": "x"}]},
        "message_field",
    ),
    "anthropic_tools": ("anthropic", {"messages": ASK, "tools": [WEATHER]}, "tools"),
    "anthropic_tool_history": ("anthropic", {"messages": HISTORY}, "message_field"),
    "bedrock_response_format": (
        "bedrock",
        {"messages": ASK, "response_format": {"type": "json_object"}},
        "response_format",
    ),
    "bedrock_tool_history": ("bedrock", {"messages": HISTORY}, "message_field"),
}


@pytest.mark.parametrize("shape", list(DECLINED))
async def test_shapes_litellm_rewrites_are_declined(
    upstream: RecordingUpstream, shape: str
) -> None:
    provider, call, code = DECLINED[shape]
    (rust, rust_sent), (python, python_sent) = await both_arms(upstream, provider, call, None)
    assert litellm_fastpath.decline_counts() == {code: 1}
    assert not served_by_rust(rust)
    assert rust_sent == python_sent
    assert view(rust) == view(python)
