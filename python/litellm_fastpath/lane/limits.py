"""Rate limits on the lane (#26): rpm and tpm limits on a key, its user, its team or the team
membership, counted in LiteLLM's v3 limiter's own windows, and a key's parallel-request limit,
against the limiter's own concurrency gauge (see `lane::ratelimit` in Rust).

- Without Redis, the windows are the worker's: the replay's limiter counts each request the lane
  served, and a key's verdict carries each window's count as read after the limiter counted the
  latest request LiteLLM judged; the lane holds one request per window until then. tpm windows
  the same way: the lane holds the limiter's estimate, the replay's limiter reserves it, and
  each window is read again once the limiter's callbacks settled a request's tokens.
- With the proxy's Redis, the lane counts each request there itself, with the limiter's own
  script, before the provider call; the replay's limiter then leaves the request counted (it
  only records what the lane counted, for the callbacks).
- tpm limits with the limiter's token reservation on (its default); with the proxy's Redis the
  lane reserves the limiter's estimate of the request's tokens in each token window there, with
  the limiter's own script, after the rpm windows and the gauge; the replay's limiter records
  the reservation in its stash, so that LiteLLM's callbacks reconcile it with the actual usage
  (or refund it on a failure) as they would have.
- A parallel-request limit: with the proxy's Redis the lane takes the request's slot in the
  limiter's gauge there, with the limiter's own script, after counting its windows, and gives
  it back once the answer is complete; without Redis it holds the slot itself beside the
  limiter's registry in the worker (see `_install_gauge_hooks`). The replay's limiter takes
  no slot.

Keys with per-model or tag limits, or dynamic limits keep
going to the proxy, as do all limited keys where LiteLLM's Redis is one the lane does not speak
to (a cluster, TLS, a Unix socket, a key namespace).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

from litellm_fastpath import _native, claims, compat

# The limiter's descriptors the lane counts (its key, user, team and team-member limits).
_SERVED_DESCRIPTORS = frozenset({"api_key", "user", "team", "team_member"})


@dataclasses.dataclass(frozen=True)
class Scope:
    """One limit of a key (an rpm or tpm window, a parallel-request gauge): LiteLLM's
    descriptor, its value and the limit."""

    descriptor: str
    value: str
    limit: int

    def gauge_key(self) -> str:
        """The limiter's parallel-request gauge key."""
        return f"{{{self.descriptor}:{self.value}}}:max_parallel_requests"

    def keys(self, counter: str = "requests") -> tuple[str, str]:
        """The limiter's window key and its `counter` key (`requests`, `tokens`)."""
        prefix = f"{{{self.descriptor}:{self.value}}}"
        return f"{prefix}:window", f"{prefix}:{counter}"


@dataclasses.dataclass(frozen=True)
class Limits:
    """A key's limits the lane counts: its rpm windows, its tpm windows and its
    parallel-request gauges (each limit a `Scope`)."""

    scopes: tuple[Scope, ...] = ()
    tokens: tuple[Scope, ...] = ()
    gauges: tuple[Scope, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.scopes or self.tokens or self.gauges)


def limiter() -> Any | None:
    """The proxy's v3 rate limiter (None: another limiter, or none)."""
    proxy_logging = getattr(compat.proxy_server(), "proxy_logging_obj", None)
    hook = proxy_logging.get_proxy_hook("parallel_request_limiter") if proxy_logging else None
    return hook if isinstance(hook, compat.RateLimiterV3) else None


