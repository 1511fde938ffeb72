"""Differential tests: every supported request shape, sent once through the Rust path and once
through LiteLLM's Python path against the same recording upstream, must give the upstream the
same body and the caller the same response. LiteLLM's Python path is the specification."""

from __future__ import annotations

import base64
from typing import Any

import litellm
import pytest

import litellm_fastpath
from devtools.deployments import PROVIDERS, deployment_kwargs, served_by_rust
from devtools.upstream import RecordingUpstream, Reply
from tests.conftest import comparable, turns

PNG_B64 = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3).decode()
JPEG_B64 = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(range(200))).decode()

SHAPES: dict[str, dict[str, Any]] = {
    "user_text": {"messages": [{"role": "user", "content": "Hello"}]},
    "system_and_user": turns(("system", "Be brief."), ("user", "Hello")),
    "two_system_messages": turns(
        ("system", "s1"), ("system", [{"type": "text", "text": "s2"}]), ("user", "Hello")
    ),
    "multi_turn": turns(
        ("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a joke.")
    ),
    "consecutive_user_turns": turns(
        ("user", "first"), ("user", [{"type": "text", "text": "second"}])
    ),
    "text_parts": {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ]
    },
    "escapes_and_unicode": turns(
        ("user", 'quote " backslash \\ newline \n tab \t nul \x00 é 漢字 🎉')
    ),
    "long_text": {"messages": [{"role": "user", "content": "lorem ipsum " * 20_000}]},
    "image_png_data_url": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{PNG_B64}"},
                    },
                ],
            }
        ]
    },
    "image_jpeg_string_form": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": f"data:image/jpeg;base64,{JPEG_B64}"},
                    {"type": "text", "text": "Describe."},
                ],
            }
        ]
    },
    "sampling_params": {
        "messages": [{"role": "user", "content": "Hello"}],
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 50,
    },
    "max_completion_tokens": {
        "messages": [{"role": "user", "content": "Hello"}],
        "max_completion_tokens": 33,
    },
    "stop_string": {"messages": [{"role": "user", "content": "Hello"}], "stop": "END"},
    "stop_list": {"messages": [{"role": "user", "content": "Hello"}], "stop": ["X", "Y"]},
    "explicit_nulls": {
        "messages": [{"role": "user", "content": "Hello", "name": None}],
        "temperature": None,
        "stream": False,
    },
}

OPENAI_ONLY_SHAPES: dict[str, dict[str, Any]] = {
    "openai_penalties_seed_user": {
        "messages": [{"role": "user", "content": "Hello"}],
        "presence_penalty": 0.5,
        "frequency_penalty": 0.1,
        "seed": 7,
        "user": "user-123",
    },
    "openai_image_detail": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{PNG_B64}", "detail": "low"},
                    }
                ],
            }
        ]
    },
    "openai_developer_role": turns(("developer", "Be brief."), ("user", "Hello")),
}

CASES = [(p, name) for p in PROVIDERS for name in SHAPES] + [
    ("openai", name) for name in OPENAI_ONLY_SHAPES
]


def _shape(name: str) -> dict[str, Any]:
    return {**SHAPES, **OPENAI_ONLY_SHAPES}[name]


async def _both_paths(
    upstream: RecordingUpstream, provider: str, request: dict[str, Any]
) -> tuple[Any, Any, Any, Any]:
    """Sends `request` through Rust, then through Python; returns both responses and bodies."""
    kwargs = {**deployment_kwargs(provider, upstream.url), **request}
    fast = await litellm.acompletion(**kwargs, rust=True)
    fast_request = upstream.wait_for(1)[-1]
    upstream.clear()
    slow = await litellm.acompletion(**kwargs)
    slow_request = upstream.wait_for(1)[-1]
    return fast, slow, fast_request, slow_request


@pytest.mark.parametrize(("provider", "shape"), CASES)
async def test_rust_and_python_paths_agree(
    upstream: RecordingUpstream, provider: str, shape: str
) -> None:
    fast, slow, fast_request, slow_request = await _both_paths(upstream, provider, _shape(shape))

    assert served_by_rust(fast), litellm_fastpath.decline_counts()
    assert not served_by_rust(slow)
    assert litellm_fastpath.decline_counts() == {}
    assert fast_request.path == slow_request.path
    assert fast_request.json() == slow_request.json()
    assert not fast_request.chunked
    assert int(fast_request.headers["content-length"]) == len(fast_request.body)
    assert comparable(fast) == comparable(slow)


