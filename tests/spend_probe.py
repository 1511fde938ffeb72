"""A proxy callback for the budget tests: `callbacks: ["tests.spend_probe.probe"]`.

LiteLLM keeps virtual keys, users and teams in Postgres, which this machine cannot run (see
`tests.lane_keys`). Once startup is over this module stands in a database object whose every use
fails, as during an outage, except the in-memory queue LiteLLM's spend writer puts spend-log rows
on (`spend_log_transactions` and its lock, as `enqueue_spend_logs` uses them), and registers
LiteLLM's cost callback as the proxy does at startup when it has a database. It adds routes to
the proxy's app:

- `POST /spend-probe/seed` `{"keys": {key: fields}, "users": {id: fields}, "teams": {id: fields}}`
  puts those objects into the proxy's auth cache, where the database would have put them.
- `POST /spend-probe/settlement` `{"hold": true|false}` holds LiteLLM's cost callback (the one
  that settles a request's budget reservation) before it starts, or lets it run: the state
  between an answer and its settlement, where a callback still running leaves it, can be looked
  at and tried.
- `POST /spend-probe/counter`, `/spend-probe/window`, `/spend-probe/rate-counter`: a budget
  counter, a rate limiter window's end, a rate limiter counter set, as another instance or path
  would move them.
- `GET /spend-probe/snapshot`: LiteLLM's spend state in this worker (see `snapshot`).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from litellm.caching import redis_batch
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy import proxy_server
from litellm.proxy._types import (
    LiteLLM_TeamMembership,
    LiteLLM_TeamTableCachedObj,
    LiteLLM_UserTable,
    UserAPIKeyAuth,
    hash_token,
)
from litellm.proxy.common_utils.user_api_key_cache import team_membership_reservation_cache_key
from litellm.proxy.db.db_spend_update_writer import DBSpendUpdateWriter
from litellm.proxy.hooks.parallel_request_limiter_v3 import _PROXY_MaxParallelRequestsHandler_v3
from litellm.proxy.hooks.proxy_track_cost_callback import _ProxyDBLogger
from litellm.proxy.spend_tracking import budget_reservation

from litellm_fastpath import _native, claims
from litellm_fastpath.lane import accounting

SEED_PATH = "/spend-probe/seed"
SETTLEMENT_PATH = "/spend-probe/settlement"
COUNTER_PATH = "/spend-probe/counter"
WINDOW_PATH = "/spend-probe/window"
RATE_COUNTER_PATH = "/spend-probe/rate-counter"
SNAPSHOT_PATH = "/spend-probe/snapshot"

# Fields that differ on every request (ids, clocks, durations) or by proxy (its own address),
# wherever they appear in a queued row.
VOLATILE_FIELDS = frozenset(
    {
        "request_id",
        "session_id",
        "startTime",
        "endTime",
        "completionStartTime",
        "request_duration_ms",
        "litellm_call_id",
        "id",
        "trace_id",
        "x-litellm-call-id",
        "x-litellm-response-duration-ms",
        "x-litellm-overhead-duration-ms",
        "litellm_overhead_time_ms",
        "queue_time_seconds",
        "api_base_response_time",
        "response_time",
        "date",
        "llm_provider-date",
        "host",
        "endpoint",
        "url",
        "traceback",  # a failure's stack: the frames of whichever code raised it
    }
)
# A rate limit's window end, quoted in the error a refused request's spend row keeps.
_WINDOW_END = re.compile(r"Limit resets at: [0-9: -]+ UTC")
# Spend-log fields LiteLLM stores as JSON text: compared as the values they hold.
_JSON_TEXT_FIELDS = frozenset({"metadata", "messages", "response", "proxy_server_request"})


class _SpendQueueOnlyDatabase:
    """Stands in for the Prisma client: the in-memory spend-log queue works, anything else fails
    like a database that is down (LiteLLM then judges and counts from its caches alone)."""

    def __init__(self) -> None:
        self.spend_log_transactions: list[Mapping[str, Any]] = []
        self._spend_log_transactions_lock = asyncio.Lock()

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("no database on this machine")


_database = _SpendQueueOnlyDatabase()
# What was seeded, by kind: its name in a snapshot (a key's hash, a user or team id) -> its
# entry in the auth cache.
_seeded: dict[str, dict[str, str]] = {"key": {}, "user": {}, "team": {}}
# The reservations auth made that are not finalized yet (LiteLLM finalizes them in place).
_reservations: list[dict[str, Any]] = []
_settlement_open = asyncio.Event()
_settlement_open.set()
# LiteLLM's post-call work, by name: how often it started and how often it ended.
_started: collections.Counter[str] = collections.Counter()
_finished: collections.Counter[str] = collections.Counter()
_reserve = budget_reservation.reserve_budget_for_request


def _tracked(
    name: str, work: Callable[..., Awaitable[Any]], gate: asyncio.Event | None = None
) -> Callable[..., Awaitable[Any]]:
    """`work`, counted under `name`, starting only once `gate` (if any) is open."""

    @functools.wraps(work)
    async def run(*args: Any, **kwargs: Any) -> Any:
        _started[name] += 1
        try:
            if gate is not None:
                await gate.wait()
            return await work(*args, **kwargs)
        finally:
            _finished[name] += 1

    return run


def _tracked_from_call(
    name: str, work: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    """`work` that LiteLLM starts as a task (fire and forget), counted under `name` from the
    call that creates it: counted once it runs, it could be pending and not counted yet when
    the work that created it has finished."""

    async def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return await work(*args, **kwargs)
        finally:
            _finished[name] += 1

    @functools.wraps(work)
    def start(*args: Any, **kwargs: Any) -> Awaitable[Any]:
        _started[name] += 1
        return run(*args, **kwargs)

    return start


async def _reserve_and_remember(*args: Any, **kwargs: Any) -> dict[str, Any] | None:
    reservation = await _reserve(*args, **kwargs)
    if reservation is not None:
        _reservations.append(reservation)
    return reservation


def _seed(body: Mapping[str, Any]) -> None:
    cache = proxy_server.user_api_key_cache
    for key, fields in body.get("keys", {}).items():
        token = hash_token(key)
        cache.set_cache(key=token, value=UserAPIKeyAuth(token=token, **fields), ttl=3600)
        _seeded["key"][token] = token
    for user_id, fields in body.get("users", {}).items():
        cache.set_cache(key=user_id, value=LiteLLM_UserTable(user_id=user_id, **fields), ttl=3600)
        _seeded["user"][user_id] = user_id
    for team_id, fields in body.get("teams", {}).items():
        team = LiteLLM_TeamTableCachedObj(team_id=team_id, **fields)
        cache.set_cache(key=f"team_id:{team_id}", value=team, ttl=3600)
        _seeded["team"][team_id] = f"team_id:{team_id}"
    for fields in body.get("memberships", []):
        membership = LiteLLM_TeamMembership(**fields)
        key = team_membership_reservation_cache_key(
            user_id=membership.user_id, team_id=membership.team_id
        )
        cache.set_cache(key=key, value=membership, ttl=3600)


def _rounded(value: Any) -> Any:
    """Float sums differ in their last bits with the order of additions (async callbacks)."""
    if isinstance(value, float) and math.isfinite(value):
        return round(value, 12)
    return value


def _stable(value: Any) -> Any:
    """`value` as plain data, without the fields that differ per request."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, Mapping):
        return {
            str(k): _stable(json.loads(v) if k in _JSON_TEXT_FIELDS and _is_json(v) else v)
            for k, v in value.items()
            if k not in VOLATILE_FIELDS
        }
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if hasattr(value, "value") and type(value).__module__.startswith("litellm"):
        return value.value  # LiteLLM's enums
    if isinstance(value, str):
        return _WINDOW_END.sub("Limit resets at: T", value)
    return _rounded(value)


