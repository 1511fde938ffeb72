"""Errors on the Rust path are the LiteLLM exceptions LiteLLM's own Python path raises.

Every upstream fault is injected by the recording upstream on loopback; the same call then goes
once through `rust=True` and once through LiteLLM's Python path, which is the specification.
The Rust path makes exactly one provider request per call: it never retries.
"""

from __future__ import annotations

import re
import socket
import time
from typing import Any

import litellm
import pytest

import litellm_fastpath
from devtools.deployments import PROVIDERS, deployment_kwargs
from devtools.upstream import RecordingUpstream, Reply

STATUSES = (400, 401, 403, 404, 408, 422, 429, 500, 503)

# What each provider really sends with an error status.
ERROR_BODIES: dict[str, dict[str, Any]] = {
    "anthropic": {"type": "error", "error": {"type": "api_error", "message": "boom"}},
    "bedrock": {"message": "boom"},
    "openai": {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}},
}

USER_MESSAGES = [{"role": "user", "content": "hi"}]

API_KEY_SECRET = "sk-SECRET-123"
AWS_SECRET = "AWS-SECRET-XYZ"


@pytest.fixture(autouse=True)
def quiet_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    # LiteLLM prints a "Give Feedback" banner for every mapped exception; it changes nothing else.
    monkeypatch.setattr(litellm, "suppress_debug_info", True)


