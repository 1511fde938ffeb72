"""The asyncio side of a native call: start it on the Rust runtime and await its result.

LiteLLM-free, so tools and benchmarks that drive `_native` directly use the same bridge."""

from __future__ import annotations

import asyncio
from typing import Any

from litellm_fastpath import _native


def settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Runs on the event loop when Rust finishes; the caller may have cancelled meanwhile."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


async def await_call(prepared: _native.PreparedCall) -> tuple[dict[str, Any], dict[str, str]]:
    """Runs the call on the Rust runtime; cancelling the awaiting task aborts it there."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    handle = prepared.start(loop, future, settle)
    try:
        return await future
    except asyncio.CancelledError:
        handle.cancel()
        raise
