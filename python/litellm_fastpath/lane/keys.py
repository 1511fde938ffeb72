"""Key verdicts: in the proxy, once LiteLLM has judged a request's key (its budgets, limits
and model access), the lane takes the verdict for keys whose judgement it can re-apply per
request, so their next requests can take the lane.

A verdict holds what LiteLLM decided once and re-checks per request in Rust: which model groups
the key may call (LiteLLM's own checks, per group) and its expiry. It lasts LiteLLM's auth-cache
TTL and is dropped early when LiteLLM rewrites or drops a cached object it was judged on (a key,
its user, its team, the team membership).

Budgets (`max_budget` on the key, its user, its team or the team membership): the verdict also
carries the key's headroom over LiteLLM's own budget counters (`spend:*`, in Redis when the
proxy has one), read again after every request of the key LiteLLM judges, the lane's replays
included; see `lane::budget` in Rust for how the lane admits against it. rpm limits on the same
four: the verdict carries the limiter's windows (see `limits`), read once the limiter counted
the request; with the proxy's Redis, tpm limits on the same four (reserved in the limiter's
token windows) and a key's parallel-request limit (against the limiter's gauge). Keys with
anything else LiteLLM counts or checks per request (tpm or parallel limits without Redis,
budget windows, soft budgets, per-model budgets), an organization, metadata, aliases or
permissions keep going to the proxy.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import time
from typing import Any

from litellm_fastpath import _native, claims, compat
from litellm_fastpath.lane import groups, limits, replay

# UserAPIKeyAuth fields that may differ from their defaults on a key the lane serves: identity,
# spend, model access, expiry and budget caps (re-applied per request in Rust), and the user,
# team and team membership (judged on their own objects below). Anything else (limits, budget
# windows, organizations, metadata, aliases, guardrails...) keeps the key on the normal path.
_KEY_FIELDS_REAPPLIED = frozenset(
    {
        "api_key",
        # Budgets, on the key and as LiteLLM's auth copies them from the user and team (the
        # lane re-applies them against LiteLLM's counters; see `_budget_counters`).
        "max_budget",
        "budget_duration",
        "budget_reset_at",
        "team_max_budget",
        "user_max_budget",
        # This request's reservation (per request, LiteLLM's own).
        "budget_reservation",
        # rpm limits, as LiteLLM's auth copies them from the user, team and membership (the
        # lane re-applies them against the limiter's windows; see `limits`).
        "rpm_limit",
        "user_rpm_limit",
        "team_rpm_limit",
        "team_member_rpm_limit",
        # tpm limits, the same way (with the proxy's Redis: the lane reserves LiteLLM's
        # estimate in the limiter's token windows; see `limits`).
        "tpm_limit",
        "user_tpm_limit",
        "team_tpm_limit",
        "team_member_tpm_limit",
        # The key's parallel-request limit (with the proxy's Redis: the lane takes its slot in
        # the limiter's gauge; see `limits`).
        "max_parallel_requests",
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
        "max_budget",
        "budget_duration",
        "budget_reset_at",
        "rpm_limit",
        "tpm_limit",
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
        "max_budget",
        "budget_duration",
        "budget_reset_at",
        "rpm_limit",
        "tpm_limit",
        "default_team_member_models",
        "access_group_ids",
        "spend",
        "model_spend",
        "created_at",
        "updated_at",
        "last_refreshed_at",
    }
)
_MEMBERSHIP_FIELDS_REAPPLIED = frozenset(
    {"user_id", "team_id", "spend", "total_spend", "budget_id", "litellm_budget_table"}
)
# A team membership's budget row: its cap (and reset period) alone.
_MEMBER_BUDGET_FIELDS_REAPPLIED = frozenset(
    {"budget_id", "max_budget", "budget_duration", "rpm_limit", "tpm_limit"}
)
# Roles whose keys may call the chat routes (LiteLLM gives keys without a user the
# internal-user role).
_CALLING_ROLES = frozenset({None, "internal_user"})

# Calls whose key verdicts the lane takes (those of the routes it serves).
_JUDGED_CALL_TYPES = frozenset({"completion", "acompletion", "anthropic_messages", "_arealtime"})
# The route LiteLLM's checks are run for (model access does not depend on which chat route).
_CHECKED_ROUTE = "/chat/completions"


async def note_request(user_api_key_dict: Any, data: dict[str, Any], call_type: Any) -> None:
    """The accelerator's pre-call hook: a replay claims its ticket; and where LiteLLM's rate
    limiter is not one the lane reads (which then hands over the verdict once it counted the
    request, see `limits.configure`), LiteLLM has judged this request's key: hand the verdict
    to the lane."""
    if not claims.lane_running():
        return
    replay.take_ticket(data)
    if not limits.hooked():
        await note_judged(user_api_key_dict, data, call_type)


async def note_judged(user_api_key_dict: Any, data: dict[str, Any], call_type: Any) -> None:
    """LiteLLM has judged this request's key (its budgets, limits and model access, the rate
    limiter's count included): hand the verdict to the lane, releasing a replay's hold."""
    if not claims.lane_running():
        return
    hold = claims.take_hold()
    try:
        if str(getattr(call_type, "value", call_type)) in _JUDGED_CALL_TYPES:
            await _verdicts.note(user_api_key_dict, hold)
    finally:
        if hold is not None:
            # Released with the verdict above when there was one; else here (no-op twice).
            _native.lane_release_hold(hold)


async def note_batched(user_api_key_dict: Any, hold: int) -> None:
    """A request holding its key's budget is accounted for in the lane's batch, its budget
    reservation made (`replay`): hand the verdict to the lane as its replay's hook would,
    releasing the hold (also when that raises)."""
    try:
        await _verdicts.note(user_api_key_dict, hold)
    finally:
        _native.lane_release_hold(hold)


@dataclasses.dataclass(frozen=True)
class _Judged:
    """A key's verdict in this worker: the groups it may call (None: every group), when and
    against which served groups they were worked out, and its budget counters (empty: none)."""

    allowed: list[str] | None
    at: float
    served: frozenset[str]
    counters: tuple[_Counter, ...]
    rate_limits: limits.Limits


@dataclasses.dataclass(frozen=True)
class _Counter:
    """One of LiteLLM's budget counters for a key: its cache key, cap and the spend LiteLLM
    falls back to while it is not loaded."""

    key: str
    max_budget: float
    fallback_spend: float


@dataclasses.dataclass(frozen=True)
class _Found:
    allowed: list[str] | None
    objects: list[tuple[str, Any]]
    counters: tuple[_Counter, ...]
    rate_limits: limits.Limits


class _Verdicts:
    """The verdicts handed to the lane in this worker: the groups each key may call (worked
    out at most every half TTL), and which of LiteLLM's cached objects (by cache key, with what
    the verdict read of them) each rests on."""

    def __init__(self) -> None:
        self.judged: dict[str, _Judged] = {}
        # Cache key -> {key hash: the object's fingerprint when judged}.
        self.resting_on: dict[str, dict[str, Any]] = {}

    async def note(self, key: Any, hold: int | None) -> None:
        """`hold`: the lane's hold for this request if it is a replay (released once the
        key's headroom is read again, after the replay's reservation)."""
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
        if judged is None or now - judged.at >= ttl / 2 or judged.served != served:
            if judged is None and len(self.judged) >= _MAX_JUDGED:
                self.prune(now - ttl)
            found = await _judge(key)
            if found is None:
                self.forget(key.token)
                return
            judged = _Judged(found.allowed, now, served, found.counters, found.rate_limits)
            self.judged[key.token] = judged
            for cache_key, value in found.objects:
                self.resting_on.setdefault(cache_key, {})[key.token] = _fingerprint(value)
        headroom = None if not judged.counters else await _headroom(judged.counters)
        rates = None if not judged.rate_limits else limits.verdict_rates(judged.rate_limits)
        # Every time: the key's spend as LiteLLM holds it (the lane adds what it serves), and
        # its headroom once this request's reservation is in LiteLLM's counters.
        _native.lane_set_key(
            key.token,
            judged.allowed,
            _expiry(key.expires),
            ttl,
            float(key.spend or 0.0),
            headroom=headroom,
            key_headers=_key_headers(key),
            rates=rates,
            release=hold,
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
        for key_hash, judged in list(self.judged.items()):
            if judged.at < before:
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


def judged(key_hash: str) -> bool:
    """Whether this worker holds a verdict on the key (its replays may skip LiteLLM's checks,
    see `reauth`)."""
    return key_hash in _verdicts.judged


def limits_held(key: Any) -> limits.Limits | None:
    """The rate limits of the key's verdict in this worker, if it has one."""
    return limits_held_by_hash(getattr(key, "token", None))