def closed_port_url() -> str:
    """A loopback URL nobody listens on: bind an ephemeral port, then release it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


async def raised_by(*, rust: bool, **kwargs: Any) -> Exception:
    """The exception `litellm.acompletion` raises for this call (the call must fail)."""
    if rust:
        kwargs["rust"] = True
    kwargs.setdefault("messages", USER_MESSAGES)
    try:
        response = await litellm.acompletion(max_retries=0, **kwargs)
    except Exception as exc:
        return exc
    pytest.fail(f"expected an exception, got {response!r}")


def is_litellm_exception(exc: BaseException) -> bool:
    return type(exc).__module__ == "litellm.exceptions"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}(status={getattr(exc, 'status_code', None)}): {exc}"


def assert_admitted() -> None:
    """The rust=True call really ran in Rust: nothing was declined to LiteLLM."""
    assert litellm_fastpath.decline_counts() == {}


# -- upstream status errors ----------------------------------------------------------------------


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_status_error_matches_python_path(
    upstream: RecordingUpstream, provider: str, status: int
) -> None:
    kwargs = deployment_kwargs(provider, upstream.url)

    upstream.enqueue(Reply(status=status, json=ERROR_BODIES[provider]))
    rust_exc = await raised_by(rust=True, **kwargs)
    assert_admitted()
    assert len(upstream.requests) == 1, "the Rust path must not retry"

    upstream.reset()
    upstream.enqueue(Reply(status=status, json=ERROR_BODIES[provider]))
    python_exc = await raised_by(rust=False, **kwargs)

    assert type(rust_exc) is type(python_exc), (
        f"rust {describe(rust_exc)} / python {describe(python_exc)}"
    )
    assert rust_exc.status_code == python_exc.status_code  # type: ignore[attr-defined]
    # Nothing in these messages varies between calls: they must be identical.
    assert str(rust_exc) == str(python_exc)


# -- timeouts ------------------------------------------------------------------------------------

_TIME_TAKEN = re.compile(r"time taken=\d+(?:\.\d+)? seconds")


def normalized_timeout_message(exc: BaseException) -> str:
    # LiteLLM reports the measured duration ("time taken=0.503 seconds"); only that varies.
    return _TIME_TAKEN.sub("time taken=<t> seconds", str(exc))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_timeout_matches_python_path(upstream: RecordingUpstream, provider: str) -> None:
    kwargs = deployment_kwargs(provider, upstream.url)

    upstream.enqueue(Reply(action="stall", delay_s=5))
    started = time.monotonic()
    rust_exc = await raised_by(rust=True, timeout=0.5, **kwargs)
    elapsed = time.monotonic() - started
    assert_admitted()
    assert len(upstream.requests) == 1
    assert elapsed < 3.0

    upstream.reset()
    upstream.enqueue(Reply(action="stall", delay_s=5), Reply(action="stall", delay_s=5))
    python_exc = await raised_by(rust=False, timeout=0.5, **kwargs)

    assert isinstance(python_exc, litellm.Timeout), describe(python_exc)
    assert type(rust_exc) is type(python_exc), (
        f"rust {describe(rust_exc)} / python {describe(python_exc)}"
    )
    assert rust_exc.status_code == python_exc.status_code == 408  # type: ignore[attr-defined]
    assert normalized_timeout_message(rust_exc) == normalized_timeout_message(python_exc)


# -- transport failures --------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_connection_refused_matches_python_path(provider: str) -> None:
    kwargs = deployment_kwargs(provider, closed_port_url())

    rust_exc = await raised_by(rust=True, **kwargs)
    assert_admitted()
    python_exc = await raised_by(rust=False, **kwargs)

    # Python's message embeds aiohttp's SSL context object address, so only class and status
    # can be compared.
    assert type(rust_exc) is type(python_exc), (
        f"rust {describe(rust_exc)} / python {describe(python_exc)}"
    )
    assert rust_exc.status_code == python_exc.status_code  # type: ignore[attr-defined]


@pytest.mark.parametrize("action", ["disconnect", "disconnect_mid_body"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_upstream_disconnect_is_one_attempt(
    upstream: RecordingUpstream, provider: str, action: Any
) -> None:
    kwargs = deployment_kwargs(provider, upstream.url)

    # Two faulty replies: a (wrongly) retrying client must not be rescued by a default 200.
    upstream.enqueue(Reply(action=action), Reply(action=action))
    rust_exc = await raised_by(rust=True, **kwargs)
    assert_admitted()
    assert len(upstream.requests) == 1, "the Rust path must not retry"
    assert is_litellm_exception(rust_exc), describe(rust_exc)

    upstream.reset()
    upstream.enqueue(Reply(action=action), Reply(action=action))
    python_exc = await raised_by(rust=False, **kwargs)
    # LiteLLM's own transport may retry once; only class and status are comparable (Python's
    # message is aiohttp's wording, e.g. "Server disconnected").
    assert type(rust_exc) is type(python_exc), (
        f"rust {describe(rust_exc)} / python {describe(python_exc)}"
    )
    assert rust_exc.status_code == python_exc.status_code  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_unparsable_success_body(upstream: RecordingUpstream, provider: str) -> None:
    upstream.enqueue(Reply(status=200, body=b"not json"))
    rust_exc = await raised_by(rust=True, **deployment_kwargs(provider, upstream.url))
    assert_admitted()
    assert len(upstream.requests) == 1
    assert is_litellm_exception(rust_exc), describe(rust_exc)


# -- malformed input: rejected before any I/O ----------------------------------------------------

_IMAGE = "image_url"
MALFORMED: dict[str, tuple[dict[str, Any], str]] = {
    "image data URL without base64": (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": _IMAGE, _IMAGE: {"url": "data:image/png,abc"}}],
                }
            ]
        },
        "base64",
    ),
    "image with invalid base64 characters": (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": _IMAGE, _IMAGE: {"url": "data:image/png;base64,@@@!"}}],
                }
            ]
        },
        "base64",
    ),
}

# OpenAI receives images verbatim (LiteLLM's Python path forwards them unchecked too). Other odd
# input declines to LiteLLM (tests/test_parity.py); these two are the deliberate 400s.
MALFORMED_CASES = [
    pytest.param(provider, case, id=f"{provider}-{case}")
    for provider in ("anthropic", "bedrock")
    for case in MALFORMED
]


@pytest.mark.parametrize(("provider", "case"), MALFORMED_CASES)
async def test_malformed_input_is_bad_request_without_io(
    upstream: RecordingUpstream, provider: str, case: str
) -> None:
    call, expected = MALFORMED[case]
    kwargs = deployment_kwargs(provider, upstream.url)
    if provider == "bedrock":
        kwargs["aws_secret_access_key"] = AWS_SECRET
    else:
        kwargs["api_key"] = API_KEY_SECRET

    exc = await raised_by(rust=True, **kwargs, **call)

    assert_admitted()
    assert upstream.requests == []
    assert isinstance(exc, litellm.BadRequestError), describe(exc)
    assert exc.status_code == 400
    assert expected in str(exc)
    for text in (str(exc), repr(exc)):
        assert API_KEY_SECRET not in text
        assert AWS_SECRET not in text


@pytest.mark.parametrize(
    ("call", "sent"), [({"temperature": "hot"}, "hot"), ({"max_tokens": "x"}, "x")]
)
async def test_openai_forwards_unchecked_params_like_python(
    upstream: RecordingUpstream, call: dict[str, Any], sent: str
) -> None:
    """OpenAI params are not validated by LiteLLM: both paths send them as given."""
    kwargs = deployment_kwargs("openai", upstream.url)
    (name,) = call
    for rust in (True, False):
        upstream.reset()
        extra = {"rust": True} if rust else {}
        await litellm.acompletion(messages=USER_MESSAGES, max_retries=0, **kwargs, **call, **extra)
        (request,) = upstream.requests
        assert request.json()[name] == sent
    assert_admitted()


# -- secrets -------------------------------------------------------------------------------------


def secret_kwargs(provider: str, url: str) -> dict[str, Any]:
    kwargs = deployment_kwargs(provider, url)
    if provider == "bedrock":
        kwargs["aws_secret_access_key"] = AWS_SECRET
    else:
        kwargs["api_key"] = API_KEY_SECRET
    return kwargs


def assert_no_secret(exc: BaseException) -> None:
    for text in (str(exc), repr(exc)):
        assert API_KEY_SECRET not in text
        assert AWS_SECRET not in text


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_no_secret_in_unauthorized_error(upstream: RecordingUpstream, provider: str) -> None:
    upstream.enqueue(Reply(status=401, json=ERROR_BODIES[provider]))
    exc = await raised_by(rust=True, **secret_kwargs(provider, upstream.url))
    assert_admitted()
    assert len(upstream.requests) == 1
    assert isinstance(exc, litellm.AuthenticationError), describe(exc)
    assert_no_secret(exc)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_no_secret_in_connection_error(provider: str) -> None:
    exc = await raised_by(rust=True, **secret_kwargs(provider, closed_port_url()))
    assert_admitted()
    assert is_litellm_exception(exc), describe(exc)
    assert_no_secret(exc)


def test_media_is_checked_in_the_call_not_on_the_callers_thread(
    upstream: RecordingUpstream,
) -> None:
    """Checking multi-MiB media is O(size): preparation only parses structure, the payload is
    checked (off the event loop) by the call, which still fails before any I/O."""
    deployment = litellm_fastpath._native.Deployment(
        "anthropic", "claude-sonnet-4-5", api_key="sk-ant", api_base=upstream.url
    )
    bad_image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@!"}}
    prepared = litellm_fastpath._native.prepare_chat(
        deployment, [{"role": "user", "content": [bad_image]}], {}
    )
    assert isinstance(prepared, litellm_fastpath._native.PreparedCall)
    with pytest.raises(litellm_fastpath._native.InvalidRequestError, match="base64"):
        prepared.send_blocking()
    assert upstream.requests == []
