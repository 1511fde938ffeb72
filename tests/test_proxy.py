"""End to end through the real LiteLLM proxy: `rust: true` models against their plain twins.

One proxy process serves, for each provider, `plain-<provider>` and `rust-<provider>` (the same
`litellm_params` plus `rust: true`), all pointing at one recording upstream on loopback. Every
test sends the same request to both and compares what the client and the upstream saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import litellm_fastpath
from devtools.deployments import PROVIDERS, deployment_kwargs, twin_models
from devtools.processes import ProxyProcess
from devtools.proxy_logger import events_for, logged_proxy, wait_for_events
from devtools.upstream import Recorded, RecordingUpstream, Reply
from tests.conftest import FASTPATH_HEADERS, assert_rust_field_refused
from tests.test_tools import anthropic_answer, converse_answer, tool_use, tool_use_block

pytestmark = [pytest.mark.proxy, pytest.mark.usefixtures("upstream")]

CHAT_PATHS = ("/chat/completions", "/v1/chat/completions")
# A valid 1x1 RGB PNG, so every provider's image handling accepts it.
PNG_DATA_URL = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
HI = [{"role": "user", "content": "hi"}]
# Client-visible fields that differ on every call, or by alias name (the proxy echoes the alias).
VOLATILE_RESPONSE_FIELDS = ("id", "created", "model")
CLIENT_MAY_SEND_RUST = {"configurable_clientside_auth_params": ["rust"]}
LITELLM_HEADERS = (
    "x-litellm-model-id",
    "x-litellm-response-cost",
    "x-litellm-overhead-duration-ms",
)
# What each provider answers with when it rate-limits a caller.
RATE_LIMITED: dict[str, Reply] = {
    "openai": Reply(
        status=429,
        json={
            "error": {
                "message": "Rate limit reached",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
    ),
    "anthropic": Reply(
        status=429,
        json={"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}},
    ),
    "bedrock": Reply(
        status=429,
        json={"message": "Too many requests, please wait."},
        headers={"x-amzn-ErrorType": "ThrottlingException"},
    ),
}


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def proxy(upstream_server: RecordingUpstream, log: Path) -> Iterator[ProxyProcess]:
    model_list = []
    for provider in PROVIDERS:
        model_list += twin_models(provider, deployment_kwargs(provider, upstream_server.url))
    # Deployments that let callers send `rust` (LiteLLM bans it in bodies unless opted in), so
    # the accelerator callback, not LiteLLM's ban, is what keeps the switch with the operator.
    opt_in = {**deployment_kwargs("openai", upstream_server.url), **CLIENT_MAY_SEND_RUST}
    model_list += [
        {"model_name": f"open-{m['model_name']}", "litellm_params": m["litellm_params"]}
        for m in twin_models("openai", opt_in)
    ]
    server = logged_proxy(model_list, log)
    with server:
        yield server


# -- helpers -----------------------------------------------------------------------------------


def chat(
    proxy: ProxyProcess, model: str, path: str = "/chat/completions", **body: Any
) -> httpx.Response:
    return proxy.post(path, json={"model": model, "messages": HI, **body})


def call_once(
    proxy: ProxyProcess, upstream: RecordingUpstream, model: str, body: dict[str, Any]
) -> tuple[httpx.Response, Recorded]:
    """One proxy call that must make exactly one upstream request."""
    upstream.clear()
    resp = proxy.post("/chat/completions", json={"model": model, **body})
    assert resp.status_code == 200, f"{model}: {resp.text}\n{proxy.log_text()[-3000:]}"
    requests = upstream.requests
    assert len(requests) == 1, f"{model}: {len(requests)} upstream requests"
    return resp, requests[0]


def header_names(resp: httpx.Response) -> set[str]:
    return {name.lower() for name in resp.headers}


def answering(resp: httpx.Response) -> Callable[[dict[str, Any]], bool]:
    """Whether a logged event is of the request that got `resp` (by LiteLLM's call id)."""
    call_id = resp.headers["x-litellm-call-id"]
    return lambda event: (event.get("payload") or {}).get("litellm_call_id") == call_id


def is_rust(resp: httpx.Response) -> bool:
    return resp.headers.get("x-litellm-rust") == "true"


def client_view(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    for name in VOLATILE_RESPONSE_FIELDS:
        body.pop(name, None)
    return body


def clear_log(log: Path) -> None:
    log.write_text("")


# -- headers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", CHAT_PATHS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_fastpath_headers_only_on_rust_models(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str, path: str
) -> None:
    rust = chat(proxy, f"rust-{provider}", path)
    plain = chat(proxy, f"plain-{provider}", path)
    assert rust.status_code == 200, rust.text
    assert plain.status_code == 200, plain.text
    assert rust.headers.get("x-litellm-rust") == "true"
    assert rust.headers.get("x-litellm-fastpath") == litellm_fastpath.__version__
    assert "x-litellm-rust" not in plain.headers
    assert "x-litellm-fastpath" not in plain.headers
    assert len(upstream.requests) == 2


@pytest.mark.parametrize("path", CHAT_PATHS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_litellm_headers_on_both_paths(proxy: ProxyProcess, provider: str, path: str) -> None:
    responses = {kind: chat(proxy, f"{kind}-{provider}", path) for kind in ("plain", "rust")}
    missing = {
        kind: [h for h in LITELLM_HEADERS if h not in resp.headers]
        for kind, resp in responses.items()
    }
    assert missing == {"plain": [], "rust": []}
    rust_cost = float(responses["rust"].headers["x-litellm-response-cost"])
    assert rust_cost > 0
    assert rust_cost == float(responses["plain"].headers["x-litellm-response-cost"])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_response_header_names_match_plain(proxy: ProxyProcess, provider: str) -> None:
    rust = chat(proxy, f"rust-{provider}")
    plain = chat(proxy, f"plain-{provider}")
    assert header_names(rust) - FASTPATH_HEADERS == header_names(plain)


# -- differential: same request, same wire bytes, same answer ----------------------------------

DIFFERENTIAL_BODIES: dict[str, dict[str, Any]] = {
    "text_with_params": {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello."},
        ],
        "temperature": 0.3,
        "max_tokens": 50,
        "stop": ["END"],
    },
    "image_data_url": {
        "messages": [
            {"role": "system", "content": "You describe images."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image?"},
                    {"type": "image_url", "image_url": {"url": PNG_DATA_URL}},
                ],
            },
        ],
        "max_tokens": 20,
    },
}


