"""The group table: what LiteLLM knows, handed to the lane and kept current. The model groups
the lane serves (each deployment as the fast path would route it: its settings, prices, streams
and `/v1/messages` calls), whether proxy-wide settings let it serve at all, the headers it
answers with, and the groups cooling down.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import litellm

from litellm_fastpath import _native, claims, compat, messages, routing, streaming
from litellm_fastpath.declines import Decline
from litellm_fastpath.lane import (
    accounting,
    limits,
    middleware,
    prices,
    realtime,
    replay,
    settings,
    slots,
    usage,
)
from litellm_fastpath.providers import PROVIDERS

logger = logging.getLogger("litellm_fastpath")

# How often LiteLLM's router state (groups, cooldowns) is handed to the lane.
REFRESH_S = 0.25
# `litellm_settings` besides the lane's own under which the lane's requests mean what they mean
# on the normal path (the rest keep it off): logging, and options the fast path's own admission
# already reads.
_NEUTRAL_LITELLM_SETTINGS = frozenset(
    {
        "callbacks",
        "success_callback",
        "failure_callback",
        "set_verbose",
        "json_logs",
        "drop_params",
        "request_timeout",
        "num_retries",
        # The realtime pool changes how a `/v1/realtime` session is dialed, never a request.
        "fastpath_realtime_pool",
        "fastpath_realtime_pool_idle_s",
        # Warm connections change when the upstream is dialed, never a request.
        "fastpath_warm_connections",
        "fastpath_warm_interval_s",
    }
)
_lane_groups: frozenset[str] = frozenset()
_status = ""  # what the lane last logged about itself
# The deployments of the groups the lane serves (id -> group), whose slots it shares.
_served_deployments: dict[str, str] = {}
# LiteLLM's `REPEATED_STREAMING_CHUNK_LIMIT` default, the one the lane's streams apply.
_DEFAULT_REPEAT_LIMIT = 100


def served_groups() -> frozenset[str]:
    """The model groups the lane serves now (realtime groups included)."""
    return _lane_groups | realtime.served_groups()


async def keep_current(litellm_settings: frozenset[str]) -> None:
    """Hands the lane LiteLLM's router state whenever it changes, and the groups cooling down,
    and LiteLLM the lane's in-flight count, for as long as the worker runs.
    `litellm_settings`: the config file's keys besides the lane's own."""
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
                _configure(router, litellm_settings)
                accounting.forget_deployments()
                seen = state
            _native.lane_set_cooling(_cooling_groups(router))
            slots.keep_installed(router, _served_deployments)
            await usage.read(router)
            middleware.count_in_flight()
        except Exception:  # a failed refresh turns the lane off, never the proxy
            logger.exception("fastpath_lane: refresh failed; the lane is off until the next one")
            _native.lane_configure("refresh_failed", [], [])
            seen = None


def _router_state(router: Any) -> tuple[Any, ...]:
    proxy_server = compat.proxy_server()

    return (
        id(router),
        tuple(
            (
                d.get("model_name"),
                (d.get("model_info") or {}).get("id"),
                # A deployment LiteLLM updates keeps its id (`store_model_in_db`, `/model/update`):
                # the content of those the lane may serve (the rest keep their group off it).
                _fingerprint(d) if "rust" in (d.get("litellm_params") or {}) else None,
            )
            for d in router.model_list
        ),
        # By content: LiteLLM changes its settings store in place (database rows, `/config/update`),
        # and replaces callbacks in place.
        _fingerprint(dict(proxy_server.general_settings or {})),
        tuple(id(callback) for callback in litellm.callbacks),
        proxy_server.premium_user,
        compat.hsts_enabled(),
        getattr(router, "default_max_parallel_requests", None),
        _keeps_end_users(),
    )


def _keeps_end_users() -> bool:
    """Whether LiteLLM keeps end users, whose budgets, limits and model access its auth checks
    per request: only with a database (`get_end_user_object` needs one)."""
    return compat.proxy_server().prisma_client is not None


def _fingerprint(content: Any) -> str:
    """A digest of settings or a deployment (not them: they hold secrets)."""
    dumped = json.dumps(content, sort_keys=True, default=repr)
    return hashlib.sha256(dumped.encode()).hexdigest()


def _configure(router: Any, litellm_settings: frozenset[str]) -> None:
    global _lane_groups, _served_deployments, _status
    why_off = _why_off(router, litellm_settings)
    groups = {} if why_off else _groups(router)
    if frozenset(groups) != _lane_groups:
        # Verdicts list the groups a key may call, as they were when LiteLLM judged it.
        _native.lane_forget_group_lists()
    _lane_groups = frozenset(groups)
    replay.install_forced_pick(router)
    replay.install_admitted_budget_skip()
    replay.install_call_ids()
    limits.configure()
    _served_deployments = {
        str((d.get("model_info") or {}).get("id")): d["model_name"]
        for d in router.model_list
        if d["model_name"] in groups
    }
    # Before the lane serves them: the router's slots for them are the lane's from now on.
    slots.keep_installed(router, _served_deployments)
    usage.keep(set(groups), router, set(_served_deployments))
    _native.lane_set_groups(groups, reservation_rates(router, groups))
    # Usage-based routing picks realtime sessions by usage too: the relay draws by shuffle, so
    # those sessions stay with the proxy.
    realtime.configure(router, why_off is not None or usage.routes_by_usage(router), _weights)
    _native.lane_configure(
        why_off, _answer_headers(), list(_openai_headers()), end_users=_keeps_end_users()
    )
    status = f"off ({why_off})" if why_off else f"serving model groups {sorted(groups)}"
    if status != _status:
        logger.warning("fastpath_lane: %s", status)
        _status = status


def reservation_rates(router: Any, names: Iterable[str]) -> dict[str, tuple[float, float, int]]:
    """Per group, the prices LiteLLM's budget reservation estimates a request at (its own
    `_get_model_cost_infos`: the group's rates and every deployment's tiers): the highest input
    rate, the highest output or reasoning rate, and the highest output ceiling. Groups priced in
    tiers, or without an input rate, are left out (their budgeted requests go to the proxy)."""
    rates: dict[str, tuple[float, float, int]] = {}
    for name in names:
        try:
            infos = compat.get_model_cost_infos(model=name, llm_router=router)
        except Exception:
            continue
        if not infos or any(info.get("tiered_pricing") for info in infos):
            continue
        inputs = [_rate(info.get("input_cost_per_token")) for info in infos]
        if any(rate is None for rate in inputs):
            continue
        outputs = [
            max(
                _rate(info.get("output_cost_per_token")) or 0.0,
                _rate(info.get("output_cost_per_reasoning_token")) or 0.0,
            )
            for info in infos
        ]
        ceilings = [
            _ceiling(info.get("max_output_tokens")) or compat.DEFAULT_MAX_OUTPUT_TOKENS_FALLBACK
            for info in infos
        ]
        rates[name] = (max(r for r in inputs if r is not None), max(outputs), max(ceilings))
    return rates


def _rate(value: Any) -> float | None:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return None
    return rate if rate >= 0 and rate == rate and rate != float("inf") else None


def _ceiling(value: Any) -> int | None:
    try:
        ceiling = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return ceiling if ceiling > 0 else None


def _why_off(router: Any, litellm_settings: frozenset[str]) -> str | None:
    """The proxy-wide setting under which no request can take the lane (None: it can), named
    as the lane counts it (`lane_off:<setting>`), never with its value."""
    proxy_server = compat.proxy_server()
    reasons = off_reasons(
        router,
        litellm_settings,
        proxy_server.general_settings or {},
        proxy_server.master_key,
        litellm.callbacks,
        premium=proxy_server.premium_user is True,
    )
    # The lane counts one reason (`lane_off:<setting>`); `explain` lists them all.
    return reasons[0] if reasons else None


def off_reasons(
    router: Any,
    litellm_settings: frozenset[str],
    general_settings: Mapping[str, Any],
    master_key: Any,
    callbacks: list[Any],
    *,
    premium: bool,
) -> list[str]:
    """Every proxy-wide setting under which no request can take the lane (empty: it can).
    `litellm_settings`: the config's keys besides the lane's own. Also what `explain` says."""
    reasons = []
    odd_litellm = sorted(litellm_settings - _NEUTRAL_LITELLM_SETTINGS)
    if odd_litellm:
        reasons.append(f"litellm_settings.{odd_litellm[0]}")
    context = settings.Context(
        premium=premium,
        # LiteLLM's own switch for its legacy limiter (`proxy/hooks/__init__.py`).
        legacy_limiter=os.getenv("LEGACY_MULTI_INSTANCE_RATE_LIMITING", "false").lower() == "true",
    )
    reasons += settings.why_off(general_settings, context)
    if master_key is None:
        reasons.append("no_master_key")
    for name in (
        "model_alias_map",
        "cache",
        "max_budget",
        "post_call_rules",
        "pre_call_rules",
        "modify_params",
        "enable_json_schema_validation",
    ):
        if getattr(litellm, name, None):
            reasons.append(f"litellm.{name}")
    # Usage-based routing's own callback: the lane picks by its counters and counts on them.
    by_usage = usage.routes_by_usage(router)
    strategy = getattr(router, "lowesttpm_logger_v2", None) if by_usage else None
    busy = [type(c).__name__ for c in callbacks if c is not strategy and not _idle_hook(c)]
    if busy:
        reasons += [f"callback.{name}" for name in busy]
    if getattr(router, "routing_strategy", "simple-shuffle") != "simple-shuffle" and not by_usage:
        reasons.append("router.routing_strategy")
    if getattr(router, "enable_pre_call_checks", False) or getattr(
        router, "optional_pre_call_checks", None
    ):
        reasons.append("router.pre_call_checks")
    if getattr(router, "routing_groups", None):
        reasons.append("router.routing_groups")
    if getattr(router, "routing_plugins", None):
        reasons.append("router.plugins")
    if _default_params_set(router):
        reasons.append("router.default_litellm_params")
    return reasons


# What the router always puts in its `default_litellm_params`: its timeouts (the lane's are the
# router's, `compat.router_timeout`) and its client's retries (the fast path calls once).
_ROUTER_DEFAULT_PARAMS = frozenset({"timeout", "stream_timeout", "max_retries", "metadata"})


def _default_params_set(router: Any) -> bool:
    """Whether the router adds params of an operator's to every call (`default_litellm_params`:
    they change what is sent, and take precedence over a deployment's own)."""
    defaults = getattr(router, "default_litellm_params", None) or {}
    metadata = defaults.get("metadata") or {}
    return bool(set(defaults) - _ROUTER_DEFAULT_PARAMS) or any(
        value is not None for value in metadata.values()
    )


