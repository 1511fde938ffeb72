"""`/v1/messages` end to end through the real LiteLLM proxy: `rust: true` models against their
plain twins (same `litellm_params`), one recording upstream; raw HTTP and the official
`anthropic` SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from devtools.deployments import deployment_kwargs, twin_models
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.proxy_logger import events_for, logged_proxy
from devtools.upstream import RecordingUpstream, Reply
from tests import messages_cases as cases
from tests.conftest import VOLATILE_HEADERS as BASE_VOLATILE
from tests.conftest import assert_rust_field_refused, stable_headers
from tests.test_messages import sent

pytestmark = [pytest.mark.proxy, pytest.mark.usefixtures("upstream")]

# Headers whose values differ on every call or name the model group.
VOLATILE_HEADERS = BASE_VOLATILE | {
    "x-litellm-model-id",
    "x-litellm-model-group",
    "x-litellm-callback-duration-ms",
    "x-litellm-model-api-base",
}
ERROR_STATUSES = (400, 401, 429, 500, 529)
# One model group per error case: the router cools a group down after failures.
GROUPS = (
    "claude",
    "claude-sdk",
    *(f"err-{status}-{stream}" for status in ERROR_STATUSES for stream in (False, True)),
)


@pytest.fixture(scope="module")
def proxy(upstream_server: RecordingUpstream, log: Path) -> Iterator[ProxyProcess]:
    params = deployment_kwargs("anthropic", upstream_server.url)
    model_list = [entry for group in GROUPS for entry in twin_models(group, params)]
    with logged_proxy(model_list, log) as server:
        yield server


def both(
    proxy: ProxyProcess,
    upstream: RecordingUpstream,
    body: dict[str, Any],
    reply: Reply,
    group: str = "claude",
    headers: dict[str, str] | None = None,
) -> list[tuple[httpx.Response, list[Any]]]:
    out = []
    for model in (f"rust-{group}", f"plain-{group}"):
        upstream.clear()
        upstream.enqueue(reply)
        resp = proxy.post("/v1/messages", json={"model": model, **body}, headers=headers)
        out.append((resp, [sent(r) for r in upstream.requests]))
    return out


def client_json(resp: httpx.Response) -> Any:
    body = json.loads(resp.content)
    if isinstance(body, dict):
        body.pop("model", None)  # the proxy stamps the model group's name
    return body


def hi(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, **extra}


@pytest.mark.parametrize(
    "shape",
    ["text", "coding_agent", "tools", "thinking", "beta_header"],
)
def test_json_answers_match_the_plain_model(
    proxy: ProxyProcess, upstream: RecordingUpstream, shape: str
) -> None:
    body, headers = {
        "text": (hi(), None),
        "coding_agent": (cases.coding_agent_request(), None),
        "tools": (hi(tools=[cases.tool(i) for i in range(20)], tool_choice={"type": "any"}), None),
        "thinking": (
            hi(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}),
            None,
        ),
        "beta_header": (hi(), {"anthropic-beta": "b-2,a-1", "anthropic-version": "2023-06-01"}),
    }[shape]
    (rust, rust_sent), (plain, plain_sent) = both(
        proxy, upstream, body, Reply(json=cases.tool_answer()), headers=headers
    )
    assert rust.status_code == plain.status_code == 200, rust.text
    assert rust.headers["x-litellm-rust"] == "true"
    assert "x-litellm-rust" not in plain.headers
    assert rust_sent == plain_sent and len(rust_sent) == 1
    assert client_json(rust) == client_json(plain)
    assert json.loads(rust.content)["model"] == "rust-claude"
    assert stable_headers(rust, VOLATILE_HEADERS) == stable_headers(plain, VOLATILE_HEADERS)
    assert float(rust.headers["x-litellm-response-cost"]) > 0


@pytest.mark.parametrize("pieces", [1, 100, 10_000])
def test_streams_match_the_plain_model(
    proxy: ProxyProcess, upstream: RecordingUpstream, pieces: int
) -> None:
    raw = cases.text_stream(pieces)
    reply = Reply(body=raw, headers={"content-type": "text/event-stream"})
    (rust, rust_sent), (plain, plain_sent) = both(proxy, upstream, hi(stream=True), reply)
    assert rust.status_code == plain.status_code == 200
    assert rust.headers["x-litellm-rust"] == "true"
    assert rust_sent == plain_sent
    # The proxy restamps `message_start` with the model group's name; the rest is the bytes.
    assert rust.content.replace(b"rust-claude", b"X") == plain.content.replace(
        b"plain-claude", b"X"
    )
    assert stable_headers(rust, VOLATILE_HEADERS) == stable_headers(plain, VOLATILE_HEADERS)


def test_tool_and_thinking_streams_match(proxy: ProxyProcess, upstream: RecordingUpstream) -> None:
    raw = b"".join(cases.tool_stream_events())
    reply = Reply(
        body=raw, headers={"content-type": "text/event-stream"}, action="trickle", pieces=40
    )
    (rust, _), (plain, _) = both(
        proxy, upstream, cases.coding_agent_request() | {"stream": True}, reply
    )
    assert rust.headers["x-litellm-rust"] == "true"
    assert rust.content.replace(b"rust-claude", b"X") == plain.content.replace(
        b"plain-claude", b"X"
    )


@pytest.mark.parametrize("status", ERROR_STATUSES)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_match_the_plain_model(
    proxy: ProxyProcess, upstream: RecordingUpstream, status: int, stream: bool
) -> None:
    error = {"type": "error", "error": {"type": "api_error", "message": f"upstream said {status}"}}
    (rust, rust_sent), (plain, plain_sent) = both(
        proxy,
        upstream,
        hi(stream=stream),
        Reply(status=status, json=error),
        group=f"err-{status}-{stream}",
    )
    assert rust.status_code == plain.status_code
    assert len(rust_sent) == len(plain_sent) == 1
    assert client_json(rust) == json.loads(plain.content.replace(b"plain-", b"rust-"))


def test_bad_bodies_are_answered_like_the_plain_model(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    for body in (
        {"messages": [{"role": "user", "content": "hi"}]},
        hi(max_tokens="many"),
        hi(messages="not a list"),
        hi(messages=[{"role": "robot", "content": "x"}]),
        hi(temperature="hot"),
    ):
        (rust, _), (plain, _) = both(proxy, upstream, body, Reply(json=cases.answer()))
        assert rust.status_code == plain.status_code, (body, rust.text, plain.text)
        assert rust.content.replace(b"rust-", b"") == plain.content.replace(b"plain-", b""), body


@pytest.mark.parametrize(("model", "value"), [("plain-claude", True), ("rust-claude", False)])
def test_a_caller_cannot_switch_the_fast_path(
    proxy: ProxyProcess, upstream: RecordingUpstream, model: str, value: bool
) -> None:
    assert_rust_field_refused(
        proxy, upstream, "/v1/messages", {"model": model, "rust": value, **hi()}
    )


def test_every_call_is_logged_once_with_the_plain_models_cost(
    proxy: ProxyProcess, upstream: RecordingUpstream, log: Path
) -> None:
    raw = b"".join(cases.tool_stream_events())
    for model in ("rust-claude-sdk", "plain-claude-sdk"):
        for stream in (False, True):
            reply = (
                Reply(body=raw, headers={"content-type": "text/event-stream"})
                if stream
                else Reply(json=cases.tool_answer())
            )
            upstream.enqueue(reply)
            assert (
                proxy.post("/v1/messages", json={"model": model, **hi(stream=stream)}).status_code
                == 200
            )
    rust = events_for(log, "rust-claude-sdk", 2)
    plain = events_for(log, "plain-claude-sdk", 2)
    assert len(rust) == len(plain) == 2
    assert [e["response_cost"] for e in rust] == [e["response_cost"] for e in plain]
    assert [e["usage"] for e in rust] == [e["usage"] for e in plain]
    assert all(e["event"] == "success" and e["response_cost"] > 0 for e in rust)


def test_the_anthropic_sdk_works_against_a_rust_model(
    proxy: ProxyProcess, upstream: RecordingUpstream
) -> None:
    with anthropic.Anthropic(base_url=proxy.url, api_key=MASTER_KEY, max_retries=0) as client:
        _use_the_sdk(client, upstream)


def _use_the_sdk(client: anthropic.Anthropic, upstream: RecordingUpstream) -> None:
    upstream.enqueue(Reply(json=cases.tool_answer()))
    raw = client.messages.with_raw_response.create(
        model="rust-claude-sdk",
        max_tokens=256,
        messages=[{"role": "user", "content": "read main.rs"}],
        tools=[cases.tool(0)],  # type: ignore[list-item]
    )
    message = raw.parse()
    assert raw.headers["x-litellm-rust"] == "true"
    assert message.stop_reason == "tool_use"
    assert message.content[-1].input == {"path": "src/main.rs", "limit": 1e16}

    upstream.enqueue(
        Reply(
            body=b"".join(cases.tool_stream_events()), headers={"content-type": "text/event-stream"}
        )
    )
    with client.messages.stream(
        model="rust-claude-sdk", max_tokens=256, messages=[{"role": "user", "content": "go"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Let me read it ✓"
    assert final.content[2].input == {"path": "a.rs"}
    assert final.usage.output_tokens == 40
