"""`rust: true` changes speed, never behaviour: odd and malformed requests and broken upstream
answers, each sent to the Rust arm and to LiteLLM's Python path against one recording upstream.

Each case also pins which arm serves it (Rust, or declined to Python under a named reason), so a
case cannot pass by silently falling back. The only differences allowed are the deliberate ones
in `DELIBERATE` (listed in the README too).
"""

from __future__ import annotations

import base64
import gc
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import litellm
import pytest

import litellm_fastpath
from devtools.answers import canned_response
from devtools.deployments import PROVIDERS, deployment_kwargs, served_by_rust
from devtools.upstream import RecordingUpstream, Reply
from tests.conftest import comparable, turns

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(64))).decode()
IMAGE = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
HI = [{"role": "user", "content": "hi"}]


# LiteLLM's Python arm leaves its HTTP connection unclosed after some broken answers; its
# clients are closed and collected right here (see `close_litellm_clients`), not in a later test.
pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def quiet_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    # LiteLLM prints a "Give Feedback" banner for every mapped exception; it changes nothing else.
    monkeypatch.setattr(litellm, "suppress_debug_info", True)


@pytest.fixture(autouse=True)
async def close_litellm_clients() -> AsyncIterator[None]:
    yield
    # On the test's own event loop, before it closes: LiteLLM caches a client per loop.
    from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

    await close_litellm_async_clients()
    litellm.in_memory_llm_clients_cache.flush_cache()
    gc.collect()


@dataclass(frozen=True)
class Outcome:
    """What a caller and the upstream saw for one call."""

    served_by_rust: bool
    requests: list[tuple[str, Any, str | None]]  # path, JSON body, auth scheme/credential
    response: dict[str, Any] | None = None
    error: tuple[str, int | None] | None = None
    message: str = ""


def _auth(headers: dict[str, str]) -> str | None:
    value = headers.get("authorization") or headers.get("x-api-key")
    # SigV4 signatures differ per call (date, body bytes); the scheme and key id do not.
    return value.split("Signature=")[0] if value and value.startswith("AWS4-") else value


async def outcome(upstream: RecordingUpstream, kwargs: dict[str, Any], *, rust: bool) -> Outcome:
    upstream.clear()
    try:
        extra = {"rust": True} if rust else {}
        response = await litellm.acompletion(**kwargs, max_retries=0, **extra)
    except Exception as exc:
        return Outcome(
            served_by_rust=False,
            requests=_requests(upstream),
            error=(type(exc).__name__, getattr(exc, "status_code", None)),
            message=str(exc),
        )
    return Outcome(served_by_rust(response), _requests(upstream), comparable(response))


def _requests(upstream: RecordingUpstream) -> list[tuple[str, Any, str | None]]:
    return [
        (r.path, json.loads(r.body) if r.body else None, _auth(r.headers))
        for r in upstream.requests
    ]


def assert_same(fast: Outcome, slow: Outcome) -> None:
    assert fast.requests == slow.requests
    assert fast.response == slow.response
    assert fast.error == slow.error
    if fast.error is not None and not fast.requests:
        # Refused before any I/O: by LiteLLM itself on both arms, word for word.
        assert fast.message == slow.message


# -- odd and malformed requests ------------------------------------------------------------------

