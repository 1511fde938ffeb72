"""Key verdicts: in the proxy, once LiteLLM has judged a request's key (its budgets, limits
and model access), the lane takes the verdict for keys whose judgement it can re-apply per
request, so their next requests can take the lane.

A verdict holds what LiteLLM decided once and re-checks per request in Rust: which model groups
the key may call (LiteLLM's own checks, per group) and its expiry. It lasts LiteLLM's auth-cache
TTL and is dropped early when LiteLLM rewrites or drops a cached object it was judged on (a key,
its user, its team, the team membership). Keys with anything LiteLLM counts per request (a
budget or an rpm/tpm/parallel limit on the key, its user, its team or the membership), an
organization, metadata, aliases or permissions keep going to the proxy.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import time
from typing import Any

from litellm_fastpath import _native, claims, compat
from litellm_fastpath.lane import groups, replay

# UserAPIKeyAuth fields that may differ from their defaults on a key the lane serves: identity,
# spend, model access and expiry (re-applied per request in Rust), and the user, team and team
# membership (judged on their own objects below). Anything else (budgets, which LiteLLM
# reserves per request, limits, organizations, metadata, aliases, guardrails...) keeps the key
# on the normal path.
_KEY_FIELDS_REAPPLIED = frozenset(
    {
        "api_key",
        "token",
        "key_name",
        "key_alias",
        "user_id",
        "user_role",
        "user_email",
        "user_spend",
        "team_id",
        "team_alias",
        "team_models",
        "team_spend",
        "team_member",
        "team_member_spend",
        "team_budget_snapshot",
        "user_budget_snapshot",
        "spend",
        "total_spend",
        "models",
        "expires",
        "created_at",
        "updated_at",
        "last_refreshed_at",
        "last_active",
        "parent_otel_span",
        "request_route",
        "via_virtual_key",
        "created_by",
        "updated_by",
        "litellm_budget_table",
    }
)
# The same for the objects a key's user, team and team membership are judged on.
_USER_FIELDS_REAPPLIED = frozenset(
    {
        "user_id",
        "user_alias",
        "team_id",
        "sso_user_id",
        "password",
        "password_reset_required",
        "last_breach_check_at",
        "teams",
        "user_role",
        "spend",
        "model_spend",
        "user_email",
        "models",
        "created_at",
        "updated_at",
    }
)
_TEAM_FIELDS_REAPPLIED = frozenset(
    {
        "team_alias",
        "team_id",
        "admins",
        "members",
        "members_with_roles",
        "team_member_permissions",
        "models",
        "default_team_member_models",
        "access_group_ids",
        "spend",
        "model_spend",
        "created_at",
        "updated_at",
        "last_refreshed_at",
    }
)
_MEMBERSHIP_FIELDS_REAPPLIED = frozenset({"user_id", "team_id", "spend", "total_spend"})
# Roles whose keys may call the chat routes (LiteLLM gives keys without a user the
# internal-user role).
_CALLING_ROLES = frozenset({None, "internal_user"})

# Calls whose key verdicts the lane takes (those of the routes it serves).
_JUDGED_CALL_TYPES = frozenset({"completion", "acompletion", "anthropic_messages"})
# The route LiteLLM's checks are run for (model access does not depend on which chat route).
_CHECKED_ROUTE = "/chat/completions"


async def note_request(user_api_key_dict: Any, data: dict[str, Any], call_type: Any) -> None:
    """The accelerator's pre-call hook: LiteLLM has judged this request's key (and its
    budgets, limits and model access); hand the verdict to the lane, and take a lane ticket."""
    if not claims.lane_running():
        return
    replay.take_ticket(data)
    if str(getattr(call_type, "value", call_type)) not in _JUDGED_CALL_TYPES:
        return
    await _verdicts.note(user_api_key_dict)


class _Verdicts:
    """The verdicts handed to the lane in this worker: the groups each key may call (worked
    out at most every half TTL), and which of LiteLLM's cached objects (by cache key, with what
    the verdict read of them) each rests on."""

    def __init__(self) -> None:
        # Key hash -> (allowed groups, when worked out, of which served groups).
        self.judged: dict[str, tuple[list[str] | None, float, frozenset[str]]] = {}
        # Cache key -> {key hash: the object's fingerprint when judged}.
        self.resting_on: dict[str, dict[str, Any]] = {}

    async def note(self, key: Any) -> None:
        install_invalidation()
        if not _at_defaults(key, _KEY_FIELDS_REAPPLIED):
            return
        if key.api_key == compat.LITELLM_PROXY_MASTER_KEY_ALIAS:
            master = compat.proxy_server().master_key
            if isinstance(master, str):
                # The master key is judged by configuration, once.
                key_hash = hashlib.sha256(master.encode()).hexdigest()
                _native.lane_set_key(key_hash, None, None, 1e9, float(key.spend or 0.0))
            return
        role = getattr(key.user_role, "value", key.user_role)
        if role not in _CALLING_ROLES or not isinstance(key.token, str):
            return
        ttl = _cache_ttl()
        now = time.monotonic()
        served = groups.served_groups()
        judged = self.judged.get(key.token)
        if judged is None or now - judged[1] >= ttl / 2 or judged[2] is not served:
            if judged is None and len(self.judged) >= _MAX_JUDGED:
                self.prune(now - ttl)
            found = await _judge(key)
            if found is None:
                self.forget(key.token)
                return
            allowed, objects = found
            judged = (allowed, now, served)
            self.judged[key.token] = judged
            for cache_key, value in objects:
                self.resting_on.setdefault(cache_key, {})[key.token] = _fingerprint(value)
        # Every time: the key's spend as LiteLLM holds it (the lane adds what it serves).
        _native.lane_set_key(
            key.token, judged[0], _expiry(key.expires), ttl, float(key.spend or 0.0)
        )

    def changed(self, cache_key: str, value: Any) -> None:
        """LiteLLM wrote (or, with None, dropped) a cached object: verdicts that rest on a
        different version of it go."""
        resting = self.resting_on.get(cache_key)
        if not resting:
            return
        fingerprint = None if value is None else _fingerprint(value)
        for key_hash, judged in list(resting.items()):
            if fingerprint != judged:
                del resting[key_hash]
                self.forget(key_hash)

    def forget(self, key_hash: str) -> None:
        if self.judged.pop(key_hash, None) is not None:
            _native.lane_set_key(key_hash, [], None, 0.0, 0.0)

    def prune(self, before: float) -> None:
        """Forgets the verdicts worked out before `before` (in the lane too: their objects go
        unwatched), and the objects only they rested on."""
        for key_hash, (_, judged_at, _) in list(self.judged.items()):
            if judged_at < before:
                self.forget(key_hash)
        for cache_key, resting in list(self.resting_on.items()):
            for key_hash in [k for k in resting if k not in self.judged]:
                del resting[key_hash]
            if not resting:
                del self.resting_on[cache_key]

    def forget_all(self) -> None:
        for key_hash in list(self.judged):
            self.forget(key_hash)
        self.resting_on.clear()


# Verdicts held at once before the stale ones go (as many as the lane's own table holds).
_MAX_JUDGED = 100_000
_verdicts = _Verdicts()


async def _judge(key: Any) -> tuple[list[str] | None, list[tuple[str, Any]]] | None:
    """For a key the lane may serve: the groups it may call (None: every group) and the cached
    objects (cache key, as cached) the verdict rests on; None for any other key."""
    resting_on = [key.token]
    team = user = None
    if key.team_id is not None:
        resting_on.append(f"team_id:{key.team_id}")
        team = await _cached(resting_on[-1], compat.LiteLLM_TeamTableCachedObj)
        if team is None or not _at_defaults(team, _TEAM_FIELDS_REAPPLIED):
            return None
    if key.user_id is not None:
        resting_on.append(key.user_id)
        user = await _cached(resting_on[-1], compat.LiteLLM_UserTable)
        if user is None or not _at_defaults(user, _USER_FIELDS_REAPPLIED):
            return None
    member = key.team_member
    if member is not None and not _at_defaults(member, _MEMBERSHIP_FIELDS_REAPPLIED):
        return None
    objects = [(cache_key, await _cached(cache_key, None)) for cache_key in resting_on]
    if any(value is None for _, value in objects):
        return None  # judged on something no longer cached
    allowed = await _allowed_groups(key, team, user)
    for cache_key, value in objects:
        # Rewritten while the checks ran: the next request judges it afresh.
        if _fingerprint(await _cached(cache_key, None)) != _fingerprint(value):
            return None
    return allowed, objects


async def _allowed_groups(key: Any, team: Any, user: Any) -> list[str] | None:
    """The served groups LiteLLM lets this key call: its key check, and with a team or a user
    its common checks (team blocked, team, member and user model access), per group."""
    if not key.models and team is None and user is None:
        return None
    proxy_server = compat.proxy_server()
    router = proxy_server.llm_router
    allowed = []
    for group in groups.served_groups():
        try:
            if key.models:
                await compat.can_key_call_model(
                    model=group,
                    llm_model_list=router.model_list if router else None,
                    valid_token=key,
                    llm_router=router,
                )
            if team is not None or user is not None:
                await compat.common_checks(
                    request_body={"model": group},
                    team_object=team,
                    user_object=user,
                    end_user_object=None,
                    global_proxy_spend=None,
                    general_settings=proxy_server.general_settings or {},
                    route=_CHECKED_ROUTE,
                    llm_router=router,
                    proxy_logging_obj=proxy_server.proxy_logging_obj,
                    # A copy: the checks stamp what they matched onto the key.
                    valid_token=key.model_copy(),
                    request=_checked_request(),
                    # Nothing to spend against: the key and its owners have no budgets.
                    skip_budget_checks=True,
                )
        except Exception:  # LiteLLM's "not allowed" (or a check it could not make)
            continue
        allowed.append(group)
    return allowed


@functools.cache
def _checked_request() -> Any:
    return replay.asgi_request(_CHECKED_ROUTE, [], b"", None, None)


async def _cached(cache_key: str, model_type: Any) -> Any:
    """An object from LiteLLM's auth cache as its auth just read it (decoded to `model_type`),
    or as cached (`model_type` None)."""
    cache = compat.proxy_server().user_api_key_cache
    try:
        return await cache.async_get_cache(key=cache_key, model_type=model_type)
    except Exception:
        return None


def _at_defaults(value: Any, reapplied: frozenset[str]) -> bool:
    """Every field but those the lane re-applies (or judges) is at its default."""
    defaults = _defaults(type(value))
    if defaults is None:
        return False
    return all(
        name in reapplied or (default is not _REQUIRED and _unset(getattr(value, name), default))
        for name, default in defaults.items()
    )


_REQUIRED = object()


_DEFAULTS: dict[type, dict[str, Any] | None] = {}


def _defaults(cls: type) -> dict[str, Any] | None:
    """A model's fields and their defaults (`_REQUIRED`: none), worked out once per class
    (the check runs on every request LiteLLM judges)."""
    if cls not in _DEFAULTS:
        fields = getattr(cls, "model_fields", None)
        _DEFAULTS[cls] = (
            None
            if fields is None
            else {
                name: _REQUIRED
                if field.is_required()
                else field.get_default(call_default_factory=True)
                for name, field in fields.items()
            }
        )
    return _DEFAULTS[cls]


def _unset(value: Any, default: Any) -> bool:
    """A field at its default; LiteLLM fills some with an empty container instead of None."""
    if value == default:
        return True
    empty: tuple[Any, ...] = ({}, [], ())
    return (value is None and default in empty) or (default is None and value in empty)


def _fingerprint(value: Any) -> Any:
    """What a verdict read of a cached object (as LiteLLM caches it, or decoded: the same JSON
    form), to compare with `==`: every field but spend and clocks."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in _UNJUDGED_FIELDS}
    return value


