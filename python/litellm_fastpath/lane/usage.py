"""The router's usage of a model group this minute, for the headers of the lane's answers.

LiteLLM's router puts a group's usage this minute in each answer's headers when the group has
tpm or rpm limits (`x-ratelimit-remaining-requests`, `-tokens` and their limits; `set_response_
headers`), having counted that answer first (`increment_deployment_usage_for_response`). The
lane keeps, per such group, the router's counters as last read here (each refresh) plus the
answers it served that the router has not counted yet (`_native.GroupUsage`): a replay counts
its request through the router's own `_increment_deployment_usage`, which is watched here, so
the lane's figure moves from its own count to the router's at that moment.

With usage-based routing (`usage-based-routing-v2`) the router also picks by each deployment's
counters this minute (`<id>:<model>:tpm|rpm:<HH-MM>`, its strategy's): the lane keeps them per
deployment (`_native.DeploymentUsage`), read here each refresh, and counts its requests on them
in its batch as the strategy counts them (a request before its call, its tokens once logged).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import logging
import time
from typing import Any, NamedTuple

from litellm_fastpath import _native, claims, compat

logger = logging.getLogger("litellm_fastpath")
# The groups the lane serves whose usage the router counts: name -> (their limits, the lane's
# count), kept across refreshes (their answers not yet replayed).
_usage: dict[str, tuple[tuple[int | None, int | None], _native.GroupUsage]] = {}
_IO_LIMITS = ("itpm", "otpm")
USAGE_ROUTING = "usage-based-routing-v2"
# LiteLLM's call type of a `/v1/messages` call.
MESSAGES_CALL = "anthropic_messages"


class _Routed(NamedTuple):
    """A deployment the lane picks by usage: its (tpm, rpm) limits, its model as the strategy
    keys its counters, and the lane's count of its usage."""

    limits: tuple[int | None, int | None]
    model: str
    counts: _native.DeploymentUsage


# The deployments of the groups the lane serves under usage-based routing, by id.
_routing: dict[str, _Routed] = {}


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


def routes_by_usage(router: Any) -> bool:
    """Whether the router picks by usage, with its strategy's own callback."""
    return getattr(router, "routing_strategy", None) == USAGE_ROUTING and isinstance(
        getattr(router, "lowesttpm_logger_v2", None), compat.LowestTPMLoggingHandler_v2
    )


def for_deployment(router: Any, deployment: dict[str, Any]) -> _native.DeploymentUsage | None:
    """The lane's count of the deployment's usage for the router's pick (None: the router
    shuffles), kept across refreshes while its limits stay."""
    if not routes_by_usage(router):
        return None
    deployment_id = str((deployment.get("model_info") or {}).get("id"))
    model = str((deployment.get("litellm_params") or {}).get("model"))
    deployment_limits = (_limit(deployment, "tpm"), _limit(deployment, "rpm"))
    found = _routing.get(deployment_id)
    if found is None or (found.limits, found.model) != (deployment_limits, model):
        tpm, rpm = deployment_limits
        counts = _native.DeploymentUsage(tpm_limit=tpm, rpm_limit=rpm)
        found = _routing[deployment_id] = _Routed(deployment_limits, model, counts)
    return found.counts


def _limit(deployment: dict[str, Any], name: str) -> int | None:
    """The deployment's limit as the strategy reads it: its own, its params', its info's."""
    for place in (deployment, deployment.get("litellm_params"), deployment.get("model_info")):
        value = (place or {}).get(name)
        if value is not None:
            return int(value)
    return None


def routed(deployment_id: str) -> bool:
    """Whether the lane picks the deployment by usage (the batch counts its requests so)."""
    return deployment_id in _routing


def _routing_keys(deployment_id: str, model: str, now: float) -> tuple[str, str]:
    """The strategy's (tpm, rpm) counter keys of the deployment for the minute of `now`."""
    minute = time.strftime("%H-%M", time.gmtime(now))
    return f"{deployment_id}:{model}:tpm:{minute}", f"{deployment_id}:{model}:rpm:{minute}"


@dataclasses.dataclass
class RoutingCounts:
    """A batch's requests of one deployment, and the tokens of those whose logging does not
    count them: a chat answer's, and a `/v1/messages` answer's apart (LiteLLM's logging names no
    model for those, so the strategy counts them under `<id>:None:tpm`, which its pick never
    reads)."""

    requests: int = 0
    tokens: int = 0
    messages_tokens: int = 0

    def add(self, tokens: int, *, messages: bool) -> None:
        self.requests += 1
        if messages:
            self.messages_tokens += tokens
        else:
            self.tokens += tokens


