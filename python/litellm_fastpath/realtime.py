"""Warm upstream realtime sessions for `rust: true` OpenAI realtime deployments (`/v1/realtime`).

LiteLLM's realtime route dials the provider for every client (TCP, TLS, WebSocket upgrade, then
the provider's `session.created`): hundreds of milliseconds before the client hears anything.
Here each proxy worker keeps, per what binds a session at dial time (the deployment, the URL with
its `model` and `intent`, the key and the GA or beta protocol header, i.e. everything LiteLLM
passes to `websockets.connect`), up to N sessions already dialed with their `session.created`
read and held, and hands one to the next client of that key as LiteLLM's own relay's backend.

Only the dial changes. LiteLLM still authenticates, runs its pre-call hooks and guardrails, takes
the router's deployment slot, translates beta/GA events, relays and logs: `OpenAIRealtime.
async_realtime` runs as always, and its `websockets.connect(...)` returns a pooled connection
that replays the held `session.created` as its first frame. A miss dials exactly as LiteLLM does.

Settings: `fastpath_realtime_pool: N` under `litellm_settings` (the default for every `rust: true`
realtime deployment, 0 = off, the default), `model_info: {fastpath_realtime_pool: N}` on a
deployment (wins); `fastpath_realtime_pool_idle_s` (how long a warm session may wait, 30 s), in
either place likewise.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from litellm_fastpath import _native, claims, compat, metrics

logger = logging.getLogger("litellm_fastpath")

SETTING = "fastpath_realtime_pool"
IDLE_SETTING = "fastpath_realtime_pool_idle_s"
# A warm session older than this is closed and redialed. Providers end a session after 30-60
# minutes counted from the dial, so a session handed out at 30 s has lost under 2% of its life;
# and 30 s stays below the 60 s idle timeout common in load balancers in front of providers
# (websockets' own pings every 20 s keep the path alive meanwhile). Each warm session costs
# 60 / idle_s dials a minute at zero traffic.
DEFAULT_IDLE_S = 30.0
# Failed dials back off from 0.5 s, doubling, to 30 s; one success resets it.
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
# How long a pool dial may wait for the provider's `session.created` after the upgrade.
FIRST_EVENT_S = 10.0
# A key nobody asked for in this long is closed and forgotten (a client's unusual query string
# must not hold provider sessions open forever), and one deployment pools at most this many keys;
# other keys dial as LiteLLM does.
RETIRE_S = 600.0
MAX_KEYS_PER_DEPLOYMENT = 4

_COUNT_NAMES = ("hits", "misses", "expiries", "dead", "dials", "dial_failures")
_counts: dict[str, int] = dict.fromkeys(_COUNT_NAMES, 0)
# (deployment id, URL, LiteLLM's other `connect` arguments frozen) -> its pool.
_PoolKey = tuple[str, str, Hashable]
_pools: dict[_PoolKey, _Pool] = {}
_original_connect: Callable[..., Any] | None = None
_background: set[asyncio.Task[None]] = set()
# How often the startup pass looks for the router and for deployments it has not warmed yet.
PREWARM_EVERY_S = 2.0


@dataclass(frozen=True)
class _Binding:
    """The `rust: true` deployment whose realtime session is being dialed, and its pool size."""

    deployment_id: str
    size: int
    idle_s: float


_binding: contextvars.ContextVar[_Binding | None] = contextvars.ContextVar(
    "litellm_fastpath_realtime_binding", default=None
)


def _warm_sessions() -> int:
    return sum(len(pool.ready) for pool in _pools.values())


def _count(event: str) -> None:
    """One pool event, in this worker's counts and (when they are on) the proxy's metrics."""
    _counts[event] += 1
    metrics.realtime_pool(event, realtime_pool_counts()["warm"])


def realtime_pool_counts() -> dict[str, int]:
    """This worker's pool counts: sessions handed out warm (`hits`), clients that found none and
    dialed (`misses`), warm sessions closed for age (`expiries`) or found closed or talking
    (`dead`), pool dials started (`dials`) and failed (`dial_failures`), and `warm`: sessions
    waiting now."""
    counts = {**_counts, "warm": _warm_sessions()}
    if claims.lane_running():
        # The lane's own pools (for the sessions it relays in Rust), under the same names.
        for name, count in _native.lane_realtime_counts().items():
            counts[name] = counts.get(name, 0) + count
    return counts


def install() -> None:
    """Called by the proxy callback: gate LiteLLM's OpenAI realtime dial. Idempotent."""
    global _original_connect
    if _original_connect is not None:
        return
    import websockets

    _original_connect = websockets.connect
    # Looked up at call time by LiteLLM's handler (`import websockets; websockets.connect`).
    setattr(websockets, "connect", _connect)  # noqa: B010
    handler = compat.openai_realtime
    handler.async_realtime = _gated(handler.async_realtime)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not under the proxy's startup (an SDK import): pools are learned
        return
    _background.add(loop.create_task(_prewarm(), context=contextvars.Context()))