# Fields LiteLLM rewrites on every request (spend) or refresh (clocks): no verdict rests on them.
_UNJUDGED_FIELDS = frozenset(
    {
        "spend",
        "total_spend",
        "user_spend",
        "team_spend",
        "team_member_spend",
        "model_spend",
        "last_active",
        "last_refreshed_at",
        "updated_at",
        "parent_otel_span",
        "request_route",
        "budget_reservation",
        "matched_model_access_groups",
    }
)


def install_invalidation() -> None:
    """Drop verdicts as LiteLLM rewrites or drops the objects they rest on in this worker's
    auth cache (the writes of its management endpoints, auth and spend updates)."""
    cache = compat.proxy_server().user_api_key_cache
    if getattr(cache, "_litellm_fastpath_watched", False):
        return
    for name in ("set_cache", "async_set_cache"):
        _watch(cache, name, lambda key, value, *_, **__: [(key, value)])
    for name in ("delete_cache", "async_delete_cache", "async_delete_cache_pre_call"):
        _watch(cache, name, lambda key, *_, **__: [(key, None)])
    _watch(cache, "async_delete_cache_keys", lambda keys, *_, **__: [(k, None) for k in keys])
    _watch(cache, "async_set_cache_pipeline", lambda cache_list, *_, **__: list(cache_list))
    _watch(cache, "flush_cache", lambda *_, **__: None)
    cache._litellm_fastpath_watched = True


