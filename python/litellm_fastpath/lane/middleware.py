"""What the proxy's ASGI middleware does that lane requests would otherwise miss: the lane
answers before the middleware runs, and replays call the endpoint directly. Reproduced here
where an operator sees it without a database or a license (the rest is listed in
docs/compatibility.md): the in-flight count of `/health/backlog`, the
`litellm_in_flight_requests` gauge and graceful shutdown read.
"""

from __future__ import annotations

from litellm_fastpath import _native, compat

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