# Callbacks that see requests but never change one the lane serves.
_IDLE_CALLBACKS = frozenset(
    {
        "FastpathAccelerator",  # ours: removes `rust` from bodies (the lane takes none with it)
        # LiteLLM's defaults: its limiter counts only keys with limits (those stay off the
        # lane), and the others act on routes or fields the lane does not take.
        "_PROXY_MaxParallelRequestsHandler_v3",
        "_PROXY_MaxParallelRequestsHandler",
        # Its deployment filter passes every deployment on; it counts spend per model only for
        # keys with model budgets, which stay with the proxy (`keys`).
        "_PROXY_VirtualKeyModelMaxBudgetLimiter",
        "_PROXY_CacheControlCheck",
        "ResponsesIDSecurity",
        "_PROXY_LiteLLMManagedFiles",
        "_ProxyDBLogger",
        "ServiceLogging",
        "SkillsInjectionHook",  # acts on `container.skills`, a field the lane does not take
        # `callbacks: ["prometheus"]`: its post-call success hook is empty; its metrics come
        # from success and failure logging, which the replay runs.
        "PrometheusLogger",
        # Act only on requests in a session (`metadata.session_id`, or `x-litellm-*`
        # headers), which the lane leaves to the proxy.
        "_PROXY_MaxIterationsHandler",
        "_PROXY_MaxBudgetPerSessionHandler",
        "_PROXY_SensitiveDataRoutingHandler",
        # Registered when the proxy has a database: acts only on `/v1/messages` calls an
        # auto-router stamped (`_autorouter_baseline_route`), and the lane serves no auto-router.
        "AutoRouterBaselineCache",
    }
)
# CustomLogger methods that can change neither a request the lane serves nor its answer: a
# callback replacing only these leaves the lane on; any other, one LiteLLM adds later too,
# turns it off (`lane_off:callback.<class>`). The logging events and what shapes the logged
# payload (the batch's or the replay's logging runs them), those LiteLLM calls only for a
# failure, a fallback or a refusal (the proxy answers those; not the per-deployment failure
# hook, which sends the fast path's calls to LiteLLM's Python path), and hooks of other routes.
_SERVE_IDLE_METHODS = accounting.LOGGING_EVENTS | frozenset(
    {
        "log_input_event",
        "async_log_input_event",
        "log_event",
        "async_log_event",
        "async_dataset_hook",
        "redact_standard_logging_payload_from_model_call_details",
        "redacts_messages_itself",
        "truncate_standard_logging_payload_content",
        "_process_messages",
        "_redact_base64",
        "_select_metadata_field",
        "_should_keep_content",
        "_strip_base64_from_messages",
        "_strip_base64_from_messages_sync",
        "_truncate_field",
        "_truncate_text",
        "async_post_call_failure_hook",
        "log_failure_fallback_event",
        "log_success_fallback_event",
        "log_model_group_rate_limit_error",
        "async_post_mcp_tool_call_hook",
        # LiteLLM calls these on its adapters' own translation objects, never on a callback.
        "translate_completion_input_params",
        "translate_completion_output_params",
    }
)


