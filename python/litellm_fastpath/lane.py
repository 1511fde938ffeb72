"""The fast lane: `fastpath_lane: true` under `litellm_settings`.

In each proxy worker the Rust lane takes over the public socket before uvicorn binds it, and
uvicorn serves on a private Unix socket behind it. The lane answers plain chat completions for
`rust: true` model groups sent with a key LiteLLM has already judged; every other request goes to
the proxy unchanged. This module hands the lane what LiteLLM knows (groups, key verdicts,
cooldowns, headers) and takes the lane's tickets back in the proxy: each served request is
replayed through the proxy after the client has its answer, with a ticket that stands for the
provider's outcome, so LiteLLM's auth counters, router, logging, cost and spend run as usual
without a second provider call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import json
import logging
import os
import socket
import tempfile
from collections.abc import Mapping
from typing import Any

import litellm

from litellm_fastpath import _native, compat, routing, streaming

logger = logging.getLogger("litellm_fastpath")

# Not `x-litellm-*`: the proxy leaves those out of the headers its hooks see.
TICKET_HEADER = "x-fastpath-lane-ticket"
SETTING = "fastpath_lane"
# How often LiteLLM's router state (groups, cooldowns) is handed to the lane.
REFRESH_S = 0.25
# How long a stopping worker waits for served requests' replays (their logging and spend).
DRAIN_S = 30.0
# Proxy settings under which a request means the same on the lane as on the normal path;
# any other `general_settings` key keeps the lane off (it may change auth or the request).
_NEUTRAL_GENERAL_SETTINGS = frozenset({"master_key", "user_api_key_cache_ttl"})
# `litellm_settings` under which the lane's requests mean what they mean on the normal path
# (the rest keep it off): logging, and options the fast path's own admission already reads.
_NEUTRAL_LITELLM_SETTINGS = frozenset(
    {
        "callbacks",
        SETTING,
        "success_callback",
        "failure_callback",
        "set_verbose",
        "json_logs",
        "drop_params",
        "request_timeout",
        "num_retries",
    }
)
# UserAPIKeyAuth fields that may differ from their defaults on a key the lane serves: identity,
# spend, model access and expiry, re-applied per request in Rust. A key with anything else
# (budgets, which LiteLLM reserves per request, limits, teams, users, metadata, aliases,
# guardrails...) stays on the normal path.
_KEY_FIELDS_REAPPLIED = frozenset(
    {
        "api_key",
        "token",
        "key_name",
        "key_alias",
        "user_id",
        "user_role",
        "spend",
        "models",
        "expires",
        "created_at",
        "updated_at",
        "last_refreshed_at",
        "parent_otel_span",
        "request_route",
        "via_virtual_key",
        "created_by",
        "updated_by",
        "litellm_budget_table",
    }
)

_running = False
# Set by a replayed request's pre-call hook, read by its (first) provider call and pick. Each
# holds a list, emptied when read: the request's tasks get copies of the context, and a retry
# in another task must find the outcome taken, not take it again.
_claimed_call: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_call", default=None
)
_forced_deployment: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_deployment", default=None
)
_lane_groups: frozenset[str] = frozenset()
_status = ""  # what the lane last logged about itself
_litellm_settings: frozenset[str] = frozenset()  # the config file's `litellm_settings` keys
_background: set[asyncio.Task[None]] = set()
# Replays running at once: they run the proxy's per-request Python, one at a time on its loop
# anyway; a few in flight overlap their awaits.
REPLAY_CONCURRENCY = 8
# LiteLLM's `REPEATED_STREAMING_CHUNK_LIMIT` default, the one the lane's streams apply.
_DEFAULT_REPEAT_LIMIT = 100


def is_running() -> bool:
    return _running


def counts() -> dict[str, int]:
    """Requests the lane served, replayed through the proxy (its errors and unusual answers), or
    sent to the proxy, by reason (`lane_*`), in this worker."""
    return dict(_native.lane_counts())


# -- taking the socket ---------------------------------------------------------------------


def _configured() -> bool:
    """Whether the proxy's config file turns the lane on (read here because the proxy applies
    `litellm_settings` in file order, possibly after importing our callback)."""
    import yaml  # type: ignore[import-untyped,unused-ignore]  # LiteLLM's dependency

    proxy_server = compat.proxy_server()

    path = getattr(proxy_server, "user_config_file_path", None)
    if not path:
        return False
    try:
        with open(path) as file:
            config = yaml.safe_load(file) or {}
    except (OSError, yaml.YAMLError):
        return False
    settings = config.get("litellm_settings") or {}
    if not isinstance(settings, Mapping) or settings.get(SETTING) is not True:
        return False
    global _litellm_settings
    _litellm_settings = frozenset(settings)
    return True


def _uvicorn_startup() -> tuple[Any, list[Any] | None] | None:
    """uvicorn's `Server` and the `sockets` it is about to serve on, from the startup frame
    our import runs under (the proxy imports callbacks during uvicorn's lifespan startup)."""
    import uvicorn

    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        return None
    for task in tasks:
        awaitable: Any = task.get_coro()
        while awaitable is not None:
            frame = getattr(awaitable, "cr_frame", None)
            if frame is None:
                break
            server = frame.f_locals.get("self")
            if frame.f_code.co_name == "startup" and isinstance(server, uvicorn.Server):
                return server, frame.f_locals.get("sockets")
            awaitable = getattr(awaitable, "cr_await", None)
    return None


def take_over() -> None:
    """Called when the proxy imports our callback: with the setting on, start the lane on the
    proxy's public socket and point uvicorn at a private Unix socket behind it."""
    global _running
    if _running or not _configured():
        return
    found = _uvicorn_startup()
    if found is None:
        logger.warning("fastpath_lane: not under uvicorn's startup; the lane stays off")
        return
    server, sockets = found
    config = server.config
    if config.fd is not None or config.uds is not None or config.ssl is not None:
        logger.warning("fastpath_lane: uvicorn serves a socket file, fd or TLS; the lane stays off")
        return
    app_socket = os.path.join(tempfile.mkdtemp(prefix="litellm-fastpath-"), "app.sock")
    # Several workers share the parent's listening socket.
    shared = bool(sockets)
    if sockets:
        # Each worker's lane accepts on it, and each worker's uvicorn serves its own private
        # socket.
        public = sockets[0]
        private = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        private.bind(app_socket)
        private.listen(config.backlog)
        sockets[:] = [private]
    else:
        public = config.bind_socket()
        config.uds = app_socket
    public.listen(config.backlog)  # uvicorn's own servers would have called it
    config.loaded_app = _ClientAddress(config.loaded_app)
    _native.start_lane(
        public.fileno(),
        app_socket,
        shared_socket=shared,
        keep_alive_timeout=config.timeout_keep_alive,
    )
    server._litellm_fastpath_public_socket = public  # kept open for the worker's lifetime
    _wrap_shutdown(server)
    _running = True
    loop = asyncio.get_running_loop()
    _background.add(loop.create_task(_keep_lane_current()))
    _background.add(loop.create_task(_replay_served()))
    logger.info("fastpath_lane: serving on %s:%s", config.host, config.port)


PEER_HEADER = b"x-fastpath-lane-peer"
MESSAGES_PATH = "/v1/messages"


class _ClientAddress:
    """uvicorn serves the lane's Unix socket, whose peer is the lane: this puts the client's
    address (from the lane's header) where uvicorn would have put it, ahead of uvicorn's own
    `X-Forwarded-For` handling, so LiteLLM sees requests as it did without the lane."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            peer = None
            headers = []
            for name, value in scope.get("headers") or ():
                if name == PEER_HEADER:
                    peer = value.decode("latin-1")
                else:
                    headers.append((name, value))
            if peer is not None:
                host, _, port = peer.rpartition(":")
                scope = {**scope, "headers": headers, "client": (host.strip("[]"), int(port))}
        await self.app(scope, receive, send)


def _wrap_shutdown(server: Any) -> None:
    """Stop taking connections, then let the replays of served requests finish (their logging
    and spend) while uvicorn still serves, then shut uvicorn down."""
    shutdown = server.shutdown

    async def drained_shutdown(*args: Any, **kwargs: Any) -> None:
        _native.lane_stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        while _native.lane_backlog() > 0 and loop.time() < deadline:
            await asyncio.sleep(0.02)
        await shutdown(*args, **kwargs)

    server.shutdown = drained_shutdown


# -- keeping the lane's view of LiteLLM current ----------------------------------------------


async def _keep_lane_current() -> None:
    proxy_server = compat.proxy_server()

    seen: tuple[Any, ...] | None = None
    while True:
        await asyncio.sleep(REFRESH_S)
        router = proxy_server.llm_router
        if router is None:
            continue
        try:
            state = _router_state(router)
            if state != seen:
                _configure(router)
                seen = state
            _native.lane_set_cooling(_cooling_groups(router))
        except Exception:  # a failed refresh turns the lane off, never the proxy
            logger.exception("fastpath_lane: refresh failed; the lane is off until the next one")
            _native.lane_configure(False, [], [])
            seen = None


def _router_state(router: Any) -> tuple[Any, ...]:
    proxy_server = compat.proxy_server()

    return (
        id(router),
        tuple(
            (d.get("model_name"), (d.get("model_info") or {}).get("id")) for d in router.model_list
        ),
        id(proxy_server.general_settings),
        len(litellm.callbacks),
    )


def _configure(router: Any) -> None:
    global _lane_groups, _status
    why_off = _why_off(router)
    groups = {} if why_off else _groups(router)
    if frozenset(groups) != _lane_groups:
        # Verdicts list the groups a key may call, as they were when LiteLLM judged it.
        _native.lane_forget_group_lists()
    _lane_groups = frozenset(groups)
    _install_forced_pick(router)
    _native.lane_set_groups(groups)
    _native.lane_configure(why_off is None, _answer_headers(), list(_openai_headers()))
    status = f"off ({why_off})" if why_off else f"serving model groups {sorted(groups)}"
    if status != _status:
        logger.warning("fastpath_lane: %s", status)
        _status = status


def _why_off(router: Any) -> str | None:
    """Proxy-wide settings under which no request can take the lane (None: it can)."""
    proxy_server = compat.proxy_server()

    odd_litellm = sorted(_litellm_settings - _NEUTRAL_LITELLM_SETTINGS)
    if odd_litellm:
        return f"litellm_settings {odd_litellm}"
    general = proxy_server.general_settings or {}
    odd = sorted(set(general) - _NEUTRAL_GENERAL_SETTINGS)
    if odd:
        return f"general_settings {odd}"
    if proxy_server.master_key is None:
        return "no master key"
    for name in (
        "model_alias_map",
        "cache",
        "max_budget",
        "post_call_rules",
        "pre_call_rules",
        "modify_params",
    ):
        if getattr(litellm, name, None):
            return f"litellm.{name}"
    busy = [type(c).__name__ for c in litellm.callbacks if not _idle_hook(c)]
    if busy:
        return f"callbacks {busy}"
    if getattr(router, "routing_strategy", "simple-shuffle") != "simple-shuffle":
        return "a routing strategy other than simple-shuffle"
    if getattr(router, "enable_pre_call_checks", False) or getattr(
        router, "optional_pre_call_checks", None
    ):
        return "router pre-call checks"
    return None


# Callbacks that see requests but never change one the lane serves.
_IDLE_CALLBACKS = frozenset(
    {
        "FastpathAccelerator",  # ours: removes `rust` from bodies (the lane takes none with it)
        # LiteLLM's defaults: its limiter counts only keys with limits (those stay off the
        # lane), and the others act on routes or fields the lane does not take.
        "_PROXY_MaxParallelRequestsHandler_v3",
        "_PROXY_MaxParallelRequestsHandler",
        "_PROXY_CacheControlCheck",
        "ResponsesIDSecurity",
        "_PROXY_LiteLLMManagedFiles",
        "_ProxyDBLogger",
        "ServiceLogging",
        "SkillsInjectionHook",  # acts on `container.skills`, a field the lane does not take
        # Act only on requests in a session (`metadata.session_id`, or `x-litellm-*`
        # headers), which the lane leaves to the proxy.
        "_PROXY_MaxIterationsHandler",
        "_PROXY_MaxBudgetPerSessionHandler",
        "_PROXY_SensitiveDataRoutingHandler",
    }
)
_HOOKS = (
    "async_pre_call_hook",
    "async_moderation_hook",
    "async_post_call_success_hook",
    "async_pre_call_deployment_hook",
    "async_post_call_response_headers_hook",
    "async_logging_hook",
    "async_pre_routing_hook",
)


def _idle_hook(callback: Any) -> bool:
    if isinstance(callback, str):
        return True  # a named logging integration: it logs, after the fact
    if type(callback).__name__ in _IDLE_CALLBACKS:
        return True
    base = compat.CustomLogger
    if not isinstance(callback, base):
        return False
    return all(getattr(type(callback), hook, None) is getattr(base, hook, None) for hook in _HOOKS)


def _groups(router: Any) -> dict[str, list[_native.LaneDeployment]]:
    by_group: dict[str, list[dict[str, Any]]] = {}
    for deployment in router.model_list:
        by_group.setdefault(deployment["model_name"], []).append(deployment)
    fallbacks = _fallback_groups(router)
    served: dict[str, list[_native.LaneDeployment]] = {}
    for name, deployments in by_group.items():
        if name in fallbacks or name in (getattr(router, "model_group_alias", None) or {}):
            continue
        entries = [_entry(deployment, router) for deployment in deployments]
        if all(entry is not None for entry in entries):
            weights = _weights(deployments)
            # The proxy asks every stream of the group for usage when all its models take
            # `stream_options` (and drops the usage chunk the client did not ask for).
            usage_asked = compat.model_deployments_support_stream_options(
                model=name, llm_router=router, team_id=None
            )
            served[name] = []
            for entry, weight in zip(entries, weights, strict=True):
                if entry is None:
                    continue
                kwargs, stream_timeout = entry
                streams = None
                if stream_timeout is not None:
                    streams = _native.LaneStreams(
                        timeout=stream_timeout, asks_usage=bool(usage_asked)
                    )
                served[name].append(
                    _native.LaneDeployment(**kwargs, streams=streams, weight=weight)
                )
    return served


def _fallback_groups(router: Any) -> set[str]:
    names: set[str] = set()
    for attribute in ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks"):
        for item in getattr(router, attribute, None) or []:
            if isinstance(item, Mapping):
                names.update(item)
    if getattr(router, "default_fallbacks", None):
        names.add("*")
    return names


def _weights(deployments: list[dict[str, Any]]) -> list[float | None]:
    """LiteLLM's simple shuffle: the first of `weight`, `rpm`, `tpm` set on any deployment."""
    for metric in ("weight", "rpm", "tpm"):
        values = [(d.get("litellm_params") or {}).get(metric) for d in deployments]
        numbers = [float(v) if isinstance(v, (int, float)) else 0.0 for v in values]
        if max(numbers, default=0.0) > 0:
            return list(numbers)
    return [None] * len(deployments)


def _entry(
    deployment: Mapping[str, Any], router: Any
) -> tuple[dict[str, Any], float | None] | None:
    """`_native.LaneDeployment`'s arguments but its streams and weight, and its streams'
    timeout, for a deployment the lane can call; the stream timeout is None when its streams
    stay with the proxy, `messages` when its `/v1/messages` calls do. Timeouts are the
    router's for the deployment, as it passes them to each call."""
    litellm_params = dict(deployment.get("litellm_params") or {})
    params = dict(litellm_params)
    info = deployment.get("model_info") or {}
    if params.pop("rust", None) is not True or any("cost" in key for key in info):
        return None
    kwargs = {**params, "messages": [{"role": "user", "content": "x"}]}

    def routed(stream: bool) -> Any:
        call = {**kwargs, "stream": True} if stream else dict(kwargs)
        timeout = compat.router_timeout(router, litellm_params, stream=stream)
        if timeout is not None:
            call["timeout"] = timeout
        return routing.route(call)

    route = routed(stream=False)
    if isinstance(route, routing.Decline) or isinstance(route, routing.StreamRoute):
        return None
    pricing = _pricing(route.provider, route.model)
    if pricing is None:
        return None
    model_id = str(info.get("id"))
    headers = [("x-litellm-model-id", model_id), ("x-litellm-model-name", params["model"])]
    api_base = route.deployment.api_base
    if api_base:
        headers.append(("x-litellm-model-api-base", api_base.split("?")[0]))
    headers.append(("x-litellm-version", compat.litellm_version() or ""))
    stream_route = routed(stream=True)
    streams = (
        isinstance(stream_route, routing.StreamRoute)
        # The lane applies LiteLLM's default repetition guard.
        and litellm.REPEATED_STREAMING_CHUNK_LIMIT == _DEFAULT_REPEAT_LIMIT
    )
    entry = {
        "deployment": route.deployment,
        "id": model_id,
        "params": dict(route.params),
        "timeout": route.timeout,
        "headers": headers,
        "pricing": pricing,
        "messages": _messages_entry(kwargs, deployment, router, pricing),
    }
    return entry, stream_route.timeout if streams else None


# The client header the lane passes on to `/v1/messages` calls (the one version there is).
_ANTHROPIC_VERSION = {"anthropic-version": "2023-06-01"}


def _messages_entry(
    kwargs: dict[str, Any],
    deployment: Mapping[str, Any],
    router: Any,
    pricing: _native.LanePricing,
) -> _native.LaneMessages | None:
    """The deployment's `/v1/messages` calls without thinking, sampling params or betas (the
    headers, those with the client's `anthropic-version`, the timeout, the streams and their
    API base header), from LiteLLM's own functions (as the fast path asks them); None when the
    proxy serves them, and the streams None when it serves their streams."""
    from litellm_fastpath import messages

    versioned: dict[str, Any] = {}
    compat.add_provider_specific_headers_to_request(versioned, _ANTHROPIC_VERSION)
    litellm_params = dict(deployment.get("litellm_params") or {})

    def route(max_tokens: int, stream: bool = False, **extra: Any) -> Any:
        call = {**kwargs, "max_tokens": max_tokens, **extra}
        if stream:
            call["stream"] = True
        timeout = compat.router_messages_timeout(router, litellm_params, stream=stream)
        if timeout is not None:
            call["timeout"] = timeout
        return messages.route_messages(call)

    routes = [
        route(max_tokens, **extra)
        for max_tokens in (1, 4096, 128_000)
        for extra in ({}, {"provider_specific_header": versioned["provider_specific_header"]})
    ]
    if any(isinstance(r, routing.Decline) for r in routes):
        return None
    providers = {r.provider for r in routes}
    if providers not in ({"anthropic"}, {"bedrock"}):
        return None
    if providers == {"bedrock"} and not _bedrock_messages_priced(routes[0].model, pricing):
        return None
    # LiteLLM treats every `max_tokens` alike here (else the proxy asks it per request).
    if len({(r.headers, r.timeout) for r in routes[0::2]}) != 1:
        return None
    if len({(r.headers, r.timeout) for r in routes[1::2]}) != 1:
        return None
    plain, with_version = routes[0], routes[1]
    # What the proxy names the API base of a `/v1/messages` stream (LiteLLM's `get_api_base`).
    api_base = litellm.get_api_base(model=litellm_params["model"], optional_params=litellm_params)
    return _native.LaneMessages(
        plain.deployment,
        headers=list(plain.headers),
        versioned_headers=list(with_version.headers),
        timeout=plain.timeout,
        streams=_messages_streams(route, plain, deployment, router),
        api_base=api_base.split("?")[0] if api_base else None,
    )


def _messages_streams(
    route: Any, plain: Any, deployment: Mapping[str, Any], router: Any
) -> _native.LaneMessagesStreams | None:
    """The timeout of the deployment's `/v1/messages` streams and whether the router holds
    their frames until content, when the lane can serve them as the proxy does: no fallback
    could take them over, the proxy's stream hooks leave them alone, and LiteLLM sends them as
    it sends the rest (None: the proxy serves them)."""
    held = compat.router_holds_messages_streams(
        router, deployment["model_name"], deployment.get("model_info")
    )
    if held is None:
        return None
    if not streaming.proxy_stream_hooks_idle() or getattr(
        litellm, "include_cost_in_streaming_usage", False
    ):
        return None
    streamed = [route(max_tokens, stream=True) for max_tokens in (1, 4096, 128_000)]
    if any(isinstance(r, routing.Decline) or r.headers != plain.headers for r in streamed):
        return None
    timeouts = {r.timeout for r in streamed}
    if len(timeouts) != 1:
        return None
    return _native.LaneMessagesStreams(timeout=timeouts.pop(), held=held)


def _pricing(provider: str, model: str) -> _native.LanePricing | None:
    """LiteLLM's per-token prices, when its cost is exactly linear in the token counts: input,
    output, OpenAI's cached prompt tokens, and Anthropic's cache reads and writes for
    `/v1/messages` (None: answers with those go through the proxy)."""
    try:
        info = litellm.get_model_info(model=model, custom_llm_provider=provider)
        prices = (float(info["input_cost_per_token"]), float(info["output_cost_per_token"]))
        reasoning = info.get("output_cost_per_reasoning_token")
        cache_read = info.get("cache_read_input_token_cost")
    except Exception:  # unknown model or price: the proxy serves it
        return None
    if reasoning is not None and float(reasoning) != prices[1]:
        return None  # the lane prices reasoning tokens as output (LiteLLM's default)
    # Up to a million prompt tokens: tiered prices (`*_above_200k_tokens`) show up here.
    for prompt, completion in ((11, 7), (1000, 1), (1, 1000), (120_000, 30_000), (1_000_000, 1)):
        expected = litellm.cost_per_token(
            model=model,
            custom_llm_provider=provider,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
        if expected != (prompt * prices[0], completion * prices[1]):
            return None
    return _native.LanePricing(
        input=prices[0],
        output=prices[1],
        cache_read=_cache_read_price(provider, model, prices, cache_read),
        anthropic_cache=_anthropic_cache_prices(provider, model, prices),
    )


def _cache_read_price(
    provider: str, model: str, prices: tuple[float, float], rate: Any
) -> float | None:
    """OpenAI's price per cached prompt token, when LiteLLM's cost of an answer with cached
    tokens is exactly the lane's (`Usage::cost`): the rest of the prompt at the input price,
    plus the cached tokens at theirs."""
    if provider != "openai" or rate is None:
        return None
    rate = float(rate)
    for prompt, cached, completion in ((1919, 1024, 10), (2048, 2048, 1), (150_000, 99_968, 77)):
        usage = litellm.Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details={"cached_tokens": cached, "audio_tokens": 0},
        )
        try:
            expected = litellm.cost_per_token(
                model=model, custom_llm_provider=provider, usage_object=usage
            )
        except Exception:
            return None
        ours = (float(prompt - cached) * prices[0] + float(cached) * rate, completion * prices[1])
        if expected != ours:
            return None
    return rate


# Anthropic usages the lane's cost of cache reads and writes is checked on: reads, writes of
# either lifetime or both, and prompts near the top of the untiered range.
_CACHE_USAGES = (
    (1200, 35, 300, 200, 0),
    (3, 1000, 0, 500, 200),
    (17, 4, 4321, 0, 777),
    (120_000, 512, 59_000, 300, 20_000),
    (1, 1, 1, 1, 1),
)


def _anthropic_cache_prices(
    provider: str, model: str, prices: tuple[float, float]
) -> _native.LaneCachePrices | None:
    """Anthropic's prices per cache read, 5-minute and 1-hour write, when LiteLLM's cost of an
    answer with them (its total and the proxy's header split) is exactly the lane's, as Rust
    works it out (`MessagesUsage::cost`); None: such answers go through the proxy."""
    if provider != "anthropic":
        return None
    names = (
        "cache_read_input_token_cost",
        "cache_creation_input_token_cost",
        "cache_creation_input_token_cost_above_1hr",
    )
    try:
        info = litellm.get_model_info(model=model, custom_llm_provider=provider)
        rates = _native.LaneCachePrices(
            read=float(info[names[0]]),
            write_5m=float(info[names[1]]),
            write_1h=float(info[names[2]]),
        )
        pricing = _native.LanePricing(input=prices[0], output=prices[1], anthropic_cache=rates)
        for text, output, read, write_5m, write_1h in _CACHE_USAGES:
            usage = {
                "input_tokens": text,
                "cache_creation_input_tokens": write_5m + write_1h,
                "cache_read_input_tokens": read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": write_5m,
                    "ephemeral_1h_input_tokens": write_1h,
                },
                "output_tokens": output,
                "service_tier": "standard",
            }
            ours = _native.lane_messages_cost(json.dumps(usage), pricing)
            if ours is None or _split(ours) != _litellm_messages_cost(model, usage):
                return None
    except Exception:  # a price LiteLLM does not have, or cannot work out: the proxy's
        return None
    return rates


