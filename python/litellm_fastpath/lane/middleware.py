"""What the proxy's ASGI middleware does that lane requests would otherwise miss: the lane
answers before the middleware runs, and replays call the endpoint directly. Reproduced here (the
rest is listed in docs/compatibility.md): the in-flight count of `/health/backlog`, the
`litellm_in_flight_requests` gauge and graceful shutdown read; and the gateway request counts
(SGR, with a database) and enterprise billing records of LiteLLM's billable-request middleware.
"""

from __future__ import annotations

import logging
from typing import Any

from litellm_fastpath import _native, compat

logger = logging.getLogger("litellm_fastpath")

# The lane's requests counted into LiteLLM's in-flight counter now.
_counted = 0


def count_in_flight() -> None:
    """Brings LiteLLM's per-worker in-flight count in step with the lane's: requests the lane is
    serving and served requests whose replay (their Python work in this worker) has not
    finished. Called each refresh, so the count trails the lane's by at most that long."""
    global _counted
    backlog = _native.lane_backlog()
    change = backlog - _counted
    if not change:
        return
    counter = compat.InFlightRequestsMiddleware
    counter._in_flight += change
    gauge = counter._gauge  # LiteLLM creates it on the first request through the middleware
    if gauge is not None:
        gauge.inc(change)
    _counted = backlog


# The status the middleware reads for a request the lane served (the lane serves only answers
# the provider gave 2xx; the others are the proxy's, through its middleware).
_SERVED_STATUS = 200


def count_served(path: str, deployment_id: str) -> None:
    """What LiteLLM's billable-request middleware records of a request it saw answered 2xx,
    through that middleware's own sink and recorder (as it resolved them): the gateway request
    count and, where licensed, the billing record with the deployment's id."""
    metering = _billable_request_middleware()
    if metering is None:
        return
    sink, recorder = metering._resolve_sink(), metering._resolve_recorder()
    if sink is None and recorder is None:
        return
    classified = compat.classify_billable_request(path, "POST")
    if classified is None:
        return
    category, route = classified
    try:
        if sink is not None:
            sink.record(category=category, route=route, status_code=_SERVED_STATUS)
        if recorder is not None:
            recorder.record(
                category=category, route=route, status_code=_SERVED_STATUS, model_id=deployment_id
            )
    except Exception as err:  # as the middleware: metering never fails a served request
        logger.warning("fastpath_lane: gateway request metering failed: %s", type(err).__name__)


_metering: list[Any] = []


def _billable_request_middleware() -> Any | None:
    """The proxy app's instance of LiteLLM's billable-request middleware (its stack built as
    Starlette builds it on the first request, if no request has come through it yet)."""
    if _metering:
        return _metering[0]
    app = compat.proxy_server().app
    if app.middleware_stack is None:
        app.middleware_stack = app.build_middleware_stack()
    layer = app.middleware_stack
    while layer is not None:
        if isinstance(layer, compat.BillableRequestMetricsMiddleware):
            _metering.append(layer)
            return layer
        layer = getattr(layer, "app", None)
    return None