def _is_json(text: Any) -> bool:
    return isinstance(text, str) and text[:1] in ("{", "[")


def _spend(value: Any) -> Any:
    spend = value.get("spend") if isinstance(value, dict) else getattr(value, "spend", None)
    return _rounded(spend)


def _queued(queue: asyncio.Queue[Any]) -> list[Any]:
    """What an asyncio queue holds, without taking it off."""
    return [_stable(item) for item in queue._queue]  # type: ignore[attr-defined]


def _in_memory(cache: Any, wanted: Callable[[str], bool]) -> dict[str, Any]:
    entries = cache.in_memory_cache.cache_dict
    return {key: _rounded(entries[key]) for key in sorted(entries) if wanted(key)}


def _is_spend_counter(key: str) -> bool:
    return key.startswith("spend:")


def _is_rate_limit_counter(key: str) -> bool:
    # The v3 limiter's `{descriptor:value}:requests|tokens|...`; its windows' starts are clocks.
    return key.startswith("{") and not key.endswith(":window")


async def _redis_counters(cache: Any) -> dict[str, Any] | None:
    """The spend and rate-limit counters in Redis, when the proxy has one (a parallel-request
    gauge as its slots in flight)."""
    redis = cache.redis_cache
    if redis is None:
        return None
    client = redis.init_async_client()
    found: dict[str, Any] = {}
    async for raw in client.scan_iter(match="*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        if not (_is_spend_counter(key) or _is_rate_limit_counter(key)):
            continue
        kind = await client.type(key)
        if kind in (b"zset", "zset"):
            # The limiter's parallel-request gauge: how many slots are in flight.
            found[key] = await client.zcard(key)
            continue
        value = await client.get(key) if kind in (b"string", "string") else None
        if value is not None:
            text = value.decode() if isinstance(value, bytes) else value
            found[key] = _rounded(float(text))
    return dict(sorted(found.items()))


def _mentions(value: Any, names: frozenset[str]) -> bool:
    """Whether `value` names any of `names` (a key hash, a user or team id), as a value or
    inside a counter's or a queue entry's key."""
    if isinstance(value, dict):
        return any(_mentions(k, names) or _mentions(v, names) for k, v in value.items())
    if isinstance(value, list):
        return any(_mentions(v, names) for v in value)
    if isinstance(value, str):
        return value in names or any(f":{name}" in value for name in names)
    return False


def _about(value: Any, names: frozenset[str]) -> Any:
    """The entries of `value` that mention `names`, lists in a canonical order (the callbacks
    of requests in flight together finish in any order)."""
    if isinstance(value, dict):
        return {
            k: _about(v, names)
            for k, v in value.items()
            if _mentions(k, names) or _mentions(v, names)
        }
    if isinstance(value, list):
        kept = [v for v in value if _mentions(v, names)]
        return sorted(kept, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    return value


def _post_call_writes_pending() -> int:
    """Redis writes LiteLLM's post-call work declared and has not seen land yet (a pipeline in
    flight counts as one): its request's post-call pipeline goes out once every success
    callback ran, or on a deadline, and its answers then rewrite the worker's copies."""
    return sum(
        batch.pending + batch._lock.locked()
        for batches in tuple(redis_batch._open_post_call)
        for batch in batches._post_call.values()
    )


async def snapshot(about: str = "") -> dict[str, Any]:
    """LiteLLM's spend state in this worker, about the keys (hashes), users and teams named in
    `about` (comma-separated): their spend in the auth cache; the `spend:*` budget counters;
    reservations not finalized yet; the spend-log rows queued for the database and the spend
    writer's queues (key/user/team/org/tag/daily updates), read without draining them; the v3
    rate limiter's counters; the counters in Redis when the proxy has one. Then, for the whole
    worker: the reservations still open, how often LiteLLM's post-call work started and ended,
    and the gateway request counts its billable-request middleware folded (by category and
    route, not yet drained to the database)."""
    names = frozenset(filter(None, about.split(",")))
    if claims.lane_running():
        # The lane answers first and its replays reserve afterwards: look once they have.
        deadline = time.monotonic() + 10
        while _native.lane_backlog() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
    cache = proxy_server.user_api_key_cache
    writer = proxy_server.proxy_logging_obj.db_spend_update_writer
    limiter_cache = proxy_server.proxy_logging_obj.internal_usage_cache.dual_cache
    async with _database._spend_log_transactions_lock:
        rows = [row for row in _database.spend_log_transactions if _mentions(dict(row), names)]
    # Taken with the worker's copies below, no await between: a post-call pipeline that lands
    # later rewrites those copies (from what Redis answers) after the cost callback finished.
    post_call_writes = _post_call_writes_pending()
    _reservations[:] = [r for r in _reservations if r.get("finalized") is not True]
    open_reservations = [
        {
            "reserved_cost": _rounded(r.get("reserved_cost")),
            "callback_bound": r.get("callback_bound"),
            "counters": sorted(str(e.get("counter_key")) for e in r.get("entries") or []),
        }
        for r in _reservations
    ]
    state = {
        **{
            f"{kind}_spend": {
                name: _spend(cache.get_cache(key=entry)) for name, entry in seeded.items()
            }
            for kind, seeded in _seeded.items()
        },
        "spend_counters": _in_memory(proxy_server.spend_counter_cache, _is_spend_counter),
        "open_reservations": open_reservations,
        "spend_logs": [_stable(row) for row in rows],
        "spend_updates": _queued(writer.spend_update_queue.update_queue),
        "daily_updates": {
            name: _queued(getattr(writer, f"daily_{name}spend_update_queue").update_queue)
            for name in ("", "team_", "end_user_", "agent_", "org_", "tag_")
        },
        "rate_limit_counters": _in_memory(limiter_cache, _is_rate_limit_counter),
        "redis_counters": await _redis_counters(proxy_server.spend_counter_cache),
    }
    return {
        **{section: _about(value, names) for section, value in state.items()},
        "all_open_reservations": len(open_reservations),
        "post_call_writes_pending": post_call_writes,
        "gateway_requests": {
            f"{key.category} {key.route}": [counts.successful_requests, counts.failed_requests]
            for key, counts in proxy_server.gateway_request_accumulator._counts.items()
        },
        "post_call_work": {
            name: {"started": _started[name], "finished": _finished[name]} for name in _WORK
        },
        # Answers the lane's batch counted the limiter's tokens of (its success callback is
        # left out of their logging).
        "lane_tokens_counted": accounting.tokens_counted,
    }


async def _seed_route(body: dict[str, Any]) -> dict[str, bool]:
    _seed(body)
    return {"seeded": True}


async def _settlement_route(body: dict[str, Any]) -> dict[str, bool]:
    if body.get("hold"):
        _settlement_open.clear()
    else:
        _settlement_open.set()
    return {"held": not _settlement_open.is_set()}


async def _counter_route(body: dict[str, Any]) -> dict[str, float]:
    """Sets a budget counter, as another instance's spend moves it in a shared Redis."""
    await proxy_server.spend_counter_cache.async_set_cache(
        key=body["key"], value=float(body["value"])
    )
    return {"set": float(body["value"])}


async def _window_route(body: dict[str, Any]) -> dict[str, float]:
    """Makes a rate limiter window end in `ends_in` (whole) seconds, as time passing would: its
    start moves back, and its counters expire with it (in the worker and in Redis)."""
    limiter = proxy_server.proxy_logging_obj.get_proxy_hook("parallel_request_limiter")
    cache = proxy_server.proxy_logging_obj.internal_usage_cache.dual_cache
    ends_in = int(body["ends_in"])
    start = int(time.time()) + ends_in - int(limiter.window_size)
    prefix = body["key"].removesuffix(":window")
    for name in (f"{prefix}:window", f"{prefix}:requests", f"{prefix}:tokens"):
        value = str(start) if name.endswith(":window") else await cache.async_get_cache(key=name)
        if value is not None:
            # The worker's cache keeps a live entry's expiry: drop it first.
            await cache.async_delete_cache(key=name)
            await cache.async_set_cache(key=name, value=value, ttl=ends_in)
    return {"start": float(start)}


async def _rate_counter_route(body: dict[str, Any]) -> dict[str, int]:
    """Sets a rate limiter counter in its current window (`{team:…}:requests`…), as requests of
    another path counted there meanwhile would (in the worker and in Redis)."""
    limiter = proxy_server.proxy_logging_obj.get_proxy_hook("parallel_request_limiter")
    cache = proxy_server.proxy_logging_obj.internal_usage_cache.dual_cache
    await cache.async_set_cache(
        key=body["key"], value=int(body["value"]), ttl=int(limiter.window_size)
    )
    return {"set": int(body["value"])}


# The post-call work a request's accounting waits for, wrapped to be counted.
_WORK = (
    "cost_callback",
    "database_updates",
    "cache_update",
    "rate_limiter",
    "rate_limiter_failure",
)


def _instrument() -> None:
    budget_reservation.reserve_budget_for_request = _reserve_and_remember  # type: ignore[assignment]
    _ProxyDBLogger._PROXY_track_cost_callback = _tracked(  # type: ignore[method-assign]
        "cost_callback", _ProxyDBLogger._PROXY_track_cost_callback, gate=_settlement_open
    )
    DBSpendUpdateWriter._batch_database_updates = _tracked(  # type: ignore[method-assign]
        "database_updates", DBSpendUpdateWriter._batch_database_updates
    )
    proxy_server.update_cache = _tracked_from_call("cache_update", proxy_server.update_cache)
    limiter = _PROXY_MaxParallelRequestsHandler_v3
    limiter.async_log_success_event = _tracked(  # type: ignore[method-assign]
        "rate_limiter", limiter.async_log_success_event
    )
    limiter.async_log_failure_event = _tracked(  # type: ignore[method-assign]
        "rate_limiter_failure", limiter.async_log_failure_event
    )
    # A test module seeds hundreds of keys into one worker, whose limiter windows, counters and
    # gauges outgrow LiteLLM's 200-item in-memory cache: it would evict a window (the one that
    # ends first) between one test's requests, on whichever arm filled up first.
    internal = proxy_server.proxy_logging_obj.internal_usage_cache.dual_cache
    internal.in_memory_cache.max_size_in_memory = 100_000


async def _after_startup() -> None:
    # The proxy's startup sets its database client (None here) before its shared HTTP session,
    # and overwrites whatever stands in for it before then.
    while proxy_server.shared_aiohttp_session is None:
        await asyncio.sleep(0.05)
    _instrument()
    proxy_server.prisma_client = _database
    # What the proxy does at startup when it has a database: its cost callback settles each
    # request's reservation and queues the spend for the database.
    proxy_server.cost_tracking()
    proxy_server.app.add_api_route(SEED_PATH, _seed_route, methods=["POST"])
    proxy_server.app.add_api_route(SETTLEMENT_PATH, _settlement_route, methods=["POST"])
    proxy_server.app.add_api_route(COUNTER_PATH, _counter_route, methods=["POST"])
    proxy_server.app.add_api_route(WINDOW_PATH, _window_route, methods=["POST"])
    proxy_server.app.add_api_route(RATE_COUNTER_PATH, _rate_counter_route, methods=["POST"])
    proxy_server.app.add_api_route(SNAPSHOT_PATH, snapshot, methods=["GET"])


class Probe(CustomLogger):
    pass


_task = asyncio.get_event_loop().create_task(_after_startup())
probe = Probe()