def limits_of(key: Any) -> Limits | None:
    """The key's rpm windows and parallel-request gauges as LiteLLM's limiter builds them for a
    chat call (empty: no limits), or None when the lane leaves the key's limits to the proxy."""
    found = limiter()
    if found is None:
        return None
    descriptors = found.create_rate_limit_descriptors(
        user_api_key_dict=key,
        data={},
        rpm_limit_type=None,
        tpm_limit_type=None,
        model_has_failures=False,
        call_type="acompletion",
    )
    counting = _counting()
    if descriptors and counting is None:
        return None
    windows, tokens, gauges = [], [], []
    for descriptor in descriptors:
        limits = descriptor.get("rate_limit") or {}
        requests = limits.get("requests_per_unit")
        tpm = limits.get("tokens_per_unit")
        parallel = limits.get("max_parallel_requests")
        if (
            descriptor["key"] not in _SERVED_DESCRIPTORS
            or (requests is None and tpm is None and parallel is None)
            or (limits.get("window_size") or found.window_size) != found.window_size
            # Without its reservation, tpm is counted after the call.
            or (tpm is not None and not found.tpm_reservation_enabled)
        ):
            return None
        value = str(descriptor["value"])
        if requests is not None:
            windows.append(Scope(descriptor["key"], value, int(requests)))
        if tpm is not None:
            tokens.append(Scope(descriptor["key"], value, int(tpm)))
        if parallel is not None:
            gauges.append(Scope(descriptor["key"], value, int(parallel)))
    return Limits(tuple(windows), tuple(tokens), tuple(gauges))


def verdict_rates(found: Limits) -> tuple[list[Any], list[Any], list[Any], bool]:
    """The limits as the lane's verdict carries them: the rpm and tpm windows (descriptor,
    value, limit, what the window counted, when it ends; 0: no window), read as LiteLLM's
    limiter reads them in the worker, the gauges (descriptor, value, limit), and whether they
    are counted in Redis (then the lane's own count decides: not read)."""
    rate_limiter = limiter()
    in_redis = _counting() == "redis"
    if rate_limiter is None or in_redis:
        # The lane counts in Redis itself, and learns each window's count from its own count.
        unread = [
            [(scope.descriptor, scope.value, scope.limit, 0, 0.0) for scope in scopes]
            for scopes in (found.scopes, found.tokens)
        ]
        gauges = [(gauge.descriptor, gauge.value, gauge.limit, 0) for gauge in found.gauges]
        return unread[0], unread[1], gauges, in_redis
    windows = _worker_windows(rate_limiter, found.scopes, "requests")
    tokens = _worker_windows(rate_limiter, found.tokens, "tokens")
    gauges = [
        (gauge.descriptor, gauge.value, gauge.limit, _registered(rate_limiter, gauge.gauge_key()))
        for gauge in found.gauges
    ]
    return windows, tokens, gauges, False


def _registered(rate_limiter: Any, gauge_key: str) -> int:
    """The slots LiteLLM's registry in the worker holds in a parallel-request gauge (those of
    the requests the proxy serves; the lane holds its own beside them)."""
    memory = rate_limiter.internal_usage_cache.dual_cache.in_memory_cache
    return int(rate_limiter._gauge_in_flight_from_cache_value(memory.get_cache(gauge_key)))


def _worker_windows(rate_limiter: Any, found: tuple[Scope, ...], counter: str) -> list[Any]:
    """Each window's count (`requests` or `tokens`) and end, as the limiter reads them in the
    worker's memory (read at once: no other request is counted meanwhile)."""
    keys = [key for scope in found for key in scope.keys(counter)]
    memory = rate_limiter.internal_usage_cache.dual_cache.in_memory_cache
    values = memory.batch_get_cache(keys) if keys else []
    now = time.time()
    out = []
    for index, scope in enumerate(found):
        started, counted = values[2 * index], values[2 * index + 1]
        try:
            ends = float(started) + rate_limiter.window_size if started is not None else 0.0
            count = max(0, int(counted)) if counted is not None else 0
        except (TypeError, ValueError):
            ends, count = 0.0, 0
        if ends <= now:
            # No window (or an old one): the next request LiteLLM counts starts it.
            ends, count = 0.0, 0
        out.append((scope.descriptor, scope.value, scope.limit, count, ends))
    return out


def note_settled(kwargs: Any) -> None:
    """LiteLLM's limiter settled a request's tokens in the worker's windows (its success or
    failure callback): the lane reads the request's key's token windows again (the latest
    reading of a window serves every key of its team or user)."""
    rate_limiter = limiter()
    if not claims.lane_running() or rate_limiter is None or _counting() != "worker":
        return
    if not isinstance(kwargs, dict):
        return
    from litellm_fastpath.lane import keys

    held = keys.limits_held_by_hash(_key_hash(kwargs))
    if held is None or not held.tokens:
        return
    windows = _worker_windows(rate_limiter, held.tokens, "tokens")
    _native.lane_set_readings(
        [
            ("tokens", descriptor, value, count, ends)
            for descriptor, value, _, count, ends in windows
        ]
    )