def _gated(async_realtime: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(async_realtime)
    async def gated(*args: Any, **kwargs: Any) -> Any:
        binding = _binding_for(kwargs.get("logging_obj"))
        if binding is None:
            return await async_realtime(*args, **kwargs)
        token = _binding.set(binding)
        try:
            return await async_realtime(*args, **kwargs)
        finally:
            _binding.reset(token)

    return gated


def _binding_for(logging_obj: Any) -> _Binding | None:
    """The pool binding of the deployment LiteLLM's router picked, when it is `rust: true` and
    its pool is on; None otherwise (LiteLLM dials as always)."""
    details = getattr(logging_obj, "model_call_details", None) or {}
    model_info = (details.get("litellm_params") or {}).get("model_info") or {}
    deployment_id = model_info.get("id")
    if not deployment_id or not _is_rust_deployment(str(deployment_id)):
        return None
    if relayed_in_rust(str(deployment_id)):
        return None
    return _binding_of(str(deployment_id), model_info)


def _binding_of(deployment_id: str, model_info: dict[str, Any]) -> _Binding | None:
    import litellm

    size = model_info.get(SETTING, getattr(litellm, SETTING, 0))
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        return None
    idle_s = model_info.get(IDLE_SETTING, getattr(litellm, IDLE_SETTING, DEFAULT_IDLE_S))
    if not isinstance(idle_s, int | float) or isinstance(idle_s, bool) or idle_s <= 0:
        idle_s = DEFAULT_IDLE_S
    return _Binding(deployment_id, size, float(idle_s))


def _is_rust_deployment(deployment_id: str) -> bool:
    """Only the deployment's configured flag counts (a caller cannot send one to a realtime
    route anyway: it carries no body)."""

    router = getattr(compat.proxy_server(), "llm_router", None)
    for deployment in getattr(router, "model_list", None) or ():
        if (deployment.get("model_info") or {}).get("id") == deployment_id:
            return (deployment.get("litellm_params") or {}).get("rust") is True
    return False


async def _prewarm() -> None:
    """Warms, for as long as the worker runs, the GA key of each `rust: true` OpenAI realtime
    deployment with a pool (`?model=<model>`, no beta header: what the SDK's
    `client.realtime.connect()` asks for), so a worker's first client of it is a hit; other keys
    are learned from their first client."""

    warmed: set[str] = set()
    while True:
        router = getattr(compat.proxy_server(), "llm_router", None)
        deployments = list(getattr(router, "model_list", None) or ())
        for deployment in deployments:
            try:
                _prewarm_deployment(deployment, warmed)
            except Exception:  # one deployment's odd settings never stop the others
                logger.debug("realtime pool: not prewarming a deployment", exc_info=True)
        # A deployment gone from the router (a config change): its pools retire when unused.
        current = {str((d.get("model_info") or {}).get("id")) for d in deployments}
        for key, pool in list(_pools.items()):
            if key[0] not in current:
                pool.pinned = False
        warmed &= current
        await asyncio.sleep(PREWARM_EVERY_S)


def _prewarm_deployment(deployment: dict[str, Any], warmed: set[str]) -> None:
    deployment_id = str((deployment.get("model_info") or {}).get("id") or "")
    if not deployment_id or deployment_id in warmed:
        return
    target = dial_target(deployment)
    if target is None or relayed_in_rust(deployment_id):
        return
    binding, url, api_key = target
    openai_realtime = compat.openai_realtime
    kwargs = {
        "additional_headers": openai_realtime._get_additional_headers(api_key),
        "max_size": compat.REALTIME_WEBSOCKET_MAX_MESSAGE_SIZE_BYTES,
        "ssl": openai_realtime._get_ssl_config(url),
    }
    pool = _pool_for(binding, url, kwargs)
    if pool is not None:
        pool.pinned = True
    warmed.add(deployment_id)


def dial_target(deployment: dict[str, Any]) -> tuple[_Binding, str, str] | None:
    """For a `rust: true` OpenAI realtime deployment with a pool: its binding, and the URL and
    key LiteLLM dials a GA session with (`?model=<model>`, what the SDK's
    `client.realtime.connect()` asks for); None for any other deployment."""
    import litellm

    openai_realtime = compat.openai_realtime
    params = deployment.get("litellm_params") or {}
    model_info = deployment.get("model_info") or {}
    deployment_id = str(model_info.get("id") or "")
    if not deployment_id or params.get("rust") is not True:
        return None
    binding = _binding_of(deployment_id, model_info)
    if binding is None:
        return None
    # The same resolution as `litellm._arealtime` for an `openai/` model.
    model, provider, api_key, api_base = compat.get_llm_provider(
        model=params["model"], api_base=params.get("api_base"), api_key=params.get("api_key")
    )
    if provider != "openai" or not _is_realtime(model, model_info):
        return None
    api_base = api_base or litellm.api_base or "https://api.openai.com/"
    api_key = (
        api_key or litellm.api_key or litellm.openai_key or compat.get_secret_str("OPENAI_API_KEY")
    )
    if not api_key:
        return None
    return binding, openai_realtime._construct_url(api_base, {"model": model}), api_key


# Deployments whose GA sessions the lane relays in Rust, with its own pool: the Python pool
# leaves them alone (two pools would hold twice the provider sessions).
_relayed_in_rust: frozenset[str] = frozenset()


def relayed_in_rust(deployment_id: str) -> bool:
    return deployment_id in _relayed_in_rust


def set_relayed_in_rust(deployment_ids: frozenset[str]) -> None:
    global _relayed_in_rust
    _relayed_in_rust = deployment_ids
    for key, pool in list(_pools.items()):
        if key[0] in deployment_ids:
            pool.size = 0  # retired by its refill task, warm sessions closed
            pool._wake.set()


def _is_realtime(model: str, model_info: dict[str, Any]) -> bool:
    """A realtime model by the deployment's `mode`, LiteLLM's model map, or a pool set on the
    deployment itself."""
    import litellm

    if model_info.get("mode") == "realtime" or SETTING in model_info:
        return True
    try:
        info = litellm.get_model_info(model, custom_llm_provider="openai")
    except Exception:  # a model LiteLLM's map does not know
        return False
    return info.get("mode") == "realtime"


# A relayed session being replayed: its recorded provider stands in for the dial.
replaying: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "litellm_fastpath_realtime_replaying", default=None
)


