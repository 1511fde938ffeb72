"""The native runtime under asyncio, threads, cancellation and fork.

One tokio runtime serves the whole process; these tests check that it behaves like any other
awaitable to asyncio (concurrency, cancellation, contextvars, new event loops), releases the
GIL for sync callers and survives `os.fork()`.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import select
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import litellm
import pytest

from devtools.answers import REPLY_TEXT
from devtools.deployments import PROVIDERS, deployment_kwargs, served_by_rust
from devtools.polling import wait_until
from devtools.upstream import RecordingUpstream, Reply
from tests.conftest import cancel_and_release

USER_MESSAGES = [{"role": "user", "content": "hi"}]


async def rust_call(url: str, provider: str = "openai", **extra: Any) -> Any:
    extra.setdefault("messages", USER_MESSAGES)
    return await litellm.acompletion(rust=True, **deployment_kwargs(provider, url), **extra)


def assert_rust_reply(response: Any) -> None:
    assert served_by_rust(response)
    assert response.choices[0].message.content == REPLY_TEXT


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_fifty_concurrent_calls(upstream: RecordingUpstream, provider: str) -> None:
    responses = await asyncio.gather(*(rust_call(upstream.url, provider) for _ in range(50)))

    for response in responses:
        assert_rust_reply(response)
    assert len(upstream.requests) == 50


def test_repeated_asyncio_run(upstream: RecordingUpstream) -> None:
    """Each `asyncio.run` has a new event loop; the one native runtime serves them all."""
    for _ in range(3):
        assert_rust_reply(asyncio.run(rust_call(upstream.url)))
    assert len(upstream.requests) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_prepared_call_holds_the_text_itself_and_releases_it(
    upstream: RecordingUpstream, provider: str
) -> None:
    from litellm_fastpath import _native, routing

    big = "".join(["large content ", str(time.monotonic_ns())]) * (8 * 1024 * 1024 // 32)
    messages = [{"role": "user", "content": big}]
    baseline = sys.getrefcount(big)
    route = routing.route({**deployment_kwargs(provider, upstream.url), "messages": messages})
    assert isinstance(route, routing.Route)
    prepared = _native.prepare_chat(route.deployment, messages, route.params)
    # Not copied: the prepared call keeps the str object itself alive.
    assert sys.getrefcount(big) > baseline
    del prepared
    # Released by the GIL thread: no further call into the extension is needed.
    wait_until(lambda: sys.getrefcount(big) == baseline, "still held", interval=0.01)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_cancel_stops_call_and_releases_messages(
    upstream: RecordingUpstream, provider: str
) -> None:
    big = "".join(["large content ", str(time.monotonic_ns())]) * (8 * 1024 * 1024 // 32)
    messages = [{"role": "user", "content": big}]
    baseline = sys.getrefcount(big)
    upstream.enqueue(Reply(action="stall", delay_s=10))

    task = asyncio.create_task(rust_call(upstream.url, provider, messages=messages))
    await asyncio.to_thread(upstream.wait_for, 1, 10.0)
    assert not task.done()

    # Released by the GIL thread as the aborted call drops it.
    await cancel_and_release(task, lambda: sys.getrefcount(big) == baseline)


async def test_contextvars_survive_await(upstream: RecordingUpstream) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("fastpath_test_var")
    var.set("before")

    assert_rust_reply(await rust_call(upstream.url))

    assert var.get() == "before"


def test_sync_completion_releases_gil(upstream: RecordingUpstream) -> None:
    upstream.enqueue(Reply(delay_s=0.5))
    stop = threading.Event()
    counter = [0]

    def count() -> None:
        while not stop.is_set():
            counter[0] += 1

    outcome: dict[str, Any] = {}

    def call() -> None:
        before = counter[0]
        try:
            outcome["response"] = litellm.completion(
                messages=USER_MESSAGES, rust=True, **deployment_kwargs("openai", upstream.url)
            )
        except BaseException as exc:
            outcome["error"] = exc
        outcome["increments"] = counter[0] - before

    counter_thread = threading.Thread(target=count, daemon=True)
    counter_thread.start()
    caller = threading.Thread(target=call)
    caller.start()
    caller.join(10)
    stop.set()
    counter_thread.join(5)

    assert not caller.is_alive()
    assert "error" not in outcome, outcome.get("error")
    assert_rust_reply(outcome["response"])
    # Holding the GIL for the 0.5 s upstream delay would freeze the counter thread (a few
    # switch intervals at most); with it released the counter runs freely.
    assert outcome["increments"] > 100_000


def test_rust_call_in_forked_child(upstream: RecordingUpstream) -> None:
    # Python 3.12+ warns (DeprecationWarning) about fork() in a process with threads; this
    # venv runs 3.11, where it does not, so no filterwarnings exemption is needed.
    assert_rust_reply(asyncio.run(rust_call(upstream.url)))

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            os.close(read_fd)
            response = asyncio.run(rust_call(upstream.url))
            code = 0 if served_by_rust(response) else 1
            if code:
                os.write(write_fd, b"not served by Rust")
        except BaseException:
            os.write(write_fd, traceback.format_exc().encode(errors="replace"))
        finally:
            os._exit(code)

    os.close(write_fd)
    try:
        deadline = time.monotonic() + 30.0
        status = None
        while time.monotonic() < deadline:
            waited, raw_status = os.waitpid(pid, os.WNOHANG)
            if waited == pid:
                status = raw_status
                break
            time.sleep(0.05)
        if status is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not finish within 30 s")
        output = b""
        while select.select([read_fd], [], [], 0)[0]:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            output += chunk
    finally:
        os.close(read_fd)

    assert os.waitstatus_to_exitcode(status) == 0, output.decode(errors="replace")
    assert len(upstream.requests) == 2


# A thread that polled every 10 ms would switch ~100 times in this window; a parked one never.
WAKE_UP_WINDOW_S = 1.0


def _context_switches(tid: str) -> int:
    total = 0
    with open(f"/proc/self/task/{tid}/status") as status:
        for line in status:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_gil_thread_sleeps_while_nothing_is_queued(upstream: RecordingUpstream) -> None:
    """With nothing queued the GIL thread neither wakes up nor asks for the GIL (it used to poll
    every 10 ms: ~100 wake-ups per second in every process that loaded the extension)."""
    kwargs = {
        **deployment_kwargs("openai", upstream.url),
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert served_by_rust(litellm.completion(**kwargs, rust=True))
    tids = [
        tid
        for tid in os.listdir("/proc/self/task")
        if Path(f"/proc/self/task/{tid}/comm").read_text().strip() == "fastpath-gil"
    ]
    assert len(tids) == 1, tids
    # The call's releases go out at once; then the thread parks (no switch between two looks).
    seen = [-1]

    def parked() -> bool:
        previous, seen[0] = seen[0], _context_switches(tids[0])
        return seen[0] == previous

    wait_until(parked, "the GIL thread keeps waking up", interval=0.1)
    before = _context_switches(tids[0])
    time.sleep(WAKE_UP_WINDOW_S)  # the window wake-ups are counted in, not a wait for a state
    assert _context_switches(tids[0]) - before < 10
