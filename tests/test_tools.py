"""Tools and structured output on the chat fast path (OpenAI-compatible, Anthropic and Bedrock
deployments), differential against LiteLLM's Python path: the same upstream body and the same
response.

Anthropic and Bedrock get their own blocks, as LiteLLM maps them; the tool shapes LiteLLM
rewrites (renamed tools, inlined schemas, forced-tool structured output) decline (counted).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import litellm
import pytest

import litellm_fastpath
from devtools.deployments import deployment_kwargs, served_by_rust
from devtools.upstream import Recorded, RecordingUpstream, Reply
from tests.conftest import comparable

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


def choice(tool_choice: str) -> dict[str, Any]:
    """The weather question, with the weather tool and this `tool_choice`."""
    return {"messages": ASK, "tools": [WEATHER], "tool_choice": tool_choice}


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
    "tools_auto": (choice("auto"), CALLS_WEATHER),
    "tools_default_choice": ({"messages": ASK, "tools": [WEATHER, TIME]}, CALLS_TWO),
    "tool_choice_required": (
        choice("required"),
        CALLS_WEATHER,
    ),
    "tool_choice_none": (choice("none"), PLAIN_TEXT),
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


def request_body(request: Recorded) -> Any:
    return request.json()


async def both_arms(
    upstream: RecordingUpstream,
    provider: str,
    call: dict[str, Any],
    reply: dict[str, Any] | None,
    sent: Callable[[Recorded], Any] = request_body,
) -> list[tuple[Any, list[Any]]]:
    """The call through Rust, then through LiteLLM: (outcome, what the upstream received)."""
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
        out.append((outcome, [sent(r) for r in upstream.requests]))
    return out


def view(outcome: Any) -> Any:
    if isinstance(outcome, Exception):
        return (type(outcome).__name__, str(outcome))
    return comparable(outcome)


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


# A schema LiteLLM rewrites for Anthropic and Bedrock (it inlines `$defs`).
SCHEMA_WITH_DEFS = {
    "type": "json_schema",
    "json_schema": {"name": "x", "schema": {"type": "object", "properties": {}, "$defs": {}}},
}
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
    "anthropic_tool_named_with_a_dot": (
        "anthropic",
        {"messages": ASK, "tools": [{"type": "function", "function": {"name": "my.tool"}}]},
        "tools",
    ),
    "anthropic_schema_with_definitions": (
        "anthropic",
        {
            "messages": ASK,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "parameters": {"type": "object", "properties": {}, "definitions": {}},
                    },
                }
            ],
        },
        "tools",
    ),
    "anthropic_json_schema_with_a_constraint": (
        "anthropic",
        {
            "messages": ASK,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "x",
                    "schema": {
                        "type": "object",
                        "properties": {"age": {"type": "integer", "minimum": 0}},
                    },
                },
            },
        },
        "response_format",
    ),
    "anthropic_unparsable_arguments": (
        "anthropic",
        {
            "messages": [
                *ASK,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Ro'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_0", "content": "x"},
            ],
            "tools": [WEATHER],
        },
        "message_field",
    ),
    "bedrock_json_schema_with_defs": (
        "bedrock",
        {
            "messages": ASK,
            "response_format": SCHEMA_WITH_DEFS,
        },
        "response_format",
    ),
    "bedrock_tool_history_without_tools": ("bedrock", {"messages": HISTORY}, "message_field"),
    "bedrock_tool_choice_none": (
        "bedrock",
        choice("none"),
        "tool_choice",
    ),
    "bedrock_parallel_tool_calls": (
        "bedrock",
        {"messages": ASK, "tools": [WEATHER], "parallel_tool_calls": False},
        "parallel_tool_calls",
    ),
    "bedrock_tool_named_with_a_dot": (
        "bedrock",
        {"messages": ASK, "tools": [{"type": "function", "function": {"name": "my.tool"}}]},
        "tools",
    ),
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


# -- Anthropic ---------------------------------------------------------------------------------


def person_schema(properties: dict[str, Any], additional: bool) -> dict[str, Any]:
    """A strict `json_schema` response format of a person object (`name` required)."""
    schema = {"type": "object", "properties": properties, "required": ["name"]}
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "person",
            "strict": True,
            "schema": {**schema, "additionalProperties": additional},
        },
    }


def anthropic_answer(*blocks: dict[str, Any], stop_reason: str = "tool_use") -> dict[str, Any]:
    return {
        "id": "msg_tools",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 12},
    }


def tool_use(id_: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": id_, "name": name, "input": arguments}


ANTHROPIC_TOOL_USE = anthropic_answer(tool_use("toolu_1", "get_weather", {"city": "Paris"}))
# A history with two parallel calls and text, one result a list of text parts.
PARALLEL_CALLS_AND_TEXT = [
    *ASK,
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {**CALL, "id": "call_1"},
            {**CALL, "id": "call_2", "function": {"name": "get_weather", "arguments": ""}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": [{"type": "text", "text": "rainy"}, {"type": "text", "text": "cold"}],
    },
]
NAMED_CHOICE = {
    "messages": ASK,
    "tools": [WEATHER, TIME],
    "tool_choice": {"type": "function", "function": {"name": "get_time"}},
}
ANTHROPIC_SERVED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "tools": ({"messages": ASK, "tools": [WEATHER, TIME]}, ANTHROPIC_TOOL_USE),
    "tools_no_description_no_parameters": ({"messages": ASK, "tools": [TIME]}, ANTHROPIC_TOOL_USE),
    "schema_trimmed": (
        {
            "messages": ASK,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "strict": True,
                        "parameters": {
                            "$schema": "http://json-schema.org/draft-07/schema#",
                            "title": "F",
                            "properties": {"a": {"type": "integer", "minimum": 0}},
                            "required": ["a"],
                            "additionalProperties": False,
                        },
                    },
                }
            ],
        },
        ANTHROPIC_TOOL_USE,
    ),
    "tool_choice_auto": (
        choice("auto"),
        ANTHROPIC_TOOL_USE,
    ),
    "tool_choice_none": (
        choice("none"),
        ANTHROPIC_TOOL_USE,
    ),
    "tool_choice_required": (
        choice("required"),
        ANTHROPIC_TOOL_USE,
    ),
    "tool_choice_named": (
        NAMED_CHOICE,
        ANTHROPIC_TOOL_USE,
    ),
    "tool_choice_dict_auto": (
        {"messages": ASK, "tools": [WEATHER], "tool_choice": {"type": "auto"}},
        ANTHROPIC_TOOL_USE,
    ),
    "parallel_false": (
        {"messages": ASK, "tools": [WEATHER], "parallel_tool_calls": False},
        ANTHROPIC_TOOL_USE,
    ),
    "parallel_true_required": (
        {
            "messages": ASK,
            "tools": [WEATHER],
            "tool_choice": "required",
            "parallel_tool_calls": True,
        },
        ANTHROPIC_TOOL_USE,
    ),
    "parallel_false_none": (
        {"messages": ASK, "tools": [WEATHER], "tool_choice": "none", "parallel_tool_calls": False},
        ANTHROPIC_TOOL_USE,
    ),
    "history": (
        {"messages": [*HISTORY, {"role": "user", "content": "thanks"}], "tools": [WEATHER]},
        anthropic_answer({"type": "text", "text": "Sunny."}, stop_reason="end_turn"),
    ),
    "history_without_tools": (
        {"messages": HISTORY},
        anthropic_answer({"type": "text", "text": "ok"}, stop_reason="end_turn"),
    ),
    "history_parallel_calls_and_text": (
        {
            "messages": PARALLEL_CALLS_AND_TEXT,
            "tools": [WEATHER],
        },
        anthropic_answer({"type": "text", "text": "Mixed."}, stop_reason="end_turn"),
    ),
    "answer_text_and_two_calls": (
        {"messages": ASK, "tools": [WEATHER]},
        anthropic_answer(
            {"type": "text", "text": "Checking both."},
            tool_use("toolu_1", "get_weather", {"city": "Paris", "n": 1.0, "big": 1e16, "u": "é✓"}),
            tool_use("toolu_2", "get_weather", {}),
        ),
    ),
    "json_object": (
        {"messages": ASK, "response_format": {"type": "json_object"}},
        anthropic_answer({"type": "text", "text": '{"a": 1}'}, stop_reason="end_turn"),
    ),
    "json_schema": (
        {
            "messages": ASK,
            "response_format": person_schema(
                {
                    "name": {"type": "string", "description": "Full name"},
                    "tags": {"type": "array", "items": {"type": "object", "properties": {}}},
                    "pet": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                },
                additional=True,
            ),
        },
        anthropic_answer({"type": "text", "text": '{"name": "A"}'}, stop_reason="end_turn"),
    ),
}


def anthropic_sent(request: Recorded) -> Any:
    headers = ("anthropic-beta", "anthropic-version")
    return request.json(), {h: request.headers.get(h) for h in headers}


# -- Bedrock Converse --------------------------------------------------------------------------


def converse_answer(*blocks: dict[str, Any], stop_reason: str = "tool_use") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": list(blocks)}},
        "stopReason": stop_reason,
        "usage": {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42},
        "metrics": {"latencyMs": 10},
    }


def tool_use_block(id_: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": id_, "name": name, "input": arguments}}


JSON_SCHEMA = person_schema(
    {"name": {"type": "string"}, "age": {"type": "integer"}}, additional=False
)
CONVERSE_TOOL_USE = converse_answer(tool_use_block("t1", "get_weather", {"city": "Paris"}))
BEDROCK_SERVED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "tools": ({"messages": ASK, "tools": [WEATHER, TIME]}, CONVERSE_TOOL_USE),
    "strict_schema_trimmed": ({"messages": ASK, "tools": [STRICT]}, CONVERSE_TOOL_USE),
    "tool_choice_auto": (
        choice("auto"),
        CONVERSE_TOOL_USE,
    ),
    "tool_choice_required": (
        choice("required"),
        CONVERSE_TOOL_USE,
    ),
    "tool_choice_named": (
        NAMED_CHOICE,
        CONVERSE_TOOL_USE,
    ),
    "history": (
        {"messages": [*HISTORY, {"role": "user", "content": "thanks"}], "tools": [WEATHER]},
        converse_answer({"text": "Sunny."}, stop_reason="end_turn"),
    ),
    "history_calls_text_and_list_results": (
        {
            "messages": PARALLEL_CALLS_AND_TEXT,
            "tools": [WEATHER],
        },
        converse_answer({"text": "Mixed."}, stop_reason="end_turn"),
    ),
    "answer_text_and_two_calls": (
        {"messages": ASK, "tools": [WEATHER]},
        converse_answer(
            {"text": "Checking both."},
            tool_use_block("t1", "get_weather", {"city": "Paris", "n": 1.0, "u": "é✓"}),
            tool_use_block("t2", "get_weather", {}),
        ),
    ),
    "json_object": (
        {"messages": ASK, "response_format": {"type": "json_object"}},
        converse_answer({"text": '{"a": 1}'}, stop_reason="end_turn"),
    ),
    "json_schema": (
        {"messages": ASK, "response_format": JSON_SCHEMA},
        converse_answer(
            {"text": "ignored"}, tool_use_block("t1", "json_tool_call", {"name": "A", "age": 3})
        ),
    ),
    "json_schema_wrapped_in_properties": (
        {"messages": ASK, "response_format": JSON_SCHEMA},
        converse_answer(tool_use_block("t1", "json_tool_call", {"properties": {"name": "A"}})),
    ),
    "json_schema_with_description_and_tools": (
        {
            "messages": ASK,
            "tools": [WEATHER],
            "response_format": {
                "type": "json_schema",
                "json_schema": {**JSON_SCHEMA["json_schema"], "description": "A person."},
            },
        },
        converse_answer(
            {"text": "pre"},
            tool_use_block("t1", "json_tool_call", {"name": "A"}),
            tool_use_block("t2", "get_weather", {"city": "Paris"}),
        ),
    ),
    "json_schema_and_tool_choice": (
        {
            "messages": ASK,
            "tools": [WEATHER],
            "tool_choice": "auto",
            "response_format": JSON_SCHEMA,
        },
        converse_answer({"text": "plain"}, stop_reason="end_turn"),
    ),
}


def bedrock_sent(request: Recorded) -> Any:
    return request.path, request.json()


# Per provider: the shapes the fast path serves (call, the upstream's answer), and what of the
# upstream request is compared.
MATCHING: dict[str, tuple[dict[str, tuple[dict[str, Any], dict[str, Any]]], Any]] = {
    "openai": (SERVED, request_body),
    "anthropic": (ANTHROPIC_SERVED, anthropic_sent),
    "bedrock": (BEDROCK_SERVED, bedrock_sent),
}


@pytest.mark.parametrize(
    ("provider", "shape"), [(p, shape) for p, (served, _) in MATCHING.items() for shape in served]
)
async def test_served_shapes_match_python(
    upstream: RecordingUpstream, provider: str, shape: str
) -> None:
    served, sent = MATCHING[provider]
    call, reply = served[shape]
    (rust, rust_sent), (python, python_sent) = await both_arms(
        upstream, provider, call, reply, sent
    )
    assert litellm_fastpath.decline_counts() == {}
    assert served_by_rust(rust), view(rust)
    assert rust_sent == python_sent
    assert view(rust) == view(python)
