"""Declines: why a call stays on LiteLLM's Python path, counted per reason and logged.

LiteLLM-free (importing it costs nothing), so the package's `decline_counts()` never loads
LiteLLM. The reasons are the names of `_native.decline_codes()` (docs/compatibility.md lists them).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass

from litellm_fastpath import _native, metrics

logger = logging.getLogger("litellm_fastpath")


@dataclass(frozen=True, slots=True)
class Decline:
    code: str
    detail: str


_counts: Counter[str] = Counter()
_counts_lock = threading.Lock()


def record_decline(decline: Decline | _native.Declined) -> None:
    with _counts_lock:
        _counts[decline.code] += 1
    if metrics.recorder is not None:
        metrics.recorder.declines.labels(decline.code).inc()
    logger.debug("fast path declined: %s (%s)", decline.code, decline.detail)


def decline_counts() -> dict[str, int]:
    """How many calls each decline reason sent to LiteLLM's Python path, in this process."""
    with _counts_lock:
        return dict(_counts)


def reset_decline_counts() -> None:
    with _counts_lock:
        _counts.clear()