# name -> request kwargs. Every case runs on every provider.
REQUESTS: dict[str, dict[str, Any]] = {
    "empty_user_text": {"messages": [{"role": "user", "content": ""}]},
    "whitespace_user_text": {"messages": [{"role": "user", "content": "  \n"}]},
    "empty_text_part": {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
    "empty_part_beside_text": {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": ""}, {"type": "text", "text": "x"}],
            }
        ]
    },
    "empty_assistant_turn": turns(("user", "a"), ("assistant", ""), ("user", "b")),
    "whitespace_final_assistant": {
        "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "  "}]
    },
    "trailing_space_final_assistant": {
        "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "Hi  "}]
    },
    "unicode_space_final_assistant": {
        "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "Hi\u3000"}]
    },
    "trailing_space_user": {"messages": [{"role": "user", "content": "hello  "}]},
    "empty_system": {
        "messages": [{"role": "system", "content": ""}, {"role": "user", "content": "a"}]
    },
    "only_system": {"messages": [{"role": "system", "content": "be brief"}]},
    "assistant_first": {
        "messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]
    },
    "five_stop_sequences": {"messages": HI, "stop": ["a", "b", "c", "d", "e"]},
    "stop_number": {"messages": HI, "stop": 5},
    "stop_object": {"messages": HI, "stop": {}},
    "stop_empty_string": {"messages": HI, "stop": ""},
    "stop_null_item": {"messages": HI, "stop": [None]},
    "stop_empty_item": {"messages": HI, "stop": [""]},
    "stop_whitespace_item": {"messages": HI, "stop": [" ", "x"]},
    "max_tokens_and_max_completion_tokens": {
        "messages": HI,
        "max_tokens": 10,
        "max_completion_tokens": 20,
    },
    "max_tokens_fraction": {"messages": HI, "max_tokens": 10.5},
    "max_tokens_integral_float": {"messages": HI, "max_tokens": 10.0},
    "max_tokens_1e30": {"messages": HI, "max_tokens": 1e30},
    "max_tokens_2_pow_63": {"messages": HI, "max_tokens": 2**63},
    "max_tokens_negative": {"messages": HI, "max_tokens": -1},
    "max_tokens_bool": {"messages": HI, "max_tokens": True},
    "temperature_string": {"messages": HI, "temperature": "0.5"},
    "temperature_bool": {"messages": HI, "temperature": True},
    "top_p_string": {"messages": HI, "top_p": "x"},
    "image_in_assistant_turn": turns(
        ("user", "a"), ("assistant", [{"type": "text", "text": "t"}, IMAGE]), ("user", "b")
    ),
    "image_in_system": turns(("system", [{"type": "text", "text": "s"}, IMAGE]), ("user", "b")),
    "image_media_type_parameter": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;charset=utf-8;base64,{PNG}"},
                    }
                ],
            }
        ]
    },
    "image_svg": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": f"data:image/svg+xml;base64,{PNG}"}}
                ],
            }
        ]
    },
    "header_injection_in_extra_headers": {"messages": HI, "extra_headers": {"x-a": "a\nb"}},
    "non_ascii_extra_header_value": {"messages": HI, "extra_headers": {"x-a": "caf\u00e9"}},
    "timeout_infinite": {"messages": HI, "timeout": math.inf},
    "timeout_huge": {"messages": HI, "timeout": 1e300},
    "api_key_with_newline": {"messages": HI, "api_key": "sk-a\nb"},
    "content_null": {"messages": [{"role": "user", "content": None}]},
    "messages_empty": {"messages": []},
    "messages_string": {"messages": "hello"},
    "role_missing": {"messages": [{"content": "x"}]},
    "role_unknown": {"messages": [{"role": "wizard", "content": "x"}]},
    "text_part_without_text": {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
    "text_part_number": {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
    "content_number": {"messages": [{"role": "user", "content": 5}]},
    "message_not_an_object": {"messages": ["hello"]},
    "lone_surrogate": {"messages": [{"role": "user", "content": "a\ud800b"}]},
}

SERVED = "rust"
# Where a case is served when it is not declined: (provider, case) -> decline code. Any pair not
# listed here is expected to be served by Rust.
DECLINED: dict[tuple[str, str], str] = {}


def _declined(providers: tuple[str, ...], cases: tuple[str, ...], code: str) -> None:
    for provider in providers:
        for case in cases:
            DECLINED[(provider, case)] = code


_NATIVE = ("anthropic", "bedrock")  # providers whose body the fast path builds itself
_declined(
    _NATIVE,
    (
        "empty_user_text",
        "whitespace_user_text",
        "empty_text_part",
        "empty_part_beside_text",
        "empty_assistant_turn",
        "whitespace_final_assistant",
        "trailing_space_final_assistant",
        "unicode_space_final_assistant",
        "empty_system",
    ),
    "blank_text",
)
_declined(_NATIVE, ("only_system",), "system_only")
_declined(
    _NATIVE,
    (
        "stop_number",
        "stop_object",
        "stop_empty_string",
        "stop_null_item",
        "max_tokens_fraction",
        "max_tokens_integral_float",
        "max_tokens_1e30",
        "max_tokens_2_pow_63",
        "max_tokens_bool",
        "temperature_string",
        "temperature_bool",
        "top_p_string",
    ),
    "param_type",
)
_declined(_NATIVE, ("image_in_assistant_turn",), "assistant_image")
_declined(_NATIVE, ("image_in_system",), "system_image")
_declined(("bedrock",), ("image_svg",), "image_type")
_declined(
    PROVIDERS,
    ("header_injection_in_extra_headers", "non_ascii_extra_header_value"),
    "extra_headers",
)

_declined(PROVIDERS, ("content_null",), "message_without_content")
_declined(PROVIDERS, ("timeout_infinite", "timeout_huge"), "timeout")
_declined(PROVIDERS, ("api_key_with_newline",), "credentials")
_declined(PROVIDERS, ("role_unknown",), "message_role")
_declined(
    PROVIDERS,
    (
        "messages_empty",
        "messages_string",
        "role_missing",
        "text_part_without_text",
        "text_part_number",
        "content_number",
        "message_not_an_object",
        "lone_surrogate",
    ),
    "malformed_message",
)

REQUEST_CASES = [
    pytest.param(provider, case, id=f"{provider}-{case}")
    for provider in PROVIDERS
    for case in REQUESTS
]


@pytest.mark.parametrize(("provider", "case"), REQUEST_CASES)
async def test_odd_requests_behave_like_litellm(
    upstream: RecordingUpstream, provider: str, case: str
) -> None:
    kwargs = {**deployment_kwargs(provider, upstream.url), **REQUESTS[case]}
    fast = await outcome(upstream, kwargs, rust=True)
    declines = litellm_fastpath.decline_counts()
    slow = await outcome(upstream, kwargs, rust=False)

    expected = DECLINED.get((provider, case))
    if expected is None:
        assert fast.served_by_rust, (declines, fast)
    else:
        assert declines == {expected: 1}
    assert_same(fast, slow)


# -- deliberate differences: refused before I/O, where LiteLLM sends or fails otherwise ---------

# (kwargs, the field the 400 names). LiteLLM puts NaN/Infinity into the JSON body or fails
# converting it (500); a NaN is never what the caller meant.
DELIBERATE: dict[str, tuple[dict[str, Any], str]] = {
    "temperature_nan": ({"temperature": math.nan}, "temperature"),
    "temperature_infinity": ({"temperature": math.inf}, "temperature"),
    "max_tokens_infinity": ({"max_tokens": -math.inf}, "max_tokens"),
    "top_p_1e400": ({"top_p": float("1e400")}, "top_p"),
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", DELIBERATE)
async def test_non_finite_numbers_are_a_400_naming_the_field(
    upstream: RecordingUpstream, provider: str, case: str
) -> None:
    params, field = DELIBERATE[case]
    kwargs = {**deployment_kwargs(provider, upstream.url), "messages": HI, **params}
    fast = await outcome(upstream, kwargs, rust=True)
    assert fast.error == ("BadRequestError", 400)
    assert f"{field} must be a finite number" in fast.message
    assert fast.requests == []


# -- Bedrock API keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "env_token", "expected"),
    [
        ("bedrock-key-123", None, "Bearer bedrock-key-123"),
        (None, "env-token-456", "Bearer env-token-456"),
        ("bedrock-key-123", "env-token-456", "Bearer bedrock-key-123"),
        ("", "env-token-456", "AWS4-HMAC-SHA256 Credential=AKIDTEST/"),
    ],
)
async def test_bedrock_api_key_is_a_bearer_token_like_litellm(
    upstream: RecordingUpstream,
    monkeypatch: pytest.MonkeyPatch,
    api_key: str | None,
    env_token: str | None,
    expected: str,
) -> None:
    if env_token is not None:
        monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", env_token)
    kwargs = {**deployment_kwargs("bedrock", upstream.url), "messages": HI}
    if api_key is not None:
        kwargs["api_key"] = api_key
    fast = await outcome(upstream, kwargs, rust=True)
    slow = await outcome(upstream, kwargs, rust=False)
    assert fast.served_by_rust
    assert_same(fast, slow)
    assert str(fast.requests[0][2]).startswith(expected)


async def test_bedrock_api_key_without_aws_credentials_is_served(
    upstream: RecordingUpstream,
) -> None:
    kwargs = {**deployment_kwargs("bedrock", upstream.url), "messages": HI, "api_key": "k"}
    del kwargs["aws_access_key_id"], kwargs["aws_secret_access_key"]
    fast = await outcome(upstream, kwargs, rust=True)
    slow = await outcome(upstream, kwargs, rust=False)
    assert fast.served_by_rust
    assert_same(fast, slow)


async def test_remote_image_on_bedrock_stays_in_python(upstream: RecordingUpstream) -> None:
    kwargs = {
        **deployment_kwargs("bedrock", upstream.url),
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": f"{upstream.url}/x.png"}}],
            }
        ],
    }
    # LiteLLM downloads the image itself (and refuses loopback addresses): its answer, not ours.
    with pytest.raises(Exception) as raised:
        await litellm.acompletion(**kwargs, rust=True, max_retries=0)
    assert litellm_fastpath.decline_counts() == {"image_url_remote": 1}
    assert not isinstance(raised.value, litellm_fastpath._native.FastpathError)