def _connect(uri: Any, *args: Any, **kwargs: Any) -> Any:
    """`websockets.connect`: a relayed session's recorded provider in its replay, pooled for a
    gated dial, LiteLLM's own otherwise."""
    assert _original_connect is not None
    recorded = replaying.get()
    if recorded is not None:
        return recorded
    binding = _binding.get()
    if binding is None or args:
        return _original_connect(uri, *args, **kwargs)
    return _PooledConnect(binding, str(uri), kwargs)


class _Unpoolable(Exception):
    """A `connect` argument the key cannot hold by value: such a dial is never pooled."""


def _freeze(value: Any) -> Hashable:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Hashable):
        return value
    raise _Unpoolable


class _PooledConnect:
    """What `websockets.connect(...)` returns for a gated dial: `async with` and `await` both
    give a warm session when the key has one, else a fresh dial with LiteLLM's arguments."""

    def __init__(self, binding: _Binding, uri: str, kwargs: dict[str, Any]) -> None:
        self._binding = binding
        self._uri = uri
        self._kwargs = kwargs
        self._connection: Any = None

    async def _open(self) -> Any:
        assert _original_connect is not None
        pool = _pool_for(self._binding, self._uri, self._kwargs)
        warm = await pool.take() if pool is not None else None
        if warm is None:
            _count("misses")
            return await _original_connect(self._uri, **self._kwargs)
        _count("hits")
        return _WarmBackend(warm.connection, warm.first_event)

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> Any:
        self._connection = await self._open()
        return self._connection

    async def __aexit__(self, *exc_info: object) -> None:
        await self._connection.close()


