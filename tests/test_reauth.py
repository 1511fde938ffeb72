"""A replay's auth without LiteLLM's checks (`lane.reauth`) against LiteLLM's own auth, in one
process: for every key shape the lane serves, the same request authenticated both ways gives the
same auth object, the same body (auth rewrites it) and the same request state, the budget
reservation included. Keys live in LiteLLM's auth cache with a stand-in database, as the proxy
tests seed them (`devtools.seeded_keys`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from litellm_fastpath import compat
from litellm_fastpath.lane import reauth, replay

MODEL = "rust-openai"
CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
MASTER_KEY = "sk-master-reauth"
# Key shape -> the objects seeded for it (its key is `sk-reauth-<shape>`).
SHAPES: dict[str, dict[str, Any]] = {
    "key": {},
    "key-models": {"keys": {"models": [MODEL]}},
    "key-budget": {"keys": {"max_budget": 10.0, "spend": 0.25}},
    "key-rpm": {"keys": {"rpm_limit": 1000}},
    "user": {"keys": {"user_id": "u-reauth"}, "users": {"u-reauth": {"max_budget": 5.0}}},
    "team": {
        "keys": {"team_id": "t-reauth", "team_spend": 0.5},
        "teams": {"t-reauth": {"max_budget": 50.0, "rpm_limit": 500, "spend": 0.5}},
    },
    # The team object refreshed after the key was cached: auth copies its values onto the key.
    "team-refreshed": {
        "keys": {"team_id": "t-fresh", "last_refreshed_at": 1.0},
        "teams": {"t-fresh": {"team_alias": "fresh", "max_budget": 9.0, "last_refreshed_at": 2.0}},
    },
    "user-team-member": {
        "keys": {"user_id": "u-member", "team_id": "t-member", "max_budget": 20.0},
        "users": {"u-member": {}},
        "teams": {"t-member": {"models": [MODEL]}},
        "memberships": [{"user_id": "u-member", "team_id": "t-member", "spend": 0.1}],
    },
}
# Differ per call by nature: clocks and the reservation's own ids.
_PER_CALL = {"parent_otel_span", "last_refreshed_at"}


@pytest.fixture(scope="module")
def proxy() -> Iterator[Any]:
    """LiteLLM's proxy module with a master key, a router holding the model, the stand-in
    database and the shapes' objects in its auth cache; restored afterwards."""
    import litellm
    from litellm.proxy import proxy_server

    from devtools import seeded_keys

    saved = {
        name: getattr(proxy_server, name)
        for name in ("master_key", "prisma_client", "llm_router", "llm_model_list")
    }
    models = [
        {
            "model_name": MODEL,
            "litellm_params": {
                "model": "openai/gpt-4o-mini",
                "api_key": "sk-upstream",
                "api_base": "http://127.0.0.1:9",
            },
            "model_info": {"id": "reauth-deployment"},
        }
    ]
    proxy_server.master_key = MASTER_KEY
    proxy_server.prisma_client = seeded_keys._NoDatabase()
    proxy_server.llm_router = litellm.Router(model_list=models)
    proxy_server.llm_model_list = models
    for shape, objects in SHAPES.items():
        seeded_keys.seed({**objects, "keys": {f"sk-reauth-{shape}": dict(objects.get("keys", {}))}})
    try:
        yield proxy_server
    finally:
        for name, value in saved.items():
            setattr(proxy_server, name, value)


def request(path: str, key: str, body: dict[str, Any]) -> Any:
    auth = ("x-api-key", key) if path == MESSAGES else ("authorization", f"Bearer {key}")
    headers = [("content-type", "application/json"), auth]
    return replay.asgi_request(
        path, headers, json.dumps(body).encode(), ("127.0.0.1", 50000), ("127.0.0.1", 4000)
    )


def judged(_: str) -> bool:
    return True


async def authenticated_both_ways(path: str, key: str, body: dict[str, Any]) -> list[Any]:
    """[(auth object, body after auth, request state)] by LiteLLM's auth, then by `reauth`;
    each reservation released before the next auth reads the counters."""
    found = []
    for how in ("litellm", "reauth"):
        req = request(path, key, json.loads(json.dumps(body)))
        obj = await (
            replay.litellm_auth(req) if how == "litellm" else reauth.authenticate(req, judged)
        )
        assert obj is not None, f"{how} gave no auth object for {key} on {path}"
        data, _ = await compat.read_request_body_deferring_parse_failure(request=req)
        state = dict(req.state._state)
        found.append((obj, data, state))
        if obj.budget_reservation is not None:
            await compat.release_unbound_budget_reservation(obj.budget_reservation)
    return found


def comparable_key(obj: Any) -> dict[str, Any]:
    dumped = obj.model_dump(mode="json", exclude=_PER_CALL)
    dumped["budget_reservation"] = _reservation(dumped.get("budget_reservation"))
    return dumped


def _reservation(reservation: Any) -> Any:
    """A reservation without its per-call ids and clocks: what it reserves, on which counters."""
    if not isinstance(reservation, dict):
        return reservation
    return {
        k: v
        for k, v in reservation.items()
        if not any(word in k for word in ("id", "time", "lease", "expires", "_at"))
    }


