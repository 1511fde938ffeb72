"""Operator metrics beside LiteLLM's on the proxy's `/metrics` (docs/operations.md).

On only when the proxy's config turns LiteLLM's prometheus callback on (`callbacks:
["prometheus"]`) and `prometheus_client` is installed: then `enable()` registers the metrics
and sets `recorder`. Otherwise nothing is registered and `recorder` stays None, which is all
the request path looks at.

What the lane serves is counted in Rust, never in Python per request: each worker folds the
lane's counters into these metrics every `FOLD_S` seconds. prometheus_client's multiprocess
mode (`PROMETHEUS_MULTIPROC_DIR`, which LiteLLM sets up for several workers) keeps each
worker's values in its own file and sums them at scrape time, so every worker folds its own.

LiteLLM-free at import (declines.py imports it). Labels carry only bounded values: route names,
the router's model group names, paths, and reason names; never a key, user or request text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from litellm_fastpath import _native, compat

logger = logging.getLogger("litellm_fastpath")

PREFIX = "litellm_fastpath_"
# How often a worker folds its lane's counters into the metrics.
FOLD_S = 1.0
# A model group the router does not list (a wildcard route's requested name, say).
OTHER_GROUP = "other"
LANE = "lane"
RUST = "rust"
PYTHON = "python"


class Recorder:
    """The registered metrics, and how far each lane counter has been folded into them."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.requests = Counter(
            PREFIX + "requests",
            "Calls by route, model group and the path that served them (lane, rust, python)",
            ["route", "model_group", "path"],
        )
        self.declines = Counter(
            PREFIX + "declines",
            "Calls of rust: true models that stayed on LiteLLM's Python path, by decline reason",
            ["reason"],
        )
        self.lane_to_proxy = Counter(
            PREFIX + "lane_to_proxy",
            "Requests the fast lane sent to the proxy, by lane reason",
            ["reason"],
        )
        self.lane_events = Counter(
            PREFIX + "lane_events",
            "The fast lane's other outcomes: replayed (provider called, the proxy answered), "
            "client_gone, closed_busy",
            ["event"],
        )
        self.lane_backlog = Gauge(
            PREFIX + "lane_backlog",
            "Requests the fast lane is serving or that wait for their replay in the proxy",
            multiprocess_mode="livesum",
        )
        self.upstream = Histogram(
            PREFIX + "upstream_duration_seconds",
            "Provider call duration as the fast path measured it (to the answer, or to a "
            "stream's first frames)",
            ["route", "path"],
            buckets=_native.lane_upstream_buckets(),
        )
        self.pool_events = Counter(
            PREFIX + "realtime_pool_events",
            "The realtime session pool: hits, misses, expiries, dead, dials, dial_failures",
            ["event"],
        )
        self.pool_warm = Gauge(
            PREFIX + "realtime_pool_warm",
            "Warm realtime sessions waiting in the pool (summed over live workers)",
            multiprocess_mode="livesum",
        )
        self.warm_requests = Counter(
            PREFIX + "warm_requests",
            "Credential-free warming requests to rust: true upstreams, by outcome (answered, "
            "failed)",
            ["outcome"],
        )
        self.warm_targets = Gauge(
            PREFIX + "warm_targets",
            "Upstream origins (per call timeout) whose connections are kept warm",
            multiprocess_mode="livesum",
        )
        self._warm_counts: dict[str, int] = {}
        self._lane_reasons = frozenset(_native.lane_reasons())
        self._lane_counts: dict[str, int] = {}
        self._realtime_counts: dict[str, int] = {}
        self._lane_served: dict[tuple[str, str], tuple[int, list[int], float]] = {}

    def count(self, route: str, kwargs: Mapping[str, Any], path: str) -> None:
        self.requests.labels(route, model_group(kwargs), path).inc()

    def fold_lane(self) -> None:
        """Adds what the lane counted since the last fold."""
        for name, total in _native.lane_counts().items():
            added = total - self._lane_counts.get(name, 0)
            # served: by route and group below; `lane_off:<setting>` details stay out of the
            # labels (their requests are counted under `lane_off`; explain names the setting).
            if added <= 0 or name == "served" or ":" in name:
                continue
            self._lane_counts[name] = total
            metric = self.lane_to_proxy if name in self._lane_reasons else self.lane_events
            metric.labels(name).inc(added)
        for route, group, requests, buckets, seconds in _native.lane_served():
            before = self._lane_served.get((route, group), (0, [0] * len(buckets), 0.0))
            if requests == before[0]:
                continue
            self._lane_served[(route, group)] = (requests, buckets, seconds)
            self.requests.labels(route, group, LANE).inc(requests - before[0])
            # The lane sorted the durations into these same buckets already; prometheus_client
            # has no public call that adds a bucket count.
            child: Any = self.upstream.labels(route, LANE)
            for bucket, (now, was) in enumerate(zip(buckets, before[1], strict=True)):
                if now > was:
                    child._buckets[bucket].inc(now - was)
            child._sum.inc(seconds - before[2])
        self.lane_backlog.set(_native.lane_backlog())
        # The lane's realtime pools (sessions it relays in Rust), beside the Python pool's.
        relayed = _native.lane_realtime_counts()
        for name in REALTIME_POOL_EVENTS:
            added = relayed.get(name, 0) - self._realtime_counts.get(name, 0)
            if added > 0:
                self._realtime_counts[name] = relayed[name]
                self.pool_events.labels(name).inc(added)
        from litellm_fastpath import realtime

        self.pool_warm.set(realtime.realtime_pool_counts()["warm"])

    def fold_warm(self, counts: Mapping[str, int]) -> None:
        """Adds the warming requests counted since the last fold (`warm.warm_counts()`)."""
        for outcome in ("answered", "failed"):
            added = counts.get(outcome, 0) - self._warm_counts.get(outcome, 0)
            if added > 0:
                self._warm_counts[outcome] = counts[outcome]
                self.warm_requests.labels(outcome).inc(added)
        self.warm_targets.set(counts.get("targets", 0))