def _pool_for(binding: _Binding, uri: str, kwargs: dict[str, Any]) -> _Pool | None:
    try:
        key: _PoolKey = (binding.deployment_id, uri, _freeze(kwargs))
    except _Unpoolable:
        return None
    pool = _pools.get(key)
    if pool is None:
        held = sum(1 for k in _pools if k[0] == binding.deployment_id)
        if held >= MAX_KEYS_PER_DEPLOYMENT:
            return None
        pool = _pools[key] = _Pool(key, uri, kwargs, binding)
    pool.size, pool.idle_s = binding.size, binding.idle_s
    return pool


class _WarmBackend:
    """A pooled provider connection as LiteLLM's relay uses it: the held `session.created`
    first, then the connection itself."""

    def __init__(self, connection: Any, first_event: str | bytes) -> None:
        self._connection = connection
        self._first_event: str | bytes | None = first_event

    async def recv(self, decode: bool | None = None) -> str | bytes:
        first, self._first_event = self._first_event, None
        if first is None:
            return await self._connection.recv(decode=decode)
        if decode is False and isinstance(first, str):
            return first.encode()
        if decode is True and isinstance(first, bytes):
            return first.decode()
        return first

    async def send(self, message: Any, *args: Any, **kwargs: Any) -> None:
        await self._connection.send(message, *args, **kwargs)

    async def close(self, *args: Any, **kwargs: Any) -> None:
        await self._connection.close(*args, **kwargs)

    async def __aenter__(self) -> _WarmBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


@dataclass
class _Warm:
    connection: Any
    first_event: str | bytes
    born: float
    watch: asyncio.Task[Any] | None = field(default=None, repr=False)