# -- broken 2xx answers ----------------------------------------------------------------------------

_PATHS = {
    "openai": "/chat/completions",
    "anthropic": "/v1/messages",
    "bedrock": "/model/x/converse",
}
_SUFFIX = {"openai": "/chat/completions", "anthropic": "/v1/messages", "bedrock": "/converse"}


def _good(provider: str) -> dict[str, Any]:
    return canned_response("POST", _PATHS[provider], b'{"model": "m"}')[1]


def _mutated(provider: str, change: Any) -> Reply:
    body = _good(provider)
    change(body)
    return Reply(json=body)


def _json(body: bytes) -> Reply:
    return Reply(body=body, headers={"content-type": "application/json"})


def _broken_replies(provider: str) -> dict[str, Reply]:
    replies = {
        "truncated_json": _json(json.dumps(_good(provider)).encode()[:30]),
        "html": Reply(body=b"<html>oops</html>", headers={"content-type": "text/html"}),
        "json_list": _json(b"[]"),
        "json_string": _json(b'"x"'),
        "empty_body": _json(b""),
        "no_content_204": Reply(status=204, body=b""),
    }
    if provider == "openai":
        replies |= {
            "no_choices": _mutated(provider, lambda b: b.pop("choices")),
            "choices_string": _mutated(provider, lambda b: b.update(choices="x")),
            "no_usage": _mutated(provider, lambda b: b.pop("usage")),
            "message_null": _mutated(provider, lambda b: b["choices"][0].update(message=None)),
            "usage_string": _mutated(provider, lambda b: b.update(usage="x")),
        }
    if provider == "anthropic":
        replies |= {
            "no_content": _mutated(provider, lambda b: b.pop("content")),
            "content_string": _mutated(provider, lambda b: b.update(content="x")),
            "no_usage": _mutated(provider, lambda b: b.pop("usage")),
            "usage_string": _mutated(provider, lambda b: b.update(usage="x")),
            "text_block_without_text": _mutated(provider, lambda b: b["content"][0].pop("text")),
            "text_not_a_string": _mutated(provider, lambda b: b["content"][0].update(text=5)),
            "no_stop_reason": _mutated(provider, lambda b: b.pop("stop_reason")),
            "unknown_block": _mutated(provider, lambda b: b["content"].append({"type": "x"})),
        }
    if provider == "bedrock":
        content = lambda b: b["output"]["message"]["content"]  # noqa: E731
        replies |= {
            "no_output": _mutated(provider, lambda b: b.pop("output")),
            "output_string": _mutated(provider, lambda b: b.update(output="x")),
            "no_usage": _mutated(provider, lambda b: b.pop("usage")),
            "usage_string": _mutated(provider, lambda b: b.update(usage="x")),
            "block_without_text": _mutated(provider, lambda b: content(b).__setitem__(0, {})),
            "text_not_a_string": _mutated(provider, lambda b: content(b)[0].update(text=5)),
            "no_stop_reason": _mutated(provider, lambda b: b.pop("stopReason")),
            "usage_without_total": _mutated(provider, lambda b: b["usage"].pop("totalTokens")),
        }
    return replies


