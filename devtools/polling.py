"""Waiting for a state instead of sleeping: poll a condition until it holds or time runs out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
# How soon a cancelled or abandoned call must be over: a bound, not a wait, and far below the
# stalls tests script against it (10 s and more), so a busy machine does not fail it.
PROMPTLY_S = 5.0
# An event that must not come (a second log line, a second provider call) has no state to poll
# for: a test watches this long for one after the state it waited for.
ABSENCE_S = 0.5


def wait_until(
    condition: Callable[[], T | None],
    what: str | Callable[[], object] = "",
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
) -> T:
    """`condition()`'s first truthy value, polled every `interval` s; an AssertionError naming
    `what` (a callable is asked then, for the state it was in) after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout))
        time.sleep(interval)
    return value


async def wait_until_async(
    condition: Callable[[], T | None],
    what: str | Callable[[], object] = "",
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
) -> T:
    """`wait_until` for a test on an event loop: the loop runs while it waits."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout))
        await asyncio.sleep(interval)
    return value


def _timed_out(what: str | Callable[[], object], timeout: float) -> str:
    detail = what() if callable(what) else what
    return f"still not so after {timeout:g} s" + (f": {detail}" if detail != "" else "")
