"""Warm upstream connections for `rust: true` HTTP deployments.

Each proxy worker keeps connections to every `rust: true` deployment's upstream origin open in
the Rust HTTP pool (the one both the in-process fast path and the lane send through), from
startup on, so the first call after startup or after a quiet spell does not pay the connect and
TLS handshake. The Rust warmer (`src/http/warm.rs`) sends credential-free `OPTIONS /` requests
to the origin, `N` at once every `fastpath_warm_interval_s`: over HTTP/1.1 they hold `N` idle
connections and dial again those the upstream closed; over HTTP/2 one connection carries them
and keep-alive pings hold it.

Settings: `fastpath_warm_connections: N` under `litellm_settings` (every `rust: true`
deployment; default 2, 0 = off), `model_info: {fastpath_warm_connections: N}` on a deployment
(wins); `fastpath_warm_interval_s` under `litellm_settings` (default 20).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any

from litellm_fastpath import _native, compat, metrics, routing

logger = logging.getLogger("litellm_fastpath")

SETTING = "fastpath_warm_connections"
INTERVAL_SETTING = "fastpath_warm_interval_s"
DEFAULT_CONNECTIONS = 2
# Below the keep-alive timeout of most HTTP/1.1 servers and load balancers (60 s and up), so a
# warming round reaches a connection before the upstream closes it for idleness.
DEFAULT_INTERVAL_S = 20.0
# How often the router is read for deployments to warm (config changes included).
REFRESH_S = 2.0
_background: set[asyncio.Task[None]] = set()


def install() -> None:
    """Called by the proxy callback at startup: warm, in the background, for as long as the
    worker runs. Never waits for an upstream; one that is down is retried with backoff."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not under the proxy's startup (an SDK import): nothing to warm
        return
    task = loop.create_task(_keep_warm(), context=contextvars.Context())
    _background.add(task)
    task.add_done_callback(_background.discard)


def warm_counts() -> dict[str, int]:
    """This worker's warmer: `targets` (origins warmed, per timeout), warming requests
    `answered` and `failed`."""
    return dict(_native.warm_counts())


async def _keep_warm() -> None:
    seen: tuple[Any, ...] | None = None
    while True:
        router = getattr(compat.proxy_server(), "llm_router", None)
        if router is not None:
            try:
                targets, interval = _targets(router)
                key = (tuple((id(d), t, n) for d, t, n in targets), interval)
                # No `rust: true` deployment to warm: the Rust runtime is not started for it.
                if key != seen and (targets or seen is not None):
                    _native.warm_upstreams(targets, interval)
                    seen = key
            except Exception:  # warming never stops the proxy
                logger.debug("warm connections: configuring failed", exc_info=True)
        if metrics.recorder is not None and seen is not None:
            metrics.recorder.fold_warm(warm_counts())
        await asyncio.sleep(REFRESH_S if router is not None else REFRESH_S / 4)


def _count(value: Any, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return default
    return value


Target = tuple[_native.Deployment, float, int]


def _targets(router: Any) -> tuple[list[Target], float]:
    """The deployments to warm with their connection counts (the fast path's resolution of a
    chat call and of a chat stream, which may differ in timeout), and the interval."""
    import litellm

    default = _count(getattr(litellm, SETTING, DEFAULT_CONNECTIONS), DEFAULT_CONNECTIONS)
    interval = getattr(litellm, INTERVAL_SETTING, DEFAULT_INTERVAL_S)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        interval = DEFAULT_INTERVAL_S
    targets: list[Target] = []
    for deployment in list(router.model_list or ()):
        litellm_params = dict(deployment.get("litellm_params") or {})
        if litellm_params.pop("rust", None) is not True:
            continue
        info = deployment.get("model_info") or {}
        connections = _count(info.get(SETTING, default), default)
        if connections == 0:
            continue
        try:
            routed = _routed(router, deployment, litellm_params)
            targets.extend((d, timeout, connections) for d, timeout in routed)
        except Exception:  # one deployment's odd settings never stop the others
            logger.debug("warm connections: not warming a deployment", exc_info=True)
    return targets, float(interval)


def _routed(
    router: Any, deployment: dict[str, Any], litellm_params: dict[str, Any]
) -> list[tuple[_native.Deployment, float]]:
    """The deployment as the fast path resolves a chat call and a chat stream of it, and their
    timeouts (the router's; the pool is per timeout)."""
    call = {**litellm_params, "messages": [{"role": "user", "content": "x"}]}
    resolved = []
    for stream in (False, True):
        routed = {**call, "stream": True} if stream else dict(call)
        timeout = compat.router_timeout(router, dict(deployment["litellm_params"]), stream=stream)
        if timeout is not None:
            routed["timeout"] = timeout
        route = routing.route(routed)
        if isinstance(route, routing.Route):
            resolved.append((route.deployment, route.timeout))
    return resolved