def _key_hash(kwargs: dict[str, Any]) -> str | None:
    """The hash of the key a logged call was made with (LiteLLM's logging metadata)."""
    logged = kwargs.get("standard_logging_object") or {}
    found = (logged.get("metadata") or {}).get("user_api_key_hash")
    return found if isinstance(found, str) else None


def _counting() -> str | None:
    """Where LiteLLM's limiter keeps its windows: "worker", "redis" (a Redis the lane counts
    in), or None (a Redis the lane does not speak to)."""
    rate_limiter = limiter()
    if rate_limiter is None:
        return None
    return _redis_counting(rate_limiter.internal_usage_cache.dual_cache)


def _redis_counting(dual_cache: Any) -> str | None:
    redis_cache = dual_cache.redis_cache
    if redis_cache is None:
        return "worker"
    return "redis" if _redis_target(redis_cache) is not None else None


def _redis_target(redis_cache: Any) -> tuple[str, int, str | None, str | None, int] | None:
    """(host, port, username, password, db) of a plain-TCP, un-namespaced Redis, as LiteLLM's
    own client connects to it; None for anything else."""
    if getattr(redis_cache, "namespace", None) or type(redis_cache).__name__ != "RedisCache":
        return None
    pool = getattr(redis_cache, "async_redis_conn_pool", None)
    connection_class = getattr(pool, "connection_class", None)
    if pool is None or getattr(connection_class, "__name__", "") != "Connection":
        return None
    kwargs = pool.connection_kwargs
    host, port = kwargs.get("host"), kwargs.get("port", 6379)
    if not isinstance(host, str):
        return None
    try:
        return (
            host,
            int(port),
            kwargs.get("username"),
            kwargs.get("password"),
            int(kwargs.get("db") or 0),
        )
    except (TypeError, ValueError):
        return None


def configure() -> None:
    """Tells the lane where LiteLLM's limiter counts (its Redis, with its script and window),
    and hooks the limiter (see `_install_limiter_hook`)."""
    rate_limiter = limiter()
    redis_cache = None if rate_limiter is None else rate_limiter.internal_usage_cache.dual_cache
    target = None if redis_cache is None else redis_cache.redis_cache
    _native.lane_set_rate_counting(
        None if target is None else _redis_target(target),
        compat.BATCH_RATE_LIMITER_SCRIPT,
        60 if rate_limiter is None else int(rate_limiter.window_size),
        (compat.CHECK_AND_INCREMENT_BY_N_SCRIPT, compat.WINDOW_GUARDED_TOKEN_INCREMENT_SCRIPT),
        (
            compat.PARALLEL_ACQUIRE_SCRIPT,
            compat.PARALLEL_RELEASE_SCRIPT,
            int(compat.PARALLEL_REQUEST_SLOT_TTL_SECONDS),
        ),
    )
    if rate_limiter is not None:
        _install_limiter_hook(rate_limiter)


def hooked() -> bool:
    """Whether the limiter hands the lane its verdicts (see `_install_limiter_hook`)."""
    rate_limiter = limiter()
    return rate_limiter is not None and getattr(rate_limiter, "_litellm_fastpath_hooked", False)


def known_limits(key: Any) -> Limits:
    """The key's limits as its verdict holds them (worked out again if it has none)."""
    from litellm_fastpath.lane import keys

    return keys.limits_held(key) or limits_of(key) or Limits()


async def count_batched(key: Any, data: dict[str, Any], call_type: str) -> None:
    """A rate-limited request the lane's batch logs (its claim held in this task's context):
    the limiter's pre-call hook, as its replay's proxy runs it before the provider call, so
    that the request is counted in the worker's windows (or what the lane counted in Redis is
    recorded), its token reservation is in the stash its logging's callbacks reconcile, and
    the key's verdict goes to the lane, releasing its hold. A refusal (a window another path
    filled meanwhile) leaves the request counted, and it is recorded past the limiter as its
    replay is run again: the provider answered, so it is logged and billed."""
    rate_limiter = limiter()
    assert rate_limiter is not None and hooked()
    cache = compat.proxy_server().user_api_key_cache
    try:
        await rate_limiter.async_pre_call_hook(key, cache, data, call_type)
    except Exception as err:
        if not refused(err):
            raise
        claims.set_rate_counted()
        await rate_limiter.async_pre_call_hook(key, cache, data, call_type)