# Token counts (input, output) the lane's cost of Bedrock's `/v1/messages` answers is checked on.
_PLAIN_USAGES = ((12, 7), (1000, 1), (1, 1000), (120_000, 30_000), (3, 0))


def _bedrock_messages_priced(model: str, pricing: _native.LanePricing) -> bool:
    """Whether LiteLLM's cost of a Bedrock `/v1/messages` answer (its total and the proxy's
    header split) is exactly the lane's for answers without the prompt cache (answers with it
    go through the proxy)."""
    for text, output in _PLAIN_USAGES:
        usage = {"input_tokens": text, "output_tokens": output}
        try:
            plain = _native.LanePricing(input=pricing.input, output=pricing.output)
            ours = _native.lane_messages_cost(json.dumps(usage), plain)
            if ours is None or _split(ours) != _litellm_messages_cost(model, usage, "bedrock"):
                return False
        except Exception:  # a price LiteLLM does not have, or cannot work out: the proxy's
            return False
    return True


def _split(cost: _native.LaneCost) -> tuple[float, ...]:
    """The lane's cost as the proxy's headers split it: total, input, output, cache read and
    cache creation."""
    return (cost.total, cost.input, cost.output, cost.cache_read, cost.cache_creation)


def _litellm_messages_cost(
    model: str, usage: dict[str, Any], provider: str = "anthropic"
) -> tuple[float, ...]:
    """LiteLLM's cost of an Anthropic answer with this usage, as its logging works it out (the
    answer as a `ModelResponse`, then its cost), split as the proxy's headers split it."""
    import httpx

    answer = {
        "id": "msg_check",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "x"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    response = litellm.AnthropicConfig().transform_parsed_response(
        completion_response=answer,
        raw_response=httpx.Response(200, headers={}),
        model_response=litellm.ModelResponse(),
    )
    total = litellm.completion_cost(
        completion_response=response, model=model, custom_llm_provider=provider
    )
    prompt, output = litellm.cost_per_token(
        model=model, custom_llm_provider=provider, usage_object=response.usage
    )
    parts = compat.get_token_type_cost_breakdown(
        model=model, custom_llm_provider=provider, usage=response.usage
    )
    read, creation = parts.cache_read_cost or 0.0, parts.cache_creation_cost or 0.0
    return (total, prompt - read - creation, output, read, creation)


def _answer_headers() -> list[tuple[str, str]]:
    security = compat.STATIC_SECURITY_HEADERS
    headers = [("x-litellm-rust", "true"), ("x-litellm-fastpath", _native.__version__)]
    return [*headers, ("vary", "Origin"), *((k.lower(), v) for k, v in security)]


def _openai_headers() -> list[str]:
    return [name.lower() for name in compat.OPENAI_RESPONSE_HEADERS]


def _cooling_groups(router: Any) -> list[str]:
    if not _lane_groups:
        return []
    ids = {
        (d.get("model_info") or {}).get("id"): d["model_name"]
        for d in router.model_list
        if d["model_name"] in _lane_groups
    }
    active = router.cooldown_cache.get_active_cooldowns(model_ids=list(ids), parent_otel_span=None)
    return sorted({ids[model_id] for model_id, _ in active if model_id in ids})


# -- replaying served requests ---------------------------------------------------------------


async def _replay_served() -> None:
    """Takes the lane's served requests in batches and runs each through the proxy's own
    endpoint in-process (auth, hooks, router, logging, cost and spend), with its ticket."""
    from litellm_fastpath.bridge import settle

    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(REPLAY_CONCURRENCY)
    running: set[asyncio.Task[None]] = set()
    while True:
        future: asyncio.Future[list[_native.LaneReplay]] = loop.create_future()
        _native.lane_next_replays(loop, future, settle)
        for record in await future:
            await slots.acquire()
            task = loop.create_task(_replay(record))
            running.add(task)
            task.add_done_callback(running.discard)
            task.add_done_callback(lambda _: slots.release())


async def _replay(record: _native.LaneReplay) -> None:
    ticket = record.ticket
    tail: list[bytes] = []
    try:
        claimed = _native.lane_claim(ticket)
        if claimed is None:
            return
        _claimed_call.set([claimed.call])
        _forced_deployment.set([claimed.deployment_id])
        request = _request(record.path, record.headers, record.body, record.client, record.server)
        key = await compat.user_api_key_auth(
            request=request,
            api_key=request.headers.get("authorization"),
            azure_api_key_header=None,
            # The lane takes `x-api-key` on `/v1/messages` only (as the key, sent alone).
            anthropic_api_key_header=request.headers.get("x-api-key"),
            google_ai_studio_api_key_header=None,
            azure_apim_header=None,
            custom_litellm_key_header=None,
        )
        from starlette.responses import Response

        if record.path == MESSAGES_PATH:
            answer = await compat.proxy_anthropic_response(
                fastapi_response=Response(), request=request, user_api_key_dict=key
            )
        else:
            answer = await compat.proxy_chat_completion(
                request=request, fastapi_response=Response(), model=None, user_api_key_dict=key
            )
        frames = getattr(answer, "body_iterator", None)
        if frames is not None:
            # A stream: reading it runs LiteLLM's end-of-stream logging. Past the first
            # chunk's frame (the lane wrote the client's) is the end the lane may wait for.
            first = True
            async for frame in frames:
                if first:
                    first = False
                    continue
                tail.append(frame.encode() if isinstance(frame, str) else bytes(frame))
    except Exception as err:  # LiteLLM logged it; the client has its answer
        logger.debug("fastpath_lane: replay ended with %s", type(err).__name__)
    finally:
        _native.lane_stream_tail(ticket, b"".join(tail))
        _native.lane_replayed()


def _request(
    path: str,
    headers: list[tuple[str, str]],
    body: bytes,
    client: tuple[str, int] | None,
    server: tuple[str, int] | None,
) -> Any:
    """The request as uvicorn would have handed it to the proxy."""
    proxy_server = compat.proxy_server()
    from starlette.requests import Request

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": client,
        "server": server,
        "state": {},
        "app": proxy_server.app,
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            # As on a live connection whose client waits: nothing more (the proxy checks for a
            # disconnect by cancelling this at once).
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(scope, receive)


# -- in the proxy: verdicts and tickets ----------------------------------------------------


async def note_request(user_api_key_dict: Any, data: dict[str, Any], call_type: Any) -> None:
    """The accelerator's pre-call hook: LiteLLM has judged this request's key (and its
    budgets, limits and model access); hand the verdict to the lane, and take a lane ticket."""
    if not _running:
        return
    _take_ticket(data)
    if str(getattr(call_type, "value", call_type)) not in _JUDGED_CALL_TYPES:
        return
    verdict = _verdict(user_api_key_dict)
    if verdict is not None:
        key_hash, valid_for = verdict
        _native.lane_set_key(
            key_hash,
            await _allowed_groups(user_api_key_dict),
            _expiry(user_api_key_dict.expires),
            valid_for,
            float(user_api_key_dict.spend or 0.0),
        )


# Calls whose key verdicts the lane takes (those of the routes it serves).
_JUDGED_CALL_TYPES = frozenset({"completion", "acompletion", "anthropic_messages"})
# A key with every field at its default, per class (built once: `_verdict` runs per request).
_DEFAULT_KEYS: dict[type, Any] = {}


def _verdict(key: Any) -> tuple[str, float] | None:
    """(key hash, how long the verdict holds), for keys whose verdict the lane can re-apply."""
    proxy_server = compat.proxy_server()

    defaults = _DEFAULT_KEYS.get(type(key))
    if defaults is None:
        defaults = _DEFAULT_KEYS.setdefault(type(key), type(key)())
    for field in type(key).model_fields:
        if field in _KEY_FIELDS_REAPPLIED:
            continue
        if getattr(key, field) != getattr(defaults, field):
            return None
    if key.api_key == compat.LITELLM_PROXY_MASTER_KEY_ALIAS:
        master = proxy_server.master_key
        if not isinstance(master, str):
            return None
        # The master key is judged by configuration, once.
        return hashlib.sha256(master.encode()).hexdigest(), 1e9
    # LiteLLM gives keys without a user the internal-user role, which may call chat routes.
    role = getattr(key.user_role, "value", key.user_role)
    if (
        key.user_id is not None
        or not isinstance(key.token, str)
        or role not in (None, "internal_user")
    ):
        return None
    ttl = (proxy_server.general_settings or {}).get("user_api_key_cache_ttl")
    default_ttl = proxy_server.UserAPIKeyCacheTTLEnum.in_memory_cache_ttl.value
    return key.token, float(ttl if isinstance(ttl, (int, float)) else default_ttl)


async def _allowed_groups(key: Any) -> list[str] | None:
    if not key.models:
        return None
    proxy_server = compat.proxy_server()

    router = proxy_server.llm_router
    allowed = []
    for group in _lane_groups:
        try:
            await compat.can_key_call_model(
                model=group,
                llm_model_list=router.model_list if router else None,
                valid_token=key,
                llm_router=router,
            )
        except Exception:  # LiteLLM's "not allowed"
            continue
        allowed.append(group)
    return allowed


def _expiry(expires: Any) -> float | None:
    if expires is None:
        return None
    if isinstance(expires, str):
        import datetime

        expires = datetime.datetime.fromisoformat(expires)
    if expires.tzinfo is None:
        import datetime

        expires = expires.replace(tzinfo=datetime.UTC)
    return float(expires.timestamp())


def _take_ticket(data: dict[str, Any]) -> None:
    """A replayed request: claim its ticket, force the router's pick to the lane's deployment,
    and keep the lane's own headers out of what LiteLLM records of the request."""
    request = data.get("proxy_server_request") or {}
    headers = request.get("headers") or {}
    ticket_id = headers.get(TICKET_HEADER)
    if not ticket_id:
        return
    claimed = _native.lane_claim(ticket_id)
    for recorded in (headers, (data.get("metadata") or {}).get("headers")):
        if isinstance(recorded, dict):
            recorded.pop(TICKET_HEADER, None)
    if claimed is None:
        # Only the lane sends tickets (it strips them from clients' requests), and each is
        # claimed once: a replay that finds none must not reach the provider.
        raise RuntimeError("fast lane replay without its outcome; not calling the provider")
    _claimed_call.set([claimed.call])
    _forced_deployment.set([claimed.deployment_id])


def learn_messages_headers(
    kwargs: Mapping[str, Any],
    small: dict[str, Any],
    caller: Mapping[str, str],
    headers: tuple[tuple[str, str], ...],
) -> None:
    """On the proxy's path, once the fast path has asked LiteLLM how it sends a `/v1/messages`
    request with these small params (`max_tokens`, thinking, sampling) and client headers to
    this deployment: hand the lane the headers, keyed as the lane keys such requests
    (`lane::messages::decision_key`), so the next one takes the lane."""
    deployment_id = (kwargs.get("model_info") or {}).get("id")
    if not isinstance(deployment_id, str) or set(caller) - _ANTHROPIC_CLIENT_HEADERS:
        return
    if len(small) == 1 and dict(caller) in ({}, _ANTHROPIC_VERSION):
        return  # the usual request: the lane has its headers from when the group was loaded
    dumps = functools.partial(json.dumps, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        small_key = dumps(small) if len(small) > 1 else ""
        key = f"{small_key}\n{dumps(dict(caller))}"
        _native.lane_learn_messages_headers(deployment_id, key, list(headers))
    except (TypeError, ValueError, _native.InvalidRequestError):
        return  # a value JSON cannot hold or a header the lane cannot send: the proxy's


# What the proxy passes on to Anthropic of the client's headers (`provider_specific_header`).
_ANTHROPIC_CLIENT_HEADERS = frozenset({"anthropic-version", "anthropic-beta"})


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


def claimed_call() -> Any:
    """The lane's outcome for this request's provider call, once (None: call the provider)."""
    claimed = _claimed_call.get()
    return claimed.pop() if claimed else None


def _install_forced_pick(router: Any) -> None:
    """A replay's router picks the deployment the lane called (its own pick is random)."""
    if getattr(router, "_litellm_fastpath_forced_pick", False):
        return
    original = router.async_get_available_deployment

    async def pick(model: str, *args: Any, **kwargs: Any) -> Any:
        holder = _forced_deployment.get()
        if holder:
            forced = holder.pop()
            for deployment in router.model_list:
                if (deployment.get("model_info") or {}).get("id") == forced and deployment.get(
                    "model_name"
                ) == model:
                    return deployment
        return await original(model, *args, **kwargs)

    router.async_get_available_deployment = pick
    router._litellm_fastpath_forced_pick = True