recorder: Recorder | None = None


def prometheus_configured(litellm_settings: Mapping[str, Any] | None) -> bool:
    """Whether the proxy's `litellm_settings` turn LiteLLM's prometheus callback on (LiteLLM's
    own reading of them)."""
    return compat.prometheus_configured(litellm_settings)


def enable(litellm_settings: Mapping[str, Any] | None) -> None:
    """Registers the metrics when the prometheus callback is on and `prometheus_client` is
    installed (LiteLLM's callback needs it too). Idempotent."""
    global recorder
    if recorder is not None or not prometheus_configured(litellm_settings):
        return
    try:
        recorder = Recorder()
    except ImportError:
        logger.warning("prometheus callback on but prometheus_client missing; no fast path metrics")


def model_group(kwargs: Mapping[str, Any]) -> str:
    """The call's model group as the router names it, or `other` for a name it does not list
    (a wildcard route takes names from callers; labels stay bounded)."""
    for field in ("metadata", "litellm_metadata"):
        metadata = kwargs.get(field)
        if isinstance(metadata, Mapping) and isinstance(metadata.get("model_group"), str):
            group: str = metadata["model_group"]
            router = _router()
            if router is not None and group in router.model_names:
                return group
            return OTHER_GROUP
    return OTHER_GROUP


def _router() -> Any:
    import sys

    proxy_server = sys.modules.get("litellm.proxy.proxy_server")
    return getattr(proxy_server, "llm_router", None)


REALTIME_POOL_EVENTS = ("hits", "misses", "expiries", "dead", "dials", "dial_failures")


def realtime_pool(event: str | None, warm: int) -> None:
    """A realtime pool event (None: only the number of warm sessions changed)."""
    if recorder is None:
        return
    if event is not None:
        recorder.pool_events.labels(event).inc()
    recorder.pool_warm.set(warm)


async def fold_lane_forever() -> None:
    """A worker's lane counters, folded into the metrics every `FOLD_S` seconds."""
    while True:
        await asyncio.sleep(FOLD_S)
        fold_lane()


def fold_lane() -> None:
    """Folds this worker's lane counters into the metrics now (when they are on)."""
    if recorder is None:
        return
    try:
        recorder.fold_lane()
    except Exception as err:  # metrics must never end the folding or a worker's shutdown
        logger.warning("fast path metrics: folding the lane's counts failed: %r", err)