class _Pool:
    """One key's warm sessions, kept at `size` by dials run side by side."""

    def __init__(self, key: _PoolKey, uri: str, kwargs: dict[str, Any], binding: _Binding) -> None:
        self.key = key
        self.size = binding.size
        self.idle_s = binding.idle_s
        self.ready: deque[_Warm] = deque()
        self._uri = uri
        self._kwargs = kwargs
        self._dialing = 0
        self._backoff = 0.0
        self._retry_at = 0.0
        self._last_demand = time.monotonic()
        self.pinned = False  # warmed at startup: kept even when no client comes
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._spawn(self._keep_filled())

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        # A context of its own: the pool outlives the request that created it.
        task = asyncio.get_running_loop().create_task(coroutine, context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def take(self) -> _Warm | None:
        """The oldest live warm session (the youngest would outlive it in the pool), or None."""
        self._last_demand = time.monotonic()
        try:
            while self.ready:
                warm = self.ready.popleft()
                if time.monotonic() - warm.born > self.idle_s:
                    _count("expiries")
                    self._discard(warm)
                    continue
                if await self._still_pristine(warm):
                    return warm
                _count("dead")
                self._discard(warm)
            return None
        finally:
            self._wake.set()

    async def _still_pristine(self, warm: _Warm) -> bool:
        """Open, and nothing arrived since `session.created` (the watcher would have seen it)."""
        from websockets.protocol import State

        watch = warm.watch
        if watch is not None and not watch.done():
            watch.cancel()
            # websockets' recv() is safe to cancel: no frame is lost.
            await asyncio.gather(watch, return_exceptions=True)
        if watch is not None and not watch.cancelled():
            return False
        return bool(warm.connection.state is State.OPEN)

    async def _watch(self, warm: _Warm) -> None:
        """While pooled, a session should say nothing: a frame or a close makes it dead."""
        try:
            await warm.connection.recv()
        except Exception:  # closed, reset or protocol error: dead all the same
            pass
        if warm in self.ready:
            self.ready.remove(warm)
            warm.watch = None
            _count("dead")
            self._discard(warm)
            self._wake.set()

    def _discard(self, warm: _Warm) -> None:
        if warm.watch is not None and not warm.watch.done():
            warm.watch.cancel()
        self._spawn(_close_quietly(warm.connection))

    async def _keep_filled(self) -> None:
        while True:
            self._wake.clear()
            now = time.monotonic()
            unused = not self.pinned and now - self._last_demand > RETIRE_S
            if unused or self.size <= 0:
                self._retire()
                return
            idle_s = self.idle_s
            while self.ready and now - self.ready[0].born > idle_s:
                _count("expiries")
                self._discard(self.ready.popleft())
            while len(self.ready) > self.size:  # the pool was made smaller
                self._discard(self.ready.pop())
            if now >= self._retry_at:
                for _ in range(self.size - len(self.ready) - self._dialing):
                    self._dialing += 1
                    self._spawn(self._dial())
            wake_in = [self._last_demand + RETIRE_S - now]
            if self.ready:
                wake_in.append(self.ready[0].born + idle_s - now)
            if self._retry_at > now:
                wake_in.append(self._retry_at - now)
            try:
                await asyncio.wait_for(self._wake.wait(), max(min(wake_in), 0.01))
            except TimeoutError:
                pass

    async def _dial(self) -> None:
        assert _original_connect is not None
        _count("dials")
        connection = None
        try:
            connection = await _original_connect(self._uri, **self._kwargs)
            first_event = await asyncio.wait_for(connection.recv(), FIRST_EVENT_S)
            if not _is_session_created(first_event):
                raise _NotASession
        except Exception as exc:  # refused, unreachable, stalled: back off
            _count("dial_failures")
            if connection is not None:
                self._spawn(_close_quietly(connection))
            now = time.monotonic()
            if now >= self._retry_at:
                self._backoff = min(BACKOFF_MAX_S, self._backoff * 2 or BACKOFF_FIRST_S)
                self._retry_at = now + self._backoff
                logger.warning(
                    "realtime pool: a dial failed (%s); next try in %.1f s",
                    type(exc).__name__,
                    self._backoff,
                )
        else:
            self._backoff = 0.0
            if self.size <= 0:
                self._spawn(_close_quietly(connection))
            else:
                warm = _Warm(connection, first_event, time.monotonic())
                warm.watch = self._spawn(self._watch(warm))
                self.ready.append(warm)
                metrics.realtime_pool(None, realtime_pool_counts()["warm"])
        finally:
            self._dialing -= 1
            self._wake.set()

    def _retire(self) -> None:
        _pools.pop(self.key, None)
        while self.ready:
            self._discard(self.ready.popleft())


class _NotASession(Exception):
    """The provider's first event was not `session.created` (an error, say)."""


def _is_session_created(event: str | bytes) -> bool:
    try:
        decoded = json.loads(event)
    except (ValueError, TypeError):
        return False
    return isinstance(decoded, dict) and decoded.get("type") == "session.created"


async def _close_quietly(connection: Any) -> None:
    try:
        await connection.close()
    except Exception:  # closing a dead session: nothing to report
        logger.debug("realtime pool: closing a session failed", exc_info=True)
