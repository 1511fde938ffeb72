"""A deployment's slots for calls in flight as LiteLLM's own router finds and uses them once the
lane shares them (`lane/slots.py`): one count with the lane's, LiteLLM's refusal past it, and
none taken by the replay of a request the lane served. Through the proxy:
`tests/test_lane_proxy.py::test_a_deployments_slots_are_one_count_for_the_lane_and_the_proxy`."""

from __future__ import annotations

import contextvars
from typing import Any

import litellm
import pytest
from litellm import Router

from litellm_fastpath import claims
from litellm_fastpath.lane import slots

DEPLOYMENT: dict[str, Any] = {
    "model_name": "capped",
    "litellm_params": {
        "model": "openai/gpt-4o-mini",
        "api_key": "sk-upstream",
        "api_base": "http://127.0.0.1:9",
        "max_parallel_requests": 2,
    },
}


def router_slot(router: Router) -> Any:
    """The slot object the router's call path finds for the deployment."""
    deployment = router.model_list[0]
    return router._get_client(deployment=deployment, kwargs={}, client_type="max_parallel_requests")


def test_the_router_takes_its_slots_from_the_lanes_count() -> None:
    router = Router(model_list=[DEPLOYMENT])
    deployment = router.model_list[0]
    shared = slots.for_deployment(router, deployment)
    assert shared is not None and shared.limit == 2
    slots.keep_installed(router, {deployment["model_info"]["id"]: "capped"})
    limit = router_slot(router)
    assert shared.take()  # the lane's call
    with limit:  # the proxy's: the second slot
        assert shared.in_flight == 2
        with pytest.raises(litellm.RateLimitError, match="max_parallel_requests=2"):
            limit.__enter__()
        assert not shared.take()
    shared.give_back()
    assert shared.in_flight == 0
    # Installed again only when LiteLLM's cache lost it.
    slots.keep_installed(router, {deployment["model_info"]["id"]: "capped"})
    assert router_slot(router) is limit


def test_a_replay_takes_no_slot_even_when_all_are_in_use() -> None:
    router = Router(model_list=[DEPLOYMENT])
    deployment = router.model_list[0]
    shared = slots.for_deployment(router, deployment)
    assert shared is not None
    slots.keep_installed(router, {deployment["model_info"]["id"]: "capped"})
    limit = router_slot(router)
    assert shared.take() and shared.take()

    def replay() -> None:
        claims._claimed_call.set([object()])  # a served request's outcome, still to be claimed
        with limit:
            assert shared.in_flight == 2
            claims.claimed_call()  # its provider call takes the outcome
        assert shared.in_flight == 2  # nothing given back either

    contextvars.copy_context().run(replay)
    shared.give_back()
    shared.give_back()
    assert shared.in_flight == 0


@pytest.mark.parametrize(
    ("params", "router_default"),
    [
        ({"max_parallel_requests": 3}, None),
        ({"rpm": 40}, None),
        ({"tpm": 120_000}, None),
        ({"rpm": 40, "max_parallel_requests": 5}, 7),
        ({}, 7),
        ({}, None),
    ],
    ids=["max_parallel_requests", "rpm", "tpm", "both-and-default", "default", "none"],
)
def test_the_lane_finds_the_slots_the_router_makes(
    params: dict[str, int], router_default: int | None
) -> None:
    """The deployments the lane gives slots, and how many: those LiteLLM's router makes."""
    litellm_params = {**DEPLOYMENT["litellm_params"], **params}
    if "max_parallel_requests" not in params:
        del litellm_params["max_parallel_requests"]
    deployment = {"model_name": "capped", "litellm_params": litellm_params}
    router = Router(model_list=[deployment], default_max_parallel_requests=router_default)
    made = router_slot(router)
    found = slots.limit(router, router.model_list[0])
    assert found == (None if made is None else made.max_parallel_requests)