def _idle_hook(callback: Any) -> bool:
    if isinstance(callback, str):
        return True  # a named logging integration: it logs, after the fact
    if type(callback).__name__ in _IDLE_CALLBACKS:
        return True
    if not isinstance(callback, compat.CustomLogger):
        return False
    return accounting.overridden_methods(callback) <= _SERVE_IDLE_METHODS


class _Served(NamedTuple):
    """A group the lane serves: its deployments, and whether all of them stream on the lane
    and take `/v1/messages` calls there."""

    deployments: list[_native.LaneDeployment]
    streams: bool
    messages: bool


def _groups(router: Any) -> dict[str, list[_native.LaneDeployment]]:
    return {
        name: entries.deployments
        for name, entries in _group_entries(router).items()
        if isinstance(entries, _Served)
    }


def group_reasons(router: Any) -> dict[str, dict[str, list[str]]]:
    """Every model group of the router: per lane route (`chat`, `chat stream`, `messages`),
    why the lane does not serve a plain request of it (empty: it does), by the decisions the
    lane configures itself with. Also what `explain` says."""
    reasons: dict[str, dict[str, list[str]]] = {}
    for name, entries in _group_entries(router).items():
        if not isinstance(entries, _Served):
            reasons[name] = {key: list(entries) for key in ("chat", "chat stream", "messages")}
            continue
        reasons[name] = {
            "chat": [],
            "chat stream": []
            if entries.streams
            else ["a deployment's streams stay with the proxy (see docs/lane.md)"],
            "messages": []
            if entries.messages
            else ["a deployment's /v1/messages calls stay with the proxy (see docs/lane.md)"],
        }
    return reasons


