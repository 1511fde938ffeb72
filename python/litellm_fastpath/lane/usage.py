"""The router's usage of a model group this minute, for the headers of the lane's answers.

LiteLLM's router puts a group's usage this minute in each answer's headers when the group has
tpm or rpm limits (`x-ratelimit-remaining-requests`, `-tokens` and their limits; `set_response_
headers`), having counted that answer first (`increment_deployment_usage_for_response`). The
lane keeps, per such group, the router's counters as last read here (each refresh) plus the
answers it served that the router has not counted yet (`_native.GroupUsage`): a replay counts
its request through the router's own `_increment_deployment_usage`, which is watched here, so
the lane's figure moves from its own count to the router's at that moment.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from typing import Any

from litellm_fastpath import _native, claims

logger = logging.getLogger("litellm_fastpath")
# The groups the lane serves whose usage the router counts: name -> (their limits, the lane's
# count), kept across refreshes (their answers not yet replayed).
_usage: dict[str, tuple[tuple[int | None, int | None], _native.GroupUsage]] = {}
_IO_LIMITS = ("itpm", "otpm")


def limits(router: Any, name: str) -> tuple[int | None, int | None] | None:
    """The group's (rpm, tpm) limits as the router reads them for its headers (None: it has
    neither)."""
    info = router.get_model_group_info(name)
    if info is None or (info.rpm is None and info.tpm is None):
        return None
    return info.rpm, info.tpm


def io_limited(router: Any, name: str) -> bool:
    """Whether the group has input/output token limits (their headers and checks stay with the
    router)."""
    info = router.get_model_group_info(name)
    return info is not None and any(getattr(info, limit, None) is not None for limit in _IO_LIMITS)


def for_group(name: str, group_limits: tuple[int | None, int | None]) -> _native.GroupUsage:
    """The lane's count of the group's usage (a new one when its limits change)."""
    found = _usage.get(name)
    if found is None or found[0] != group_limits:
        rpm, tpm = group_limits
        found = (group_limits, _native.GroupUsage(rpm_limit=rpm, tpm_limit=tpm))
        _usage[name] = found
    return found[1]


def tracked(group: str | None) -> bool:
    """Whether the lane serves the group with its usage this minute (the router counts it)."""
    return group in _usage


async def count_batch(router: Any, served: dict[tuple[str, str, str], tuple[int, int]]) -> None:
    """The router's per-minute counts of a batch's answers, per deployment at once (its
    counters add; `Router._increment_deployment_usage`, as each answer's replay would make
    them), moved from the lane's count to the router's."""
    for (deployment_id, group, model), (requests, tokens) in served.items():
        context = contextvars.copy_context()
        context.run(claims.mark_lane_served)
        increment = router._increment_deployment_usage(
            deployment_id=deployment_id,
            deployment_name=model,
            model_group=group,
            total_tokens=tokens,
            rpm_increment=requests,
            parent_otel_span=None,
        )
        await asyncio.create_task(increment, context=context)


def keep(names: set[str], router: Any) -> None:
    """Forgets the counts of groups no longer served so, and watches the router's counting."""
    for name in set(_usage) - names:
        del _usage[name]
    _watch(router)


async def read(router: Any) -> None:
    """Hands the lane the router's counters of each such group for this minute, as its headers
    read them (`get_model_group_usage`)."""
    for name, (_, usage) in list(_usage.items()):
        minute = int(time.time() // 60)
        try:
            tpm, rpm = await router.get_model_group_usage(name)
        except Exception as err:  # the last reading stands (the router's own read failed too)
            logger.debug("fastpath_lane: reading the usage of a group failed: %s", type(err))
            continue
        usage.read(minute, rpm or 0, tpm or 0)


def _watch(router: Any) -> None:
    """The router's count of a deployment's usage, told to the lane when it is a lane-served
    request's (its replay): that request leaves the lane's own count for the router's."""
    original = router._increment_deployment_usage
    if getattr(original, "_lane_watched", False):
        return

    @functools.wraps(original)
    async def counting(**kwargs: Any) -> Any:
        key = await original(**kwargs)
        found = _usage.get(kwargs.get("model_group") or "")
        if key is not None and found is not None and claims.lane_served():
            found[1].counted(int(kwargs["rpm_increment"]), int(kwargs["total_tokens"]))
        return key

    counting._lane_watched = True  # type: ignore[attr-defined]
    router._increment_deployment_usage = counting