async def count_routing(router: Any, served: dict[str, RoutingCounts]) -> None:
    """The strategy's counts of a batch's requests, per deployment at once: its requests (its
    pre-call count) and the tokens of the answers whose logging does not count them (its
    success callback), moved from the lane's count to the router's."""
    strategy = router.lowesttpm_logger_v2
    ttl = strategy.routing_args.ttl
    now = time.time()
    for deployment_id, counts in served.items():
        found = _routing.get(deployment_id)
        if found is None:
            continue
        tpm_key, rpm_key = _routing_keys(deployment_id, found.model, now)
        unnamed_tpm_key, _ = _routing_keys(deployment_id, "None", now)
        await strategy._increment_value_in_current_window(
            key=rpm_key, value=counts.requests, ttl=ttl
        )
        for key, tokens in ((tpm_key, counts.tokens), (unnamed_tpm_key, counts.messages_tokens)):
            if tokens:
                await strategy.router_cache.async_increment_cache_post_call(
                    key=key, value=tokens, ttl=ttl, parent_otel_span=None
                )
        found.counts.counted(counts.requests, counts.tokens)


def keep(names: set[str], router: Any, deployments: set[str]) -> None:
    """Forgets the counts of groups (and deployments) no longer served so, and watches the
    router's counting."""
    for name in set(_usage) - names:
        del _usage[name]
    # Under another strategy (the router replaced on a config reload) none are counted so.
    served = deployments if routes_by_usage(router) else set()
    for deployment_id in set(_routing) - served:
        del _routing[deployment_id]
    _watch(router)
    if routes_by_usage(router):
        _watch_routing(router.lowesttpm_logger_v2)


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
    if _routing and routes_by_usage(router):
        await _read_routing(router.lowesttpm_logger_v2)


async def _read_routing(strategy: Any) -> None:
    """Hands the lane the strategy's counters of each deployment for this minute, as its pick
    reads them (`async_batch_get_cache` on the router's cache)."""
    now = time.time()
    found = list(_routing.items())
    keys = [
        key
        for deployment_id, routed in found
        for key in _routing_keys(deployment_id, routed.model, now)
    ]
    try:
        values = await strategy.router_cache.async_batch_get_cache(keys=keys)
    except Exception as err:  # the last reading stands (the strategy's own read failed too)
        logger.debug("fastpath_lane: reading the routing usage failed: %s", type(err))
        return
    values = values or [None] * len(keys)
    for index, (_, routed) in enumerate(found):
        tpm, rpm = values[2 * index], values[2 * index + 1]
        routed.counts.read(int(now // 60), int(tpm or 0), int(rpm or 0))


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


def _watch_routing(strategy: Any) -> None:
    """The strategy's counts of a lane-served request (its replay's, or a stream's logging in
    the batch), told to the lane: they leave the lane's own count for the router's."""
    if getattr(strategy, "_lane_watched", False):
        return
    pre_call = strategy.async_pre_call_check
    success = strategy.async_log_success_event

    @functools.wraps(pre_call)
    async def pre_call_counting(deployment: Any, *args: Any, **kwargs: Any) -> Any:
        result = await pre_call(deployment, *args, **kwargs)
        found = _routing.get(str((deployment.get("model_info") or {}).get("id")))
        if found is not None and claims.lane_served():
            found.counts.counted(1, 0)
        return result

    @functools.wraps(success)
    async def success_counting(kwargs: Any, *args: Any, **more: Any) -> Any:
        result = await success(kwargs, *args, **more)
        payload = kwargs.get("standard_logging_object") or {}
        found = _routing.get(str(payload.get("model_id")))
        if found is not None and claims.lane_served():
            # A stream's tokens were never the lane's to count (the router's reading has them),
            # nor a `/v1/messages` answer's (counted where the pick never reads them).
            read_by_pick = not payload.get("stream") and payload.get("call_type") != MESSAGES_CALL
            tokens = int(payload.get("total_tokens") or 0) if read_by_pick else 0
            found.counts.counted(0, tokens)
        return result

    strategy.async_pre_call_check = pre_call_counting
    strategy.async_log_success_event = success_counting
    strategy._lane_watched = True
