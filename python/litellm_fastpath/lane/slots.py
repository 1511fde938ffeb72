"""Deployments' slots for calls in flight, one count for the lane and LiteLLM's router.

LiteLLM's router gives a deployment slots when it has `max_parallel_requests` (or an rpm or tpm
it derives them from, or the router's `default_max_parallel_requests`), and refuses a call past
them with a 429 without calling the provider. For a deployment the lane serves, the router's
slot object (the one its `_get_client` finds in its cache) is replaced here by one that takes
its slots from the lane's count (`_native.DeploymentSlots`), so the lane's calls and the proxy's
share one count; the lane holds a slot around its own provider call, and the replay of a request
it served takes none (its call is over).
"""

from __future__ import annotations

import contextvars
from typing import Any

from litellm_fastpath import _native, claims, compat

# The deployments the lane serves that have slots, by id (kept across refreshes: their counts).
_slots: dict[str, _native.DeploymentSlots] = {}
# Per request: the slot objects its replay passed without taking a slot, so that their release
# gives none back.
_passed: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "litellm_fastpath_lane_slots_passed", default=()
)


def limit(router: Any, deployment: dict[str, Any]) -> int | None:
    """The deployment's slots, as LiteLLM's router works them out (None: it has none)."""
    litellm_params = deployment.get("litellm_params") or {}
    found = compat.calculate_max_parallel_requests(
        max_parallel_requests=litellm_params.get("max_parallel_requests"),
        rpm=litellm_params.get("rpm"),
        tpm=litellm_params.get("tpm"),
        default_max_parallel_requests=getattr(router, "default_max_parallel_requests", None),
    )
    return int(found) if found else None


def for_deployment(router: Any, deployment: dict[str, Any]) -> _native.DeploymentSlots | None:
    """The count the lane and the router share for the deployment (None: it has no slots)."""
    slots_limit = limit(router, deployment)
    if slots_limit is None:
        return None
    model_id = str((deployment.get("model_info") or {}).get("id"))
    slots = _slots.get(model_id)
    if slots is None or slots.limit != slots_limit:
        slots = _native.DeploymentSlots(slots_limit)
        _slots[model_id] = slots
    return slots


def keep_installed(router: Any, deployments: dict[str, str]) -> None:
    """Makes the router take its slots for these deployments (id -> model group) from the
    lane's counts, forgetting the others' (each refresh: LiteLLM's cache lets entries expire)."""
    for model_id in set(_slots) - set(deployments):
        del _slots[model_id]
    for model_id, slots in _slots.items():
        key = f"{model_id}_max_parallel_requests_client"
        found = router.cache.get_cache(key=key, local_only=True)
        if isinstance(found, _SharedSlots) and found.slots is slots:
            continue
        shared = _SharedSlots(slots, model_id=model_id, model_group=deployments[model_id])
        # Without a TTL of its own: the in-memory cache's default would drop it in 10 minutes.
        router.cache.set_cache(key=key, value=shared, local_only=True, ttl=_TEN_YEARS_S)


_TEN_YEARS_S = 10 * 365 * 24 * 3600


class _SharedSlots(compat.MaxParallelRequestsLimit):
    """LiteLLM's slot object for a deployment, its count the lane's."""

    def __init__(self, slots: _native.DeploymentSlots, *, model_id: str, model_group: str) -> None:
        # Not LiteLLM's `__init__`: its count is an attribute this class reads from the lane.
        self.max_parallel_requests = slots.limit
        self.model_id = model_id
        self.model_group = model_group
        self.slots = slots

    @property
    def in_flight(self) -> int:
        return self.slots.in_flight

    def acquire(self) -> None:
        if claims.replaying():
            _passed.set((*_passed.get(), id(self)))
            return
        if not self.slots.take():
            _refuse(self.max_parallel_requests, self.model_id, self.model_group)

    def release(self) -> None:
        passed = _passed.get()
        if id(self) in passed:
            index = passed.index(id(self))
            _passed.set(passed[:index] + passed[index + 1 :])
            return
        self.slots.give_back()


def _refuse(slots_limit: int, model_id: str, model_group: str) -> None:
    """LiteLLM's own refusal of a call past a deployment's slots (its 429)."""
    full = compat.MaxParallelRequestsLimit(
        max_parallel_requests=slots_limit, model_id=model_id, model_group=model_group
    )
    full.in_flight = slots_limit
    full.acquire()
    raise RuntimeError("a deployment's slots are all in use")  # LiteLLM's acquire raised first