def refused(err: Exception) -> bool:
    """LiteLLM's rate limiter refusing (its 429, as the proxy raises it)."""
    return getattr(err, "code", None) in (429, "429") or getattr(err, "status_code", None) == 429


def _install_limiter_hook(rate_limiter: Any) -> None:
    """Wraps the limiter's pre-call hook: a replay the lane counted in Redis is not counted
    again (the limiter's stash records the lane's counts for the callbacks, as the limiter
    would have); and once the limiter counted a request, LiteLLM has judged its key, so the
    lane takes the verdict then (`keys.note_judged`), with the windows as they count it."""
    if getattr(rate_limiter, "_litellm_fastpath_hooked", False):
        return
    original = rate_limiter.async_pre_call_hook
    _install_settlement_hooks(rate_limiter)
    _install_gauge_hooks(rate_limiter)

    @functools.wraps(original)
    async def async_pre_call_hook(
        user_api_key_dict: Any,
        cache: Any,
        data: dict[str, Any],
        call_type: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        from litellm_fastpath.lane import keys, replay

        if claims.lane_running():
            replay.take_ticket(data)
        counts = claims.rate_counts()
        if counts is None:
            result = await original(user_api_key_dict, cache, data, call_type, *args, **kwargs)
        else:
            result = None
            await _record_counts(rate_limiter, user_api_key_dict, data, counts)
        await keys.note_judged(user_api_key_dict, data, call_type)
        return result

    rate_limiter.async_pre_call_hook = async_pre_call_hook
    rate_limiter._litellm_fastpath_hooked = True


def _install_settlement_hooks(rate_limiter: Any) -> None:
    """After the limiter's success and failure callbacks (which settle a request's tokens in
    the worker's windows), the lane reads the windows again (`note_settled`). The callbacks are
    looked up on the limiter's class at each call, so that whatever wraps them there still
    runs."""
    for name in ("async_log_success_event", "async_log_failure_event"):

        def settle(name: str = name) -> Any:
            async def callback(kwargs: Any, *args: Any, **more: Any) -> Any:
                try:
                    return await getattr(type(rate_limiter), name)(
                        rate_limiter, kwargs, *args, **more
                    )
                finally:
                    note_settled(kwargs)

            return callback

        setattr(rate_limiter, name, settle())


def _install_gauge_hooks(rate_limiter: Any) -> None:
    """Where LiteLLM keeps the parallel-request gauges in the worker (its registry of slots),
    the lane holds its own requests' slots beside the registry's (see `lane::ratelimit::parallel`
    in Rust); the limiter's in-memory gauge methods are wrapped so that the two count each
    other:

    - a request of the proxy takes its slot only where the registry's slots and the lane's leave
      room (`lane_enter_gauge`, which records the registry's count with it for the lane), and
      its statuses (the `x-ratelimit-*-max_parallel_requests` headers) count the lane's slots;
    - a slot given back records the registry's count again;
    - a replay whose slot the lane held takes none (its answer is complete already).
    """
    check = rate_limiter._check_parallel_request_gauges
    acquire = rate_limiter._acquire_parallel_slots_in_memory
    release = rate_limiter._release_parallel_request_slots_in_memory

    def registered(gauge_key: str) -> int:
        return _registered(rate_limiter, gauge_key)

    @functools.wraps(check)
    async def check_gauges(
        gauges: list[Any], slot_id: str, parent_otel_span: Any = None, read_only: bool = False
    ) -> Any:
        counts = claims.parallel_counts()
        if counts is None or read_only or _counting() != "worker":
            return await check(gauges, slot_id, parent_otel_span, read_only)
        statuses = [
            rate_limiter._gauge_status(gauge, in_flight, "OK")
            for gauge, in_flight in zip(gauges, counts, strict=False)
        ]
        return {"overall_code": "OK", "statuses": statuses}

    @functools.wraps(acquire)
    async def acquire_in_memory(
        gauges: list[Any], slot_id: str, parent_otel_span: Any = None
    ) -> Any:
        if not claims.lane_running():
            return await acquire(gauges, slot_id, parent_otel_span)
        entered: list[tuple[str, int, int]] = []
        for gauge in gauges:
            key = gauge["counter_key"]
            before = registered(key)
            fits, lane = _native.lane_enter_gauge(key, int(gauge["limit"]), before)
            if not fits:
                for entered_key, entered_before, _ in entered:
                    _native.lane_set_gauge(entered_key, entered_before)
                status = rate_limiter._gauge_status(gauge, before + lane, "OVER_LIMIT")
                return {"overall_code": "OVER_LIMIT", "statuses": [status]}
            entered.append((key, before, lane))
        response = await acquire(gauges, slot_id, parent_otel_span)
        if response["overall_code"] != "OK":
            for key, before, _ in entered:
                _native.lane_set_gauge(key, before)
            return response
        statuses = [
            rate_limiter._gauge_status(gauge, before + lane + 1, "OK")
            for gauge, (_, before, lane) in zip(gauges, entered, strict=True)
        ]
        return {**response, "statuses": statuses}

    @functools.wraps(release)
    async def release_in_memory(
        counter_keys: list[str], slot_id: str, parent_otel_span: Any
    ) -> None:
        await release(counter_keys, slot_id, parent_otel_span)
        if claims.lane_running():
            for key in counter_keys:
                _native.lane_set_gauge(key, registered(key))

    rate_limiter._check_parallel_request_gauges = check_gauges
    rate_limiter._acquire_parallel_slots_in_memory = acquire_in_memory
    rate_limiter._release_parallel_request_slots_in_memory = release_in_memory


async def _record_counts(
    rate_limiter: Any, key: Any, data: dict[str, Any], counts: list[tuple[int, int]]
) -> None:
    """What the limiter's pre-call leaves of a request it admitted, here with the counts the
    lane made in Redis: the worker's copy of each window, the windows', gauges' and token
    windows' statuses for the callbacks, and the tokens reserved, for the limiter's callbacks
    to reconcile with the actual usage (or refund). The worker's copy of a gauge is left as it
    is: the lane gives its slot back in Redis alone, so a copy written here would hold the slot
    on this worker."""
    held = known_limits(key)
    found = held.scopes
    cache = rate_limiter.internal_usage_cache
    for scope, (start, count) in zip(found, counts, strict=False):
        window_key, counter_key = scope.keys()
        for name, value in ((counter_key, count), (window_key, str(start))):
            await cache.async_set_cache(
                key=name,
                value=value,
                ttl=rate_limiter.window_size,
                litellm_parent_otel_span=None,
                local_only=True,
            )
    stash = compat.claim_request_stash_for_data(data)
    reserved = claims.tokens_reserved()
    stash.rate_limit_response = {
        "overall_code": "OK",
        "statuses": [
            {
                "code": "OK",
                "current_limit": scope.limit,
                "limit_remaining": scope.limit - count,
                "rate_limit_type": "requests",
                "descriptor_key": scope.descriptor,
                "descriptor_value": scope.value,
            }
            for scope, (_, count) in zip(found, counts, strict=False)
        ]
        + [
            {
                "code": "OK",
                "current_limit": gauge.limit,
                "limit_remaining": max(0, gauge.limit - in_flight),
                "rate_limit_type": "max_parallel_requests",
                "descriptor_key": gauge.descriptor,
            }
            for gauge, in_flight in zip(held.gauges, claims.parallel_counts() or (), strict=False)
        ]
        + [
            {
                "code": "OK",
                "current_limit": scope.limit,
                "limit_remaining": max(0, scope.limit - count),
                "rate_limit_type": "tokens",
                "descriptor_key": scope.descriptor,
                "descriptor_value": scope.value,
            }
            for scope, count in zip(held.tokens, reserved[1] if reserved else (), strict=False)
        ],
    }
    if reserved is not None and held.tokens:
        model = data.get("model")
        stash.reserved_tokens = reserved[0]
        stash.reserved_model = rate_limiter._rate_limited_model(
            model if isinstance(model, str) else None
        )
        stash.reserved_scopes = frozenset((scope.descriptor, scope.value) for scope in held.tokens)