def _watch(cache: Any, name: str, written: Any) -> None:
    """Wraps one of the cache's writes: `written(*args)` lists the (cache key, value) pairs it
    writes (value None: dropped), or None for all of them."""
    original = getattr(cache, name, None)
    if original is None:
        return

    @functools.wraps(original)
    def watched(*args: Any, **kwargs: Any) -> Any:
        try:
            pairs = written(*args, **kwargs)
        except TypeError:  # called by keyword: look at every verdict
            pairs = None
        if pairs is None:
            _verdicts.forget_all()
        else:
            for cache_key, value in pairs:
                if isinstance(cache_key, str):
                    _verdicts.changed(cache_key, value)
        return original(*args, **kwargs)

    setattr(cache, name, watched)


def _cache_ttl() -> float:
    proxy_server = compat.proxy_server()
    ttl = (proxy_server.general_settings or {}).get("user_api_key_cache_ttl")
    default_ttl = proxy_server.UserAPIKeyCacheTTLEnum.in_memory_cache_ttl.value
    return float(ttl if isinstance(ttl, (int, float)) else default_ttl)


def _expiry(expires: Any) -> float | None:
    if expires is None:
        return None
    if isinstance(expires, str):
        expires = datetime.datetime.fromisoformat(expires)
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=datetime.UTC)
    return float(expires.timestamp())
