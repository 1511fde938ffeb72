"""The tokens the lane reserves in a key's tpm windows equal LiteLLM's v3 limiter's own estimate
(`_estimate_tokens_for_request`, floored at 1, as its pre-call hook reserves it) on the same
bodies, for chat and `/v1/messages`; where the limiter would first write `max_tokens` into the
request (no output cap, a tpm limit below 4096), or the body is one the lane leaves to the
proxy, the lane reserves nothing (None)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litellm.proxy.hooks.parallel_request_limiter_v3 import (
    _PROXY_MaxParallelRequestsHandler_v3 as Limiter,
)

from litellm_fastpath import _native

LONG = "x" * 4001
TOOL_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
BODIES: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16},
    {"messages": [{"role": "user", "content": "hi"}]},
    {"messages": [{"role": "user", "content": ""}]},
    {"messages": []},
    {"messages": [{"role": "user", "content": "ünïcødé ✓ 😀 " * 9}], "max_tokens": 7},
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": LONG}]},
    {"messages": [{"role": "user", "content": LONG}], "max_completion_tokens": 100},
    {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 5, "max_completion_tokens": 9},
    {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 12.9},
    {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 0},
    {"messages": [{"role": "user", "content": "abc"}], "max_tokens": None},
    {"messages": [{"role": "user", "content": "abc"}], "max_tokens": True},
    {"messages": [{"role": "user", "content": "q"}, TOOL_CALL], "max_tokens": 3},
    {"messages": [{"role": "tool", "tool_call_id": "c1", "content": "42"}], "max_tokens": 3},
    {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            {"role": "user", "content": [{"type": "text", "text": ""}, {"text": None}]},
        ],
        "max_tokens": 64,
    },
    {"messages": [{"role": "user", "content": {"odd": True}}], "max_tokens": 2},
    {"messages": [{"role": "user", "content": 12}], "max_tokens": 2},
]
# Bodies the lane leaves to the proxy (its estimate would need Python's own parsing or fail).
UNUSUAL: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "abc"}], "max_tokens": "12"},
    {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 8, "n": 2},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}], "max_tokens": 8},
    {"messages": [{"role": "user", "content": ["plain string"]}], "max_tokens": 8},
    {"messages": ["not a message"], "max_tokens": 8},
    {"messages": [{"role": "tool", "content": "", "search_results": [{}]}], "max_tokens": 8},
]
CALL_TYPES = ("acompletion", "anthropic_messages")
LIMITS = (1, 100, 4095, 4096, 10_000, 1_000_000)


def litellm_reserves(body: dict[str, Any], call_type: str, min_limit: int) -> int | None:
    """What the limiter's pre-call hook reserves for `body` (None: it first caps the output)."""
    floor = Limiter.no_max_tokens_output_floor(min_limit)
    if floor < Limiter.no_max_tokens_output_floor(None) and not Limiter._has_explicit_output_cap(
        body, call_type
    ):
        return None
    # The estimate reads only the limiter's static helpers: no limiter state is needed.
    limiter = object.__new__(Limiter)
    estimate = limiter._estimate_tokens_for_request(
        data=body,
        model="m",
        min_configured_tpm_limit=min_limit,
        call_type=call_type,
        configured_output_tokens=None,
    )
    return max(estimate, 1)


@pytest.mark.parametrize("call_type", CALL_TYPES)
@pytest.mark.parametrize("min_limit", LIMITS)
@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_the_lane_reserves_what_the_limiter_estimates(
    body: dict[str, Any], min_limit: int, call_type: str
) -> None:
    raw = json.dumps({"model": "m", **body}).encode()
    assert _native.lane_tpm_estimate(raw, min_limit) == litellm_reserves(body, call_type, min_limit)


@pytest.mark.parametrize("body", UNUSUAL, ids=range(len(UNUSUAL)))
def test_unusual_bodies_go_to_the_proxy(body: dict[str, Any]) -> None:
    raw = json.dumps({"model": "m", **body}).encode()
    assert _native.lane_tpm_estimate(raw, 1_000_000) is None


def test_a_body_that_is_not_json_reserves_nothing() -> None:
    assert _native.lane_tpm_estimate(b"{not json", 1_000_000) is None
