"""What the fast lane and the routes share in a proxy worker, so that neither imports the other:
whether the lane runs, a replayed request's claim on the outcome the lane got from the provider
(and on the deployment it called), and the `/v1/messages` headers the proxy's path teaches the
lane.

The lane (`lane/`) sets them; the routes (`integration.py`, `messages.py`, through `calls.py`)
and the router's pick read them.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from litellm_fastpath import _native

logger = logging.getLogger("litellm_fastpath")

_running = False
# Set for a replayed request, read by its (first) provider call and pick. Each holds a list,
# emptied when read: the request's tasks get copies of the context, and a retry in another task
# must find the outcome taken, not take it again.
_claimed_call: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_call", default=None
)
_forced_deployment: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_deployment", default=None
)
# The replayed request's hold on its key's budget (the lane's `budget::Holds`), released once
# LiteLLM's counters hold the replay's reservation.
_budget_hold: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_hold", default=None
)
# Set while a replay is authenticated again without LiteLLM's budget checks (see
# `lane.replay`): the lane admitted it, and the provider answered.
_admitted: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "litellm_fastpath_lane_admitted", default=False
)
# The replayed request's rpm windows (start, count with it) where the lane counted it itself (in
# Redis), or where the lane admitted it and the limiter refused it meanwhile (empty): its
# limiter must not count it (again).
_rate_counts: contextvars.ContextVar[list[tuple[int, int]] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_rate_counts", default=None
)
# The tokens the lane reserved in its tpm windows, and each window's count with them.
_tokens_reserved: contextvars.ContextVar[tuple[int, list[int]] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_tokens_reserved", default=None
)
# Its parallel-request gauges' slots in flight with it, where the lane took its slot (the lane
# gives it back; the limiter takes none).
_parallel_counts: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_parallel_counts", default=None
)
# Set for a replay the lane learns a request shape from (`lane.shapes`): given the arguments
# of its chat provider call, before the call.
_learner: contextvars.ContextVar[Callable[[dict[str, Any]], None] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_learner", default=None
)
# Set for the whole of a replayed (or batch-logged) request the lane served, its logging tasks
# included: the router's usage counts of it are the lane's answer's (`lane.usage`).
_lane_served: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "litellm_fastpath_lane_served", default=False
)
# The client header the lane passes on to `/v1/messages` calls (the one version there is).
ANTHROPIC_VERSION = {"anthropic-version": "2023-06-01"}
# What the proxy passes on to Anthropic of the client's headers (`provider_specific_header`).
_ANTHROPIC_CLIENT_HEADERS = frozenset({"anthropic-version", "anthropic-beta"})


def lane_running() -> bool:
    return _running


def lane_started() -> None:
    global _running
    _running = True


def hold(claim: _native.LaneClaim) -> None:
    """This request replays one the lane served: its provider call is the lane's outcome, and
    the router's pick the deployment the lane called."""
    _claimed_call.set([claim.call])
    _forced_deployment.set([claim.deployment_id])
    _lane_served.set(True)
    _budget_hold.set([] if claim.hold is None else [claim.hold])
    _rate_counts.set(None if claim.rate_counts is None else list(claim.rate_counts))
    _parallel_counts.set(None if claim.parallel_counts is None else list(claim.parallel_counts))
    _tokens_reserved.set(claim.tokens_reserved)


def rate_counts() -> list[tuple[int, int]] | None:
    """The replayed request's windows (start, count) where the lane counted it (see
    `_rate_counts`); None where the limiter counts it."""
    return _rate_counts.get()


def parallel_counts() -> list[int] | None:
    """The replayed request's gauges' slots in flight (see `_parallel_counts`)."""
    return _parallel_counts.get()


def tokens_reserved() -> tuple[int, list[int]] | None:
    """The tokens the lane reserved for the replayed request (see `_tokens_reserved`)."""
    return _tokens_reserved.get()


def set_rate_counted() -> None:
    """The replay is run again past a limiter that refused it: the request is counted."""
    _rate_counts.set([])
    _parallel_counts.set(None)
    _tokens_reserved.set(None)


def take_hold() -> int | None:
    """The replayed request's hold on its key's budget, once (None: not a replay, or no
    budget)."""
    holder = _budget_hold.get()
    return holder.pop() if holder else None


def admitted() -> bool:
    """Whether this request is a replay the lane admitted, authenticated again without
    LiteLLM's budget checks."""
    return _admitted.get()


def set_admitted() -> None:
    _admitted.set(True)


def claimed_call() -> Any:
    """The lane's outcome for this request's provider call, once (None: call the provider)."""
    claimed = _claimed_call.get()
    return claimed.pop() if claimed else None


def replaying() -> bool:
    """Whether this request replays one the lane served, its provider call still to come (a
    retry after it calls the provider itself)."""
    return bool(_claimed_call.get())


def lane_served() -> bool:
    """Whether this request is one the lane served (its replay or batch logging)."""
    return _lane_served.get()


def mark_lane_served() -> None:
    """What runs in this context is the lane's served requests' (the batch's counts of them)."""
    _lane_served.set(True)


def learn_from(learner: Callable[[dict[str, Any]], None]) -> None:
    """This replay's chat provider call is shown to `learner` (once, before the call)."""
    _learner.set(learner)


def show_call(arguments: dict[str, Any]) -> None:
    """A chat provider call's arguments, for the replay's learner if it has one."""
    learner = _learner.get()
    if learner is not None and _claimed_call.get():
        _learner.set(None)
        learner(arguments)


def force_deployment(deployment_id: str) -> None:
    """The router's next pick in this context is this deployment (a replayed realtime session's:
    the one the lane relayed it to)."""
    _forced_deployment.set([deployment_id])


def forced_deployment() -> str | None:
    """The deployment the lane called for this request, once (None: the router picks)."""
    holder = _forced_deployment.get()
    return holder.pop() if holder else None


def refuse_second_call() -> None:
    """Raises in a replay whose call the fast path would not make (the lane and the fast path
    disagree on a request): the lane called the provider once already, and LiteLLM's own path
    must not call it again. Logged, since it means a request shape the lane should decline."""
    claimed = _claimed_call.get()
    if not claimed:
        return
    claimed.clear()
    logger.warning("fastpath_lane: a served request's replay was declined by the fast path")
    raise RuntimeError("fast lane replay declined by the fast path; not calling the provider")


def learn_messages_headers(
    kwargs: Mapping[str, Any],
    small: dict[str, Any],
    caller: Mapping[str, str],
    headers: tuple[tuple[str, str], ...],
) -> None:
    """On the proxy's path, once the fast path has asked LiteLLM how it sends a `/v1/messages`
    request with these small params (`max_tokens`, thinking, sampling) and client headers to
    this deployment: hand the lane the headers, keyed as the lane keys such requests
    (`lane::messages::decision_key`), so the next one takes the lane. Nothing without a lane."""
    if not _running:
        return
    deployment_id = (kwargs.get("model_info") or {}).get("id")
    if not isinstance(deployment_id, str) or set(caller) - _ANTHROPIC_CLIENT_HEADERS:
        return
    if len(small) == 1 and dict(caller) in ({}, ANTHROPIC_VERSION):
        return  # the usual request: the lane has its headers from when the group was loaded
    dumps = functools.partial(json.dumps, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        small_key = dumps(small) if len(small) > 1 else ""
        key = f"{small_key}\n{dumps(dict(caller))}"
        _native.lane_learn_messages_headers(deployment_id, key, list(headers))
    except (TypeError, ValueError, _native.InvalidRequestError):
        return  # a value JSON cannot hold or a header the lane cannot send: the proxy's