def _group_entries(router: Any) -> dict[str, _Served | tuple[str, ...]]:
    """Per group: what the lane serves of it, or the reasons it does not serve it."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for deployment in router.model_list:
        by_group.setdefault(deployment["model_name"], []).append(deployment)
    fallbacks = _fallback_groups(router)
    result: dict[str, _Served | tuple[str, ...]] = {}
    for name, deployments in by_group.items():
        if name in fallbacks:
            result[name] = ("the group has fallbacks (the router would try others)",)
            continue
        if name in (getattr(router, "model_group_alias", None) or {}):
            result[name] = ("the group is a model_group_alias",)
            continue
        if usage.io_limited(router, name):
            result[name] = (_IO_LIMITS,)
            continue
        group_limits = usage.limits(router, name)
        if getattr(router, "enable_tag_filtering", False) or any(
            (d.get("model_info") or {}).get("enable_tag_filtering") for d in deployments
        ):
            result[name] = (_TAGS,)
            continue
        # The router never picks a deployment an admin paused (`model_info.blocked`).
        deployments = [
            d for d in deployments if (d.get("model_info") or {}).get("blocked") is not True
        ]
        if not deployments:
            result[name] = (_PAUSED,)
            continue
        orders = {compat.deployment_order(deployment) for deployment in deployments} - {None}
        if len(orders) > 1:
            result[name] = (_ORDERS,)
            continue
        if orders:
            # The router picks among the lowest order's deployments while they are healthy
            # (while one cools down, the lane leaves the group to the proxy).
            deployments = [d for d in deployments if compat.deployment_order(d) in orders]
        entries = [_entry(deployment, router) for deployment in deployments]
        why_not = [entry for entry in entries if isinstance(entry, str)]
        if why_not:
            result[name] = tuple(sorted(set(why_not)))
            continue
        weights = _weights(deployments)
        # The proxy asks every stream of the group for usage when all its models take
        # `stream_options` (and drops the usage chunk the client did not ask for).
        usage_asked = compat.model_deployments_support_stream_options(
            model=name, llm_router=router, team_id=None
        )
        served = _Served([], streams=True, messages=True)
        for deployment, entry, weight in zip(deployments, entries, weights, strict=True):
            assert not isinstance(entry, str)
            slotted = slots.for_deployment(router, deployment)
            kwargs, stream_timeout = entry
            streams = None
            if stream_timeout is not None:
                streams = _native.LaneStreams(timeout=stream_timeout, asks_usage=bool(usage_asked))
            served.deployments.append(
                _native.LaneDeployment(
                    **kwargs,
                    streams=streams,
                    weight=weight,
                    slots=slotted,
                    usage=None if group_limits is None else usage.for_group(name, group_limits),
                    routing=usage.for_deployment(router, deployment),
                )
            )
            served = served._replace(
                streams=served.streams and streams is not None,
                messages=served.messages and kwargs["messages"] is not None,
            )
        result[name] = served
    return result


_IO_LIMITS = "the group has itpm or otpm limits (the router checks and counts them per answer)"
_TAGS = "the router filters the group's deployments by tags (enable_tag_filtering)"
_PAUSED = "every deployment of the group is paused (model_info.blocked)"
_ORDERS = "the group's deployments have several orders (the router falls back from one to the next)"


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


def _entry(deployment: Mapping[str, Any], router: Any) -> tuple[dict[str, Any], float | None] | str:
    """`_native.LaneDeployment`'s arguments but its streams and weight, and its streams'
    timeout, for a deployment the lane can call (else why not); the stream timeout is None when
    its streams stay with the proxy, `messages` when its `/v1/messages` calls do. Timeouts are
    the router's for the deployment, as it passes them to each call."""
    litellm_params = dict(deployment.get("litellm_params") or {})
    params = dict(litellm_params)
    info = deployment.get("model_info") or {}
    if params.pop("rust", None) is not True:
        return "a deployment without rust: true"
    if any("cost" in key for key in info):
        return "a deployment with its own prices in model_info"
    if info.get("team_id") is not None:
        # The router picks it only for requests of that team (`filter_team_based_models`).
        return "a team's deployment (model_info.team_id)"
    kwargs = {**params, "messages": [{"role": "user", "content": "x"}]}

    def routed(stream: bool) -> Any:
        call = {**kwargs, "stream": True} if stream else dict(kwargs)
        timeout = compat.router_timeout(router, litellm_params, stream=stream)
        if timeout is not None:
            call["timeout"] = timeout
        return routing.route(call)

    route = routed(stream=False)
    if isinstance(route, Decline):
        return f"the fast path declines its chat calls ({route.code})"
    if isinstance(route, routing.StreamRoute):
        return "its chat calls are streams"
    pricing = prices.lane_pricing(route.provider, route.model)
    if pricing is None:
        return "its prices are not ones the lane works out as LiteLLM does (tiers, other units)"
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
    versioned: dict[str, Any] = {}
    compat.add_provider_specific_headers_to_request(versioned, claims.ANTHROPIC_VERSION)
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
    if any(isinstance(r, Decline) for r in routes) or len({r.provider for r in routes}) != 1:
        return None
    provider, model = routes[0].provider, routes[0].model
    api = PROVIDERS[provider].messages
    assert api is not None  # routed by it
    if api.plain_costs_checked and not prices.plain_messages_priced(provider, model, pricing):
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
    if any(isinstance(r, Decline) or r.headers != plain.headers for r in streamed):
        return None
    timeouts = {r.timeout for r in streamed}
    if len(timeouts) != 1:
        return None
    return _native.LaneMessagesStreams(timeout=timeouts.pop(), held=held)


def _answer_headers() -> list[tuple[str, str]]:
    security = list(compat.STATIC_SECURITY_HEADERS)
    if compat.hsts_enabled():
        security.append(compat.HSTS_HEADER)
    headers = [("x-litellm-rust", "true"), ("x-litellm-fastpath", _native.__version__)]
    return [*headers, ("vary", "Origin"), *((k.lower(), v) for k, v in security)]


def _openai_headers() -> list[str]:
    return [name.lower() for name in compat.OPENAI_RESPONSE_HEADERS]


def _cooling_groups(router: Any) -> list[str]:
    served = served_groups()
    if not served:
        return []
    ids = {
        (d.get("model_info") or {}).get("id"): d["model_name"]
        for d in router.model_list
        if d["model_name"] in served
    }
    active = router.cooldown_cache.get_active_cooldowns(model_ids=list(ids), parent_otel_span=None)
    return sorted({ids[model_id] for model_id, _ in active if model_id in ids})
