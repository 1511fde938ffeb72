"""A proxy callback for the logging-queue test: `callbacks: ["tests.slow_logger.recorder"]`.

An operator's logging callback that is slower than the lane: each success takes `SLOW_S`, and
it writes (to `devtools.proxy_logger`'s log file) the call id and how many logging tasks were
waiting in LiteLLM's logging worker's queue when it ran."""

from __future__ import annotations

import asyncio
from typing import Any

from devtools.proxy_logger import Recorder
from litellm_fastpath import compat

SLOW_S = 0.01


class SlowRecorder(Recorder):
    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        await asyncio.sleep(SLOW_S)
        self._write(
            {
                "event": "slow_success",
                "call_id": kwargs.get("litellm_call_id"),
                "queued": compat.logging_queue_length(),
            }
        )


recorder = SlowRecorder()