def limits_held_by_hash(key_hash: str | None) -> limits.Limits | None:
    """The rate limits of the verdict on the key with this hash in this worker, if any."""
    judged = _verdicts.judged.get(key_hash or "")
    return None if judged is None else judged.rate_limits


def _key_headers(key: Any) -> list[tuple[str, str]]:
    """The proxy's headers about the key's limits, as its `get_custom_headers` writes them (a
    limit the key does not have is left out)."""
    named = (
        ("x-litellm-key-tpm-limit", key.tpm_limit),
        ("x-litellm-key-rpm-limit", key.rpm_limit),
        ("x-litellm-key-max-budget", key.max_budget),
    )
    return [(name, str(value)) for name, value in named if value is not None]


async def _judge(key: Any) -> _Found | None:
    """For a key the lane may serve: the groups it may call (None: every group), the cached
    objects (cache key, as cached) the verdict rests on, and its budget counters; None for any
    other key."""
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
    if not _membership_reapplied(key.team_member):
        return None
    if team is not None and user is not None:
        # Where LiteLLM's reservation reads the membership's budget from.
        membership_key = compat.team_membership_reservation_cache_key(
            user_id=key.user_id, team_id=key.team_id
        )
        membership = await _cached(membership_key, None)
        if membership is not None:
            if not _membership_reapplied(membership):
                return None
            resting_on.append(membership_key)
    objects = [(cache_key, await _cached(cache_key, None)) for cache_key in resting_on]
    if any(value is None for _, value in objects):
        return None  # judged on something no longer cached
    counters = await _budget_counters(key, team, user)
    found_limits = limits.limits_of(key)
    if counters is None or found_limits is None:
        return None
    allowed = await _allowed_groups(key, team, user)
    for cache_key, value in objects:
        # Rewritten while the checks ran: the next request judges it afresh.
        if _fingerprint(await _cached(cache_key, None)) != _fingerprint(value):
            return None
    return _Found(allowed, objects, counters, found_limits)


