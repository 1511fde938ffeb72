"""Shared fixtures: a recording upstream on loopback (`devtools.upstream`), which the deployments
of `devtools.deployments` point at, so every test can send the same request through the Rust
path and LiteLLM's Python path; the fast path installed; LiteLLM's logged events recorded."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger

import litellm_fastpath
from devtools.polling import PROMPTLY_S, wait_until_async
from devtools.upstream import RecordingUpstream

# The response headers the fast path adds.
FASTPATH_HEADERS = frozenset({"x-litellm-rust", "x-litellm-fastpath"})
# Response headers whose values differ on every request or by transport (each module adds those
# that differ by what it compares).
VOLATILE_HEADERS = frozenset(
    {
        "date",
        "content-length",
        "x-litellm-call-id",
        "x-litellm-response-duration-ms",
        "x-litellm-overhead-duration-ms",
        "llm_provider-date",
    }
)


# Fields of LiteLLM's standard logging payload that differ on every call (ids, clocks).
VOLATILE_LOG_FIELDS = frozenset(
    {
        "id",
        "litellm_call_id",
        "trace_id",
        "startTime",
        "endTime",
        "completionStartTime",
        "response_time",
    }
)


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[RecordingUpstream]:
    """The recording upstream every deployment of the tests points at (module proxies too)."""
    with RecordingUpstream() as server:
        yield server


@pytest.fixture
def upstream(upstream_server: RecordingUpstream) -> Iterator[RecordingUpstream]:
    """The recording upstream, with nothing recorded or scripted before or after the test."""
    upstream_server.reset()
    yield upstream_server
    upstream_server.reset()


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file `devtools.proxy_logger` writes one JSON line per event a module's proxy logs."""
    path = tmp_path_factory.mktemp("callbacks") / "events.jsonl"
    path.touch()
    return path


@pytest.fixture(autouse=True, scope="session")
def fastpath_installed() -> Iterator[None]:
    litellm_fastpath.install()
    yield
    litellm_fastpath.uninstall()


@pytest.fixture(autouse=True)
def fresh_decline_counts() -> None:
    litellm_fastpath.reset_decline_counts()


async def cancel_and_release(task: asyncio.Future[Any], released: Callable[[], bool]) -> None:
    """Cancels `task`, a call against a stalled upstream: it ends promptly, and then the call
    lets go of what it held (`released()`, after a garbage collection) with no further call
    into the extension."""
    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - cancelled_at < PROMPTLY_S  # the stall lasts longer

    def collected_and_released() -> bool:
        gc.collect()
        return released()

    await wait_until_async(collected_and_released, "still held", interval=0.02)


def stable_headers(response: Any, volatile: frozenset[str]) -> dict[str, str]:
    """A proxy response's headers but the fast path's own and the `volatile` ones."""
    return {
        k: v for k, v in response.headers.items() if k not in volatile and k not in FASTPATH_HEADERS
    }


def assert_rust_field_refused(proxy: Any, upstream: Any, path: str, body: dict[str, Any]) -> None:
    """LiteLLM bans `rust` in request bodies (`proxy/auth/auth_utils.py`) before routing: the
    request is refused (a 500 in this venv, where the proxy's error handler fails importing
    prisma; a 4xx is the intended shape), never reaches the provider, never the fast path."""
    rejection = "rust is not allowed in request body"
    rejections_before = proxy.log_text().count(rejection)
    resp = proxy.post(path, json=body)
    assert resp.status_code >= 400, resp.text
    assert "x-litellm-rust" not in resp.headers
    assert upstream.requests == []
    assert proxy.log_text().count(rejection) > rejections_before


def turns(*messages: tuple[str, Any]) -> dict[str, Any]:
    """Chat kwargs of these (role, content) messages."""
    return {"messages": [{"role": role, "content": content} for role, content in messages]}


def comparable(response: Any) -> dict[str, Any]:
    """A response as the client sees it, minus the fields that differ on every call."""
    dumped = response.model_dump()
    dumped.pop("id", None)
    dumped.pop("created", None)
    return dumped


@pytest.fixture
def litellm_module() -> Any:
    return litellm


class Recorder(CustomLogger):
    def __init__(self) -> None:
        super().__init__()
        self.successes: list[tuple[dict[str, Any], Any]] = []
        self.failures: list[dict[str, Any]] = []

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self.successes.append((kwargs, response_obj))

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self.failures.append(kwargs)

    async def logged(
        self,
        matches: Callable[[dict[str, Any], Any], bool] = lambda kwargs, response: True,
        *,
        failed: bool = False,
        grace: float = 0.0,
    ) -> list[dict[str, Any]]:
        """The kwargs of the logged successes (or failures) that `matches` (kwargs, response),
        once there is one; with `grace`, that much later (a second one would have landed)."""

        def found() -> list[dict[str, Any]]:
            events = [(kw, None) for kw in self.failures] if failed else self.successes
            return [kwargs for kwargs, response in events if matches(kwargs, response)]

        await wait_until_async(found, "nothing logged", timeout=3)
        await asyncio.sleep(grace)
        return found()


def of_response(answer: Any) -> Callable[[dict[str, Any], Any], bool]:
    """`Recorder.logged`'s match for the success event of one answer."""
    return lambda kwargs, response: response is answer


def of_call(call_id: str) -> Callable[[dict[str, Any], Any], bool]:
    """`Recorder.logged`'s match for the events of one call."""
    return lambda kwargs, response: kwargs.get("litellm_call_id") == call_id


@contextlib.contextmanager
def litellm_callback(callback: CustomLogger) -> Iterator[CustomLogger]:
    """`callback` among LiteLLM's callbacks meanwhile; then removed from every list LiteLLM
    copied it into (on first use)."""
    litellm.callbacks = [*litellm.callbacks, callback]
    try:
        yield callback
    finally:
        for name in (
            "callbacks",
            "_async_success_callback",
            "_async_failure_callback",
            "success_callback",
            "failure_callback",
        ):
            if callback in getattr(litellm, name):
                getattr(litellm, name).remove(callback)


@pytest.fixture(scope="module")
def module_recorder() -> Iterator[Recorder]:
    # LiteLLM copies `litellm.callbacks` into its internal callback lists on first use, so one
    # recorder serves the module and is removed from every list afterwards.
    recorder = Recorder()
    with litellm_callback(recorder):
        yield recorder


@pytest.fixture
def recorder(module_recorder: Recorder) -> Recorder:
    module_recorder.successes.clear()
    module_recorder.failures.clear()
    return module_recorder