@pytest.mark.parametrize("case", sorted(DIFFERENTIAL_BODIES))
@pytest.mark.parametrize("provider", PROVIDERS)
def test_rust_and_plain_are_indistinguishable(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str, case: str
) -> None:
    body = DIFFERENTIAL_BODIES[case]
    plain_resp, plain_req = call_once(proxy, upstream, f"plain-{provider}", body)
    rust_resp, rust_req = call_once(proxy, upstream, f"rust-{provider}", body)
    assert is_rust(rust_resp) and not is_rust(plain_resp)
    assert (rust_req.method, rust_req.path, rust_req.query) == (
        plain_req.method,
        plain_req.path,
        plain_req.query,
    )
    assert rust_req.json() == plain_req.json()
    assert client_view(rust_resp) == client_view(plain_resp)


# -- tools and structured output (OpenAI-compatible) ------------------------------------------

TOOL_CALL_ANSWER = {
    "id": "chatcmpl-tools",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


ANTHROPIC_TOOL_ANSWER = anthropic_answer(
    {"type": "text", "text": "Again:"}, tool_use("toolu_9", "get_weather", {"city": "Nice"})
)
BEDROCK_TOOL_ANSWER = converse_answer(tool_use_block("t9", "get_weather", {"city": "Nice"}))
# Per provider: the assistant turn's content, the request's tool params, the provider's answer.
TOOL_CASES: dict[str, tuple[str | None, dict[str, Any], dict[str, Any]]] = {
    "openai": (
        None,
        {"tool_choice": "auto", "response_format": {"type": "json_object"}},
        TOOL_CALL_ANSWER,
    ),
    "anthropic": (
        "Checking.",
        {"tool_choice": "required", "parallel_tool_calls": False},
        ANTHROPIC_TOOL_ANSWER,
    ),
    "bedrock": (None, {"tool_choice": "auto"}, BEDROCK_TOOL_ANSWER),
}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_calling_through_the_proxy_matches_plain(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str
) -> None:
    content, params, answer = TOOL_CASES[provider]
    calls = TOOL_CALL_ANSWER["choices"][0]["message"]["tool_calls"]
    body = {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [WEATHER_TOOL],
        **params,
    }
    views = []
    for model in (f"plain-{provider}", f"rust-{provider}"):
        upstream.enqueue(Reply(json=answer))
        resp, request = call_once(proxy, upstream, model, body)
        views.append((is_rust(resp), request.json(), client_view(resp)))
    (plain_rust, plain_sent, plain_view), (rust_rust, rust_sent, rust_view) = views
    assert rust_rust and not plain_rust
    assert rust_sent == plain_sent
    assert rust_view == plain_view
    choice = rust_view["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_openai_sdk_tool_calling_against_a_rust_model(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    import openai

    from devtools.processes import MASTER_KEY

    upstream.enqueue(Reply(json=TOOL_CALL_ANSWER))
    client = openai.OpenAI(base_url=proxy.url, api_key=MASTER_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="rust-openai",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert raw.headers.get("x-litellm-rust") == "true"
    completion = raw.parse()
    (call,) = completion.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert completion.choices[0].finish_reason == "tool_calls"


# -- logging callbacks -------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_success_callback_matches_plain(proxy: ProxyProcess, log: Path, provider: str) -> None:
    rust, plain = chat(proxy, f"rust-{provider}"), chat(proxy, f"plain-{provider}")
    assert is_rust(rust) and not is_rust(plain)
    # This request's events (an earlier test's may still be landing on a busy machine).
    rust_events = wait_for_events(log, answering(rust), 1)
    plain_events = wait_for_events(log, answering(plain), 1)
    assert [e["event"] for e in rust_events] == ["success"]
    assert [e["event"] for e in plain_events] == ["success"]
    (rust_event,), (plain_event,) = rust_events, plain_events
    assert rust_event["rust"] is True and plain_event["rust"] is False
    assert rust_event["usage"] == {"prompt_tokens": 11, "completion_tokens": 7}
    assert rust_event["response_cost"] > 0
    assert rust_event["response_cost"] == plain_event["response_cost"]
    assert rust_event["model"] == plain_event["model"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_upstream_429_is_one_request_and_a_failure_event(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    log: Path,
    provider: str,
) -> None:
    clear_log(log)
    upstream.enqueue(RATE_LIMITED[provider])
    resp = chat(proxy, f"rust-{provider}")
    assert resp.status_code == 429, resp.text
    assert len(upstream.requests) == 1
    assert "x-litellm-rust" not in resp.headers
    events = events_for(log, f"rust-{provider}", 1)
    assert [(e["event"], e["status_code"]) for e in events] == [("failure", 429)]
    assert events[0]["exception"] == "RateLimitError"


def rate_limited(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str
) -> dict[str, httpx.Response]:
    """The proxy's answers when the upstream rate-limits plain-<provider> and rust-<provider>."""
    responses = {}
    for kind in ("plain", "rust"):
        upstream.clear()
        upstream.enqueue(RATE_LIMITED[provider])
        resp = chat(proxy, f"{kind}-{provider}")
        assert resp.status_code == 429, resp.text
        assert len(upstream.requests) == 1
        responses[kind] = resp
    return responses


@pytest.mark.parametrize("provider", PROVIDERS)
def test_upstream_429_error_body_matches_plain(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str
) -> None:
    errors = {}
    for kind, resp in rate_limited(proxy, upstream, provider).items():
        error = resp.json()["error"]
        # The proxy names the model group (which differs by alias) in the message.
        error["message"] = error["message"].replace(f"'{kind}-{provider}'", "'<group>'")
        errors[kind] = error
    assert errors["rust"] == errors["plain"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_upstream_429_header_names_match_plain(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str
) -> None:
    responses = rate_limited(proxy, upstream, provider)
    assert header_names(responses["rust"]) == header_names(responses["plain"])


# -- the switch belongs to the operator --------------------------------------------------------


@pytest.mark.parametrize(("model", "value"), [("plain-openai", True), ("rust-openai", False)])
def test_caller_cannot_send_rust_in_the_body(
    proxy: ProxyProcess, upstream: RecordingUpstream, model: str, value: bool
) -> None:
    assert_rust_field_refused(
        proxy, upstream, "/chat/completions", {"model": model, "messages": HI, "rust": value}
    )


def test_deployment_allowing_clientside_params_is_still_rust(proxy: ProxyProcess) -> None:
    # `configurable_clientside_auth_params` is proxy auth configuration; it never reaches the
    # provider, so it must not keep a `rust: true` deployment off the fast path.
    assert is_rust(chat(proxy, "open-rust-openai"))
    assert not is_rust(chat(proxy, "open-plain-openai"))


def test_rust_in_body_is_ignored_where_litellm_allows_it(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    # Only meaningful once the deployment above is served by Rust at all.
    on = chat(proxy, "open-plain-openai", rust=True)
    off = chat(proxy, "open-rust-openai", rust=False)
    assert (on.status_code, off.status_code) == (200, 200), (on.text, off.text)
    assert not is_rust(on)
    assert is_rust(off)
    requests = upstream.requests
    assert len(requests) == 2
    assert all("rust" not in r.json() for r in requests)


def test_rust_model_still_rust_after_rejected_body_switch(proxy: ProxyProcess) -> None:
    assert chat(proxy, "rust-openai", rust=False).status_code >= 400
    assert is_rust(chat(proxy, "rust-openai"))
    assert not is_rust(chat(proxy, "plain-openai"))


# -- requests the Rust path leaves to Python or refuses ----------------------------------------


def _openai_sse(*deltas: dict[str, Any]) -> bytes:
    events = []
    for i, delta in enumerate(deltas):
        chunk = {
            "id": "chatcmpl-stream",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "finish_reason": "stop" if i == len(deltas) - 1 else None,
                }
            ],
        }
        events.append(f"data: {json.dumps(chunk)}\n\n")
    return "".join([*events, "data: [DONE]\n\n"]).encode()


def test_streaming_on_rust_openai_model_is_served_by_rust(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    upstream.enqueue(
        Reply(
            body=_openai_sse({"role": "assistant", "content": "Hel"}, {"content": "lo"}),
            headers={"Content-Type": "text/event-stream"},
        )
    )
    # Byte-for-byte equality with the plain model: tests/test_streaming_proxy.py.
    resp = chat(proxy, "rust-openai", stream=True)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-litellm-rust"] == "true"
    assert "x-litellm-fastpath" in resp.headers
    (request,) = upstream.requests
    assert request.json()["stream"] is True
    text = ""
    for line in resp.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line.removeprefix("data: "))["choices"]:
                text += choice["delta"].get("content") or ""
    assert text == "Hello"
    assert resp.text.rstrip().endswith("data: [DONE]")


BAD_IMAGE = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@not-base64!!"}},
        ],
    }
]


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
def test_invalid_base64_image_is_a_400_without_upstream_call(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str
) -> None:
    resp = proxy.post(
        "/chat/completions", json={"model": f"rust-{provider}", "messages": BAD_IMAGE}
    )
    assert resp.status_code == 400, resp.text
    message = resp.json()["error"]["message"]
    assert "base64" in message, message
    assert upstream.requests == []


def test_invalid_base64_image_to_openai_is_forwarded_like_python(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    # OpenAI takes image URLs as they are; LiteLLM forwards them unchecked, and so does Rust.
    body = {"messages": BAD_IMAGE}
    _, plain_req = call_once(proxy, upstream, "plain-openai", body)
    rust_resp, rust_req = call_once(proxy, upstream, "rust-openai", body)
    assert is_rust(rust_resp)
    assert rust_req.json()["messages"] == plain_req.json()["messages"]


# -- odd bodies: the same answer from both models ------------------------------------------------

# Raw JSON as a client might send it: the proxy's parser also accepts NaN and Infinity.
ODD_BODIES: dict[str, str] = {
    "empty_text": '"messages": [{"role": "user", "content": ""}]',
    "trailing_space_final_assistant": (
        '"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b "}]'
    ),
    "only_system": '"messages": [{"role": "system", "content": "s"}]',
    "five_stop_sequences": '"messages": [{"role": "user", "content": "hi"}], '
    '"stop": ["a", "b", "c", "d", "e"]',
    "max_tokens_fraction": '"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10.5',
    "max_tokens_and_max_completion_tokens": '"messages": [{"role": "user", "content": "hi"}], '
    '"max_tokens": 10, "max_completion_tokens": 20',
    "temperature_string": '"messages": [{"role": "user", "content": "hi"}], "temperature": "0.5"',
    "messages_not_a_list": '"messages": "hello"',
    "role_missing": '"messages": [{"content": "hi"}]',
}


def _raw_chat(proxy: ProxyProcess, model: str, fields: str) -> httpx.Response:
    return proxy.request(
        "POST",
        "/chat/completions",
        content=f'{{"model": "{model}", {fields}}}',
        headers={"content-type": "application/json"},
        timeout=60.0,
    )


def _json_or_bytes(body: bytes) -> Any:
    # A request LiteLLM sends with an invalid header reaches the upstream garbled.
    try:
        return json.loads(body)
    except ValueError:
        return body


def _comparable_answer(resp: httpx.Response) -> Any:
    try:
        body = resp.json()
    except ValueError:
        return resp.text
    if resp.status_code == 200:
        return client_view(resp)
    # Error messages name the model group the client asked for; that is the one difference.
    return json.loads(json.dumps(body).replace("rust-", "MODEL-").replace("plain-", "MODEL-"))


@pytest.mark.parametrize("case", ODD_BODIES)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_odd_bodies_answer_like_the_plain_model(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str, case: str
) -> None:
    answers = []
    for model in (f"plain-{provider}", f"rust-{provider}"):
        upstream.clear()
        resp = _raw_chat(proxy, model, ODD_BODIES[case])
        sent = [(r.path, _json_or_bytes(r.body)) for r in upstream.requests]
        answers.append((resp.status_code, _comparable_answer(resp), sent))
    assert answers[0] == answers[1]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_invalid_extra_header_name_is_left_to_litellm(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str
) -> None:
    """Was a 500 carrying a raw native error; now LiteLLM handles it as it would without
    `rust: true` (it sends the header as is, and the upstream's answer to that is not ours)."""
    resp = _raw_chat(
        proxy,
        f"rust-{provider}",
        '"messages": [{"role": "user", "content": "hi"}], "extra_headers": {"bad header": "x"}',
    )
    assert "x-litellm-fastpath" not in resp.headers
    assert "_native" not in resp.text and "InvalidRequestError" not in resp.text


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_temperature_is_a_400_naming_the_field(
    proxy: ProxyProcess, upstream: RecordingUpstream, provider: str, value: str
) -> None:
    resp = _raw_chat(
        proxy,
        f"rust-{provider}",
        f'"messages": [{{"role": "user", "content": "hi"}}], "temperature": {value}',
    )
    assert resp.status_code == 400, resp.text
    assert "temperature must be a finite number" in resp.json()["error"]["message"]
    assert upstream.requests == []