def _membership_reapplied(membership: Any) -> bool:
    """A team membership the lane can re-apply: a budget cap at most (a string: LiteLLM's
    sentinel for no membership row)."""
    if membership is None or isinstance(membership, str):
        return True
    if isinstance(membership, dict):
        try:
            membership = compat.LiteLLM_TeamMembership(**membership)
        except Exception:
            return False
    if not _at_defaults(membership, _MEMBERSHIP_FIELDS_REAPPLIED):
        return False
    budget = membership.litellm_budget_table
    return budget is None or _at_defaults(budget, _MEMBER_BUDGET_FIELDS_REAPPLIED)


async def _budget_counters(key: Any, team: Any, user: Any) -> tuple[_Counter, ...] | None:
    """The counters LiteLLM's budget reservation charges for the key's requests (its own
    `_get_budget_counters`), or None when the lane leaves them to the proxy: budget windows,
    or a proxy that rejects when a reservation cannot be written."""
    proxy_server = compat.proxy_server()
    settings = proxy_server.general_settings or {}
    found = await compat.get_budget_counters(
        request_body={},
        valid_token=key,
        team_object=team,
        user_object=user,
        prisma_client=proxy_server.prisma_client,
        user_api_key_cache=proxy_server.user_api_key_cache,
        proxy_logging_obj=proxy_server.proxy_logging_obj,
        apply_user_budget_to_team_keys=settings.get("apply_user_budget_to_team_keys") is True,
    )
    if not found:
        return ()
    if settings.get("fail_closed_budget_enforcement") is True or any(
        counter.window_duration is not None for counter in found
    ):
        return None
    return tuple(
        _Counter(counter.counter_key, counter.max_budget, counter.fallback_spend)
        for counter in found
    )


async def _headroom(counters: tuple[_Counter, ...]) -> float:
    """`min(max_budget - spend)` over the counters, read as LiteLLM's reservation reads them
    (Redis first where the proxy has it)."""
    spent = [
        await compat.get_current_spend(
            counter_key=counter.key, fallback_spend=counter.fallback_spend
        )
        for counter in counters
    ]
    pairs = zip(counters, spent, strict=True)
    return min(counter.max_budget - float(value) for counter, value in pairs)


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