def comparable_state(state: dict[str, Any]) -> dict[str, Any]:
    found = {k: v for k, v in state.items() if k not in ("litellm_received_at", "principal")}
    found["budget_reservation"] = _reservation(found.get("budget_reservation"))
    principal = state.get("principal")
    found["principal"] = None if principal is None else repr(_principal(principal))
    return found


def _principal(principal: Any) -> Any:
    dump = getattr(principal, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    return (
        {k: v for k, v in vars(principal).items()} if hasattr(principal, "__dict__") else principal
    )


BODIES = {
    CHAT: {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9},
    MESSAGES: {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9},
}


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
@pytest.mark.parametrize("shape", [*sorted(SHAPES), "master"])
def test_a_replay_is_authenticated_as_litellm_authenticates_it(
    proxy: Any, shape: str, path: str
) -> None:
    key = MASTER_KEY if shape == "master" else f"sk-reauth-{shape}"
    (real, real_body, real_state), (ours, our_body, our_state) = asyncio.run(
        authenticated_both_ways(path, key, BODIES[path])
    )
    assert comparable_key(ours) == comparable_key(real)
    assert our_body == real_body
    assert comparable_state(our_state) == comparable_state(real_state)


def test_the_master_key_without_a_database_is_authenticated_as_litellm_does(proxy: Any) -> None:
    """Without a database LiteLLM's auth builds the master key's object on every request."""
    saved, proxy.prisma_client = proxy.prisma_client, None
    try:
        (real, real_body, real_state), (ours, our_body, our_state) = asyncio.run(
            authenticated_both_ways(CHAT, MASTER_KEY, BODIES[CHAT])
        )
    finally:
        proxy.prisma_client = saved
    assert comparable_key(ours) == comparable_key(real)
    assert our_body == real_body
    assert comparable_state(our_state) == comparable_state(real_state)


@pytest.mark.parametrize(
    ("why", "key", "body"),
    [
        ("end_user", "sk-reauth-key", {**BODIES[CHAT], "user": "end-user-1"}),
        ("key_object", "sk-reauth-unknown", BODIES[CHAT]),
    ],
)
def test_other_requests_get_litellm_s_auth(proxy: Any, why: str, key: str, body: Any) -> None:
    before = reauth.fallbacks[why]
    assert asyncio.run(reauth.authenticate(request(CHAT, key, body), judged)) is None
    assert reauth.fallbacks[why] == before + 1


def test_a_key_without_a_verdict_gets_litellm_s_auth(proxy: Any) -> None:
    before = reauth.fallbacks["key"]
    req = request(CHAT, "sk-reauth-key", BODIES[CHAT])
    assert asyncio.run(reauth.authenticate(req, lambda _: False)) is None
    assert reauth.fallbacks["key"] == before + 1


def test_a_proxy_with_alerting_gets_litellm_s_auth(proxy: Any) -> None:
    """Auth's budget checks queue alerts: with alerting on, the checks are not skipped."""
    logging_obj = proxy.proxy_logging_obj
    saved, logging_obj.alerting = logging_obj.alerting, ["slack"]
    before = reauth.fallbacks["proxy"]
    try:
        req = request(CHAT, "sk-reauth-key", BODIES[CHAT])
        assert asyncio.run(reauth.authenticate(req, judged)) is None
    finally:
        logging_obj.alerting = saved
    assert reauth.fallbacks["proxy"] == before + 1


def test_a_virtual_key_without_a_database_gets_litellm_s_auth(proxy: Any) -> None:
    """LiteLLM refuses virtual keys without a database: its auth says so, not the mirror."""
    saved, proxy.prisma_client = proxy.prisma_client, None
    before = reauth.fallbacks["database"]
    try:
        req = request(CHAT, "sk-reauth-key", BODIES[CHAT])
        assert asyncio.run(reauth.authenticate(req, judged)) is None
    finally:
        proxy.prisma_client = saved
    assert reauth.fallbacks["database"] == before + 1


def test_a_body_that_does_not_parse_gets_litellm_s_auth(proxy: Any) -> None:
    before = reauth.fallbacks["body"]
    headers = [("content-type", "application/json"), ("authorization", "Bearer sk-reauth-key")]
    req = replay.asgi_request(CHAT, headers, b"{not json", ("127.0.0.1", 50000), None)
    assert asyncio.run(reauth.authenticate(req, judged)) is None
    assert reauth.fallbacks["body"] == before + 1


def test_an_error_before_the_reservation_gets_litellm_s_auth(proxy: Any) -> None:
    """A cached key whose team LiteLLM's cache no longer holds: the mirror's team read fails
    before anything was reserved, and LiteLLM's auth decides."""
    proxy.user_api_key_cache.delete_cache("team_id:t-reauth")
    before = reauth.fallbacks["error"]
    try:
        req = request(CHAT, "sk-reauth-team", BODIES[CHAT])
        assert asyncio.run(reauth.authenticate(req, judged)) is None
    finally:
        seeded_team = SHAPES["team"]
        from devtools import seeded_keys

        seeded_keys.seed({"teams": seeded_team["teams"]})
    assert reauth.fallbacks["error"] == before + 1