UPSTREAM_REPLIES: dict[str, dict[str, dict[str, Any]]] = {
    "anthropic": {
        "cache_usage": {
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 2,
                "cache_read_input_tokens": 3,
            }
        },
        # The usage Anthropic's API sends today: the cache split by TTL, the service tier.
        "usage_as_sent_today": {
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 6,
                "cache_read_input_tokens": 3,
                "cache_creation": {"ephemeral_5m_input_tokens": 4, "ephemeral_1h_input_tokens": 2},
                "output_tokens": 5,
                "service_tier": "standard",
            }
        },
        "inference_geo": {"usage": {"input_tokens": 10, "output_tokens": 5, "inference_geo": "us"}},
        "max_tokens_stop": {"stop_reason": "max_tokens"},
        "stop_sequence": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
        "refusal": {"stop_reason": "refusal"},
        "pause_turn": {"stop_reason": "pause_turn"},
        "context_window": {"stop_reason": "model_context_window_exceeded"},
        "container_field": {"container": None, "stop_reason": "end_turn"},
        "two_text_blocks": {
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]
        },
    },
    "bedrock": {
        "cache_usage": {
            "usage": {
                "inputTokens": 10,
                "outputTokens": 4,
                "totalTokens": 14,
                "cacheReadInputTokens": 3,
                "cacheWriteInputTokens": 2,
            }
        },
        "max_tokens_stop": {"stopReason": "max_tokens"},
        "guardrail": {"stopReason": "guardrail_intervened"},
        "content_filtered": {"stopReason": "content_filtered"},
        "response_fields": {
            "additionalModelResponseFields": {"stop_sequence": None},
            "performanceConfig": {"latency": "standard"},
        },
        "two_text_blocks": {
            "output": {
                "message": {"role": "assistant", "content": [{"text": "Hi"}, {"text": " there"}]}
            }
        },
    },
    "openai": {
        "details_and_extras": {
            "usage": {
                "prompt_tokens": 11,
                "completion_tokens": 7,
                "total_tokens": 18,
                "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
            "service_tier": "default",
            "extra_field": "x",
        },
        "length": {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hel", "refusal": None},
                    "finish_reason": "length",
                }
            ]
        },
        "refusal": {
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "refusal": "I can't help with that.",
                        "annotations": [],
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ]
        },
        "content_filter": {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "", "refusal": None},
                    "finish_reason": "content_filter",
                }
            ]
        },
        "citations": {
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "See example.com.",
                        "refusal": None,
                        "annotations": [
                            {
                                "type": "url_citation",
                                "url_citation": {
                                    "url": "https://example.com",
                                    "title": "Example",
                                    "start_index": 4,
                                    "end_index": 15,
                                },
                            }
                        ],
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ]
        },
    },
}

REPLY_CASES = [(p, name) for p, replies in UPSTREAM_REPLIES.items() for name in replies]


@pytest.mark.parametrize(("provider", "reply"), REPLY_CASES)
async def test_response_shapes_agree(
    upstream: RecordingUpstream, provider: str, reply: str
) -> None:
    """Usage with cache tokens, finish reasons and multi-block answers parse like LiteLLM."""
    from devtools.answers import canned_response

    suffix = {"openai": "/chat/completions", "anthropic": "/v1/messages", "bedrock": "/converse"}
    path = {
        "openai": "/chat/completions",
        "anthropic": "/v1/messages",
        "bedrock": "/model/x/converse",
    }[provider]
    _status, body = canned_response("POST", path, b'{"model": "m"}')
    body.update(UPSTREAM_REPLIES[provider][reply])
    body.pop("model", None) if provider == "bedrock" else None
    upstream.set_default(suffix[provider], Reply(json=body))

    fast, slow, _fast_request, _slow_request = await _both_paths(
        upstream, provider, SHAPES["user_text"]
    )
    assert served_by_rust(fast)
    assert comparable(fast) == comparable(slow)
    # The cost LiteLLM works out from the usage (cache writes by TTL price differently).
    model = deployment_kwargs(provider, upstream.url)["model"]
    costs = [litellm.completion_cost(completion_response=r, model=model) for r in (fast, slow)]
    assert costs[0] == costs[1] > 0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_sync_completion_agrees(upstream: RecordingUpstream, provider: str) -> None:
    kwargs = {**deployment_kwargs(provider, upstream.url), **SHAPES["system_and_user"]}
    fast = litellm.completion(**kwargs, rust=True)
    fast_body = upstream.wait_for(1)[-1].json()
    upstream.clear()
    slow = litellm.completion(**kwargs)
    slow_body = upstream.wait_for(1)[-1].json()
    assert served_by_rust(fast)
    assert not served_by_rust(slow)
    assert fast_body == slow_body
    assert comparable(fast) == comparable(slow)


async def test_positional_model_and_messages(upstream: RecordingUpstream) -> None:
    kwargs = deployment_kwargs("openai", upstream.url)
    model = kwargs.pop("model")
    response = await litellm.acompletion(
        model, SHAPES["user_text"]["messages"], rust=True, **kwargs
    )
    assert served_by_rust(response)


async def test_without_rust_flag_litellm_runs_untouched(upstream: RecordingUpstream) -> None:
    kwargs = {**deployment_kwargs("anthropic", upstream.url), **SHAPES["user_text"]}
    response = await litellm.acompletion(**kwargs)
    assert not served_by_rust(response)
    assert len(upstream.requests) == 1
    assert litellm_fastpath.decline_counts() == {}