FAULT_CASES = [
    pytest.param(provider, name, id=f"{provider}-{name}")
    for provider in PROVIDERS
    for name in _broken_replies(provider)
]


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic serializing LiteLLM's odd objects
@pytest.mark.parametrize(("provider", "name"), FAULT_CASES)
async def test_broken_answers_fail_like_litellm(
    upstream: RecordingUpstream, provider: str, name: str
) -> None:
    """Same exception class and status (what routers retry and cool down on), or the same
    response; the provider is called once on each arm."""
    kwargs = {**deployment_kwargs(provider, upstream.url), "messages": HI}
    reply = _broken_replies(provider)[name]
    upstream.set_default(_SUFFIX[provider], reply)
    fast = await outcome(upstream, kwargs, rust=True)
    slow = await outcome(upstream, kwargs, rust=False)
    assert litellm_fastpath.decline_counts() == {}
    assert len(fast.requests) == len(slow.requests) == 1
    assert fast.error == slow.error, (fast.message, slow.message)
    assert fast.response == slow.response
    if fast.error is None:
        assert fast.served_by_rust


# -- timeouts bound each wait, not the whole answer -----------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_slow_but_steady_answer_is_not_a_timeout(
    upstream: RecordingUpstream, provider: str
) -> None:
    kwargs = {**deployment_kwargs(provider, upstream.url), "messages": HI, "timeout": 0.5}
    upstream.set_default(_SUFFIX[provider], Reply(action="trickle", delay_s=0.2, pieces=6))
    fast = await outcome(upstream, kwargs, rust=True)
    slow = await outcome(upstream, kwargs, rust=False)
    assert fast.error is None, fast.message
    assert fast.served_by_rust
    assert_same(fast, slow)


# -- redirects -------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_redirect_is_not_followed_and_says_so(
    upstream: RecordingUpstream, provider: str
) -> None:
    kwargs = {**deployment_kwargs(provider, upstream.url), "messages": HI}
    upstream.enqueue(Reply(status=307, body=b"", headers={"location": "http://127.0.0.1:9/x"}))
    fast = await outcome(upstream, kwargs, rust=True)
    assert fast.error is not None
    assert len(fast.requests) == 1
    assert "redirect (HTTP 307)" in fast.message
    assert "does not follow redirects" in fast.message
