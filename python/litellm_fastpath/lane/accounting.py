"""Served requests accounted for in the batch the lane hands over, without a replay: where the
replay's only effects are ones made here (#27, its first part).

A replay runs the proxy's auth, hooks, router and logging for a request the lane answered (about
3.5 ms of LiteLLM's Python). For a non-streamed chat completion sent with the master key, in a
worker whose callbacks are ours, LiteLLM's own proxy hooks and callbacks that override none of a
callback's methods called for an answer, without LiteLLM's cache, service callbacks or LiteLLM's
INFO logs, to a deployment whose usage the router does not track, all of that checks and leaves
nothing but (audited against LiteLLM 1.106.12; `_INERT` lists the hooks found to leave
nothing):

- the router's count of the pick: the deployment's request count for the minute
  (`Router._update_usage`), `total_calls` and `success_calls` of its model, and (its success
  callback) the deployment's successes for the minute, which its cooldowns weigh failures by;
- the rate limiter's token counters of the key, its user and (key, model group), which it adds
  an answer's tokens to whether or not a limit is set (`{api_key:...}:tokens`, ...);
- the billable-request middleware's counts (`middleware.count_served`).

Those are made here by LiteLLM's own functions, once per batch (the limiter's counters in one
pipeline).

Where a callback records requests through LiteLLM's logging (a CustomLogger replacing only its
logging events), such a request's logging runs here too, in the batch, as in its replay: the
accelerator's provider call with the lane's outcome, given the arguments the proxy and router
would have built (learnt per request shape from two replays: `shapes`), then the router's and
the proxy's steps on the answer that the logging reads. Its logging runs the recording
callbacks only: what the others would count (the router's successes, the limiter's tokens) is
counted once per batch as above.

With a database, LiteLLM's cost callback is such a callback: its work (the spend-log row, the
key, user, team and member updates queued for the database, the `spend:*` counters) runs in that
logging. A request sent with a virtual key whose verdict the worker holds is logged so too,
given its key's auth object as its replay's auth would build it now (`reauth`, in the batch):
its part of the metadata is written anew from it, the rest is its shape's, learnt from that
key's replays. A request holding its key's budget gets its own auth object, with the budget
reservation its replay's auth would make (in the batch, before its logging, which reconciles it
as the replay's does); the lane's hold on the key is released once that reservation is in
LiteLLM's counters, as in the replay. A rate-limited key's request has the limiter's pre-call
hook run for it before its logging, in its own task (`limits.count_batched`: it counts the
request or records the lane's counts, stashes its token reservation and hands the key's verdict
over, releasing the hold), and the limiter's success callback runs in its logging, reconciling
that reservation, as in its replay.

A stream and a `/v1/messages` answer or stream are logged so too, in any worker: a stream's
end-of-stream logging runs in the proxy's own reading of it (`async_data_generator`, or
`async_sse_data_generator` for `/v1/messages`; its frames dropped, but where the client waits
for the end the proxy writes, its usage chunk: the frames past the first chunk's go to the lane
as that end), and the limiter's success callback counts their tokens in their logging, as in
their replay (the batch has no usage of theirs). In a group whose usage the router counts per
minute (`usage`), the router's success callback runs in a stream's logging too: it counts the
stream's tokens after its end, as in its replay (and its success, which the batch then leaves
to it). A stream that failed mid-way is replayed: its failure is the proxy's.

Every other request is replayed, counted by why (`replay_needed:<why>`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import importlib
import itertools
import json
import logging
import secrets
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import litellm

from litellm_fastpath import _native, claims, compat
from litellm_fastpath.lane import limits, middleware, shapes, usage
from litellm_fastpath.lane.usage import RoutingCounts

logger = logging.getLogger("litellm_fastpath")

MESSAGES_PATH = "/v1/messages"
CALL_ID_HEADER = "x-litellm-call-id"

# Requests replayed rather than accounted here, by why; those accounted here; those of them
# whose tokens the batch counted on the limiter's counters (for the others the limiter's success
# callback runs in their logging); and those whose logging (run here) failed.
replay_needed: collections.Counter[str] = collections.Counter()
accounted = 0
tokens_counted = 0
logging_failed = 0

# LiteLLM's proxy hooks that leave nothing for such a request (each returns early: no limit,
# budget, session, agent, cache control, skill or responses id is involved, or it only reads):
# (module, class name). Matched by exact type: a subclass may do more.
_INERT = (
    ("litellm.proxy.hooks.model_max_budget_limiter", "_PROXY_VirtualKeyModelMaxBudgetLimiter"),
    ("litellm.proxy.hooks.cache_control_check", "_PROXY_CacheControlCheck"),
    ("litellm.proxy.hooks.responses_id_security", "ResponsesIDSecurity"),
    ("litellm.proxy.hooks.litellm_skills.main", "SkillsInjectionHook"),
    ("litellm.proxy.hooks.max_iterations_limiter", "_PROXY_MaxIterationsHandler"),
    ("litellm.proxy.hooks.max_budget_per_session_limiter", "_PROXY_MaxBudgetPerSessionHandler"),
    ("litellm.proxy.hooks.sensitive_data_routing", "_PROXY_SensitiveDataRoutingHandler"),
    # It reads only `/v1/messages` answers with the provider's HTTP response (never a lane's).
    ("litellm.proxy.hooks.prompt_cache_prediction", "PromptCacheObserver"),
    # With no service callbacks (checked), its hooks pass the timing to nobody.
    ("litellm._service_logger", "ServiceLogging"),
)
_LIMITER = (
    "litellm.proxy.hooks.parallel_request_limiter_v3",
    "_PROXY_MaxParallelRequestsHandler_v3",
)
# The router's own callbacks: on success it counts a deployment's usage only where it has
# limits (checked per deployment); the failure ones never run for an answer the lane served.
_ROUTER_CALLBACKS = frozenset(
    {
        "deployment_callback_on_success",
        "sync_deployment_callback_on_success",
        "deployment_callback_on_failure",
        "async_deployment_callback_on_failure",
    }
)
# Our own callback's module (the accelerator: for a served request its hook takes the ticket,
# which the ledger does); named, not imported, as the proxy hook imports the lane.
_ACCELERATOR_MODULE = "litellm_fastpath.proxy"
# CustomLogger methods that are not per request (a class overriding only these records nothing).
_NOT_PER_REQUEST = frozenset(
    {
        "get_callback_env_vars",
        "handle_callback_failure",
        "async_log_audit_log_event",
        "async_filter_listed_models",
        "get_proxy_server_request_from_cold_storage_with_object_key",
    }
)
# CustomLogger methods LiteLLM's logging object calls around a provider call (not the proxy's or
# the router's hooks): a callback replacing only these is given a served request by its logging.
LOGGING_EVENTS = frozenset(
    {
        "log_pre_api_call",
        "log_post_api_call",
        "log_stream_event",
        "log_success_event",
        "log_failure_event",
        "async_log_pre_api_call",
        "async_log_stream_event",
        "async_log_success_event",
        "async_log_failure_event",
    }
)
# CustomLogger methods LiteLLM calls only for a failure, a fallback, a refusal or a stream: never
# for a non-streamed answer the lane served, so overriding them changes nothing here (operators'
# logging callbacks often add a failure hook).
_NOT_ON_SUCCESS = frozenset(
    {
        "async_post_call_failure_hook",
        "async_post_call_failure_deployment_hook",
        "log_failure_fallback_event",
        "log_success_fallback_event",
        "log_model_group_rate_limit_error",
        "async_post_call_streaming_hook",
        "async_post_call_streaming_iterator_hook",
        "async_post_call_streaming_deployment_hook",
        "translate_completion_output_params_streaming",
    }
)
# LiteLLM's loggers: at INFO a replay logs per request (the router's pick, its 200 OK).
_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


@functools.cache
def _litellm_loggers() -> tuple[logging.Logger, ...]:
    return tuple(map(logging.getLogger, _LITELLM_LOGGERS))


@dataclasses.dataclass
class _Batch:
    """What a batch's accounted requests add up to."""

    # (path, deployment id, the deployment's model, whether the router's success callback runs
    # in its logging: a stream of a group whose usage the router counts, whose tokens it counts
    # at the stream's end)
    served: list[tuple[str, str, str, bool]] = dataclasses.field(default_factory=list)
    # (group, usage, virtual key or None: the master key) -> answers
    tokens: dict[tuple[str, str, str | None], int] = dataclasses.field(default_factory=dict)
    # What LiteLLM's logging carries of each virtual key in `tokens`.
    callers: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # (deployment id, group, model) -> (answers, their tokens) the router counts per minute
    # (groups with tpm or rpm limits: `usage`), of requests not logged here.
    usage: dict[tuple[str, str, str], tuple[int, int]] = dataclasses.field(default_factory=dict)
    # Deployment id -> its requests and the tokens of those whose logging does not count them,
    # for usage-based routing's counters.
    routing: dict[str, RoutingCounts] = dataclasses.field(default_factory=dict)
    # Requests whose logging runs here: their route, their claim, their provider call's
    # arguments, the callbacks their logging leaves out (their logging runs the recording
    # callbacks; what the router's and the limiter's would count is counted above, as for the
    # others, but the tokens of an answer whose usage the batch does not have: the limiter
    # counts those in its logging, as in its replay), and for a stream whose client waits for
    # the end the proxy writes (its usage chunk), its ticket.
    logged: list[tuple[str, Any, dict[str, Any], frozenset[int], str | None]] = dataclasses.field(
        default_factory=list
    )


class Ledger:
    """Decides, per served request, whether it needs its replay, and accounts for the others
    (`take`, then `settle` once per batch)."""

    def __init__(self) -> None:
        self._worker: tuple[tuple[int, ...], _Worker] | None = None
        self._worker_why: str | None = "proxy"
        # Whether a callback records requests (LiteLLM's logging then runs for each request).
        self._logs = False
        # The callbacks whose work for a served request the batch does (by id): a logged
        # request's logging leaves them out; and of them the limiter's (the logging of an
        # answer whose usage the batch lacks runs it).
        self._counted: frozenset[int] = frozenset()
        self._limiters: frozenset[int] = frozenset()
        # Of them the router's success callback (it runs in a usage-counted group's stream's
        # logging: `usage`).
        self._router_success: frozenset[int] = frozenset()
        # Usage-based routing's callback (it runs in a stream's logging: its tokens).
        self._routing: frozenset[int] = frozenset()
        self._batch = _Batch()
        # The provider-call arguments of the request `replay_reason` last found loggable, and
        # whether it was sent with the master key.
        self._arguments: dict[str, Any] | None = None
        self._master = True
        # Whether the batch counts its answer's tokens on the limiter's counters (else the
        # limiter counts them in its logging: a stream's, a `/v1/messages` answer's, and a
        # rate-limited key's, whose reservation its logging reconciles).
        self._usage_known = True
        self._rate_limited = False
        self._shape: shapes.Shape | None = None

    def begin(self) -> None:
        """Looks at the worker once for the batch about to be taken (its callbacks, database,
        cache and router)."""
        try:
            worker = self._worker_reason()
            (
                self._worker_why,
                self._logs,
                self._counted,
                self._limiters,
                self._router_success,
                self._routing,
            ) = worker
        except Exception as err:  # a LiteLLM change: the replays do it all
            self._worker_why = f"error:{type(err).__name__}"

    def replay_reason(self, record: Any, claimed: Any) -> str | None:
        """Why this served request needs its replay; None when `take` accounts for it."""
        path, headers = record.path, record.headers
        self._arguments = self._shape = None
        if self._worker_why is not None:
            return self._worker_why
        streamed = isinstance(claimed.call, _native.PreparedStream)
        if streamed and claimed.stream_failed:
            # Its error frame, failure logging and the router's failure callbacks (cooldowns)
            # are the proxy's.
            return "stream_failed"
        self._usage_known = claimed.usage is not None
        if not self._usage_known and not streamed and path != MESSAGES_PATH:
            return "usage"
        self._rate_limited = claimed.rate_limited
        if self._rate_limited and not limits.hooked():
            # The key's rate limits: its replay's limiter counts it in the worker's windows, or
            # records what the lane counted in Redis.
            return "hold"
        self._master = _is_master_key(headers)
        if not self._master and not self._logs:
            return "key"
        deployment = self._deployment(claimed.deployment_id)
        if isinstance(deployment, str):
            return deployment
        if not self._logs and self._usage_known and not self._rate_limited:
            return None
        found = shapes.shape_of(path, claimed.deployment_id, headers, record.body)
        self._shape = None if found is None else found[0]
        template = None if found is None else _shapes.template(found[0])
        call_id = next((value for name, value in headers if name == CALL_ID_HEADER), None)
        if found is None or template is None or call_id is None:
            return "shape"
        if self._master and template.key_state_drawn:
            return "shape"  # only a virtual key's spend is written anew per request
        self._arguments = template.arguments(found[1], call_id, len(record.body))
        return None

    def learner(self, record: Any, claimed: Any) -> Callable[[dict[str, Any]], None] | None:
        """For a request replayed for its shape (`replay_reason`): what learns the shape from
        its replay's provider call, if it is still being learnt."""
        found = shapes.shape_of(record.path, claimed.deployment_id, record.headers, record.body)
        if found is None or not _shapes.learning(found[0]):
            return None
        shape, messages = found
        return functools.partial(_shapes.learn, shape, messages)

    def needs_key(self) -> bool:
        """Whether the request `replay_reason` found accountable was sent with a virtual key,
        whose auth object (as the replay's auth would build it now) `take` must be given."""
        return not self._master

    def shape(self) -> shapes.Shape | None:
        """The shape of the request `replay_reason` found accountable (its key among its
        headers)."""
        return self._shape

    def take(self, record: Any, claimed: Any, key: Any = None) -> None:
        """Adds a request `replay_reason` found accountable to the batch (`key`: its virtual
        key's auth object, see `needs_key`)."""
        global accounted, tokens_counted
        deployment = self._deployment(claimed.deployment_id)
        assert not isinstance(deployment, str)
        group, model = deployment
        # The router counts a stream's tokens at its end, in its success callback (its request
        # as it opened: `_after_router`); for a group whose usage it counts, that callback runs
        # in the stream's logging, with the deployment's success count it makes.
        router_counts = usage.tracked(group) and isinstance(claimed.call, _native.PreparedStream)
        self._batch.served.append((record.path, claimed.deployment_id, model, router_counts))
        accounted += 1
        caller: str | None = None if key is None else key.api_key
        if caller is not None and caller not in self._batch.callers:
            self._batch.callers[caller] = dict(
                compat.LiteLLMProxyRequestSetup.get_sanitized_user_information_from_key(key)
            )
        if self._arguments is None and usage.tracked(group):
            # The router's count of the answer per minute (its logging, if any, counts it).
            counter = (claimed.deployment_id, group, model)
            requests, tokens = self._batch.usage.get(counter, (0, 0))
            total = _usage(claimed.usage).total_tokens if claimed.usage else 0
            self._batch.usage[counter] = (requests + 1, tokens + total)
        # Usage-based routing's counts: the request (counted before its call), and the answer's
        # tokens where its usage is known (else its logging counts them, as LiteLLM's does).
        routing_counts = False
        if usage.routed(claimed.deployment_id):
            streamed = isinstance(claimed.call, _native.PreparedStream)
            known = claimed.usage is not None and not streamed
            routing_counts = not known and self._arguments is not None
            total = _usage(claimed.usage).total_tokens if known else 0
            self._batch.routing.setdefault(claimed.deployment_id, RoutingCounts()).add(
                total, messages=record.path == MESSAGES_PATH
            )
        counts_tokens = self._usage_known and not self._rate_limited
        if counts_tokens:
            counted = (group, claimed.usage, caller)
            self._batch.tokens[counted] = self._batch.tokens.get(counted, 0) + 1
            tokens_counted += 1
        if self._arguments is not None:
            if key is not None:
                # The key's part of the metadata as the replay's auth would write it now (the
                # shape's is as of the replay it was learnt from: its spend then, and its budget
                # reservation, reconciled already; this request's own is on `key`, or none).
                metadata_name = _metadata_name(record.path)
                self._arguments[metadata_name].pop(shapes.RESERVATION, None)
                compat.LiteLLMProxyRequestSetup.add_user_api_key_auth_to_request_metadata(
                    data=self._arguments,
                    user_api_key_dict=key,
                    _metadata_variable_name=metadata_name,
                )
            left_out = self._counted if counts_tokens else self._counted - self._limiters
            if router_counts:
                left_out -= self._router_success
            if routing_counts:
                left_out -= self._routing
            waiting = record.ticket if claimed.awaits_tail else None
            self._batch.logged.append((record.path, claimed, self._arguments, left_out, waiting))

    async def settle(self) -> None:
        """Makes the batch's effects, as the replays would have made them."""
        batch, self._batch = self._batch, _Batch()
        if not batch.served:
            return
        try:
            router = compat.proxy_server().llm_router
            for path, deployment_id, model, router_counts in batch.served:
                middleware.count_served(path, deployment_id)
                if path != MESSAGES_PATH:
                    # Chat's pick counts the deployment's requests this minute (the router's
                    # generic calls, `/v1/messages`, do not).
                    router._update_usage(deployment_id, None)
                router.total_calls[model] += 1
                router.success_calls[model] += 1
                if not router_counts:
                    # The router's success callback.
                    compat.increment_deployment_successes_for_current_minute(
                        litellm_router_instance=router, deployment_id=deployment_id
                    )
            await _count_tokens(batch.tokens, batch.callers)
            await usage.count_batch(router, batch.usage)
            if batch.routing:
                await usage.count_routing(router, batch.routing)
        except Exception as err:  # never the client's problem; LiteLLM's counters lag
            logger.warning("fastpath_lane: accounting a batch failed: %s", type(err).__name__)
        if batch.logged:
            await asyncio.gather(*(_logged(*logged) for logged in batch.logged))

    def _worker_reason(self) -> _Worker:
        """Why no request of this worker can skip its replay now (None: some can), and whether a
        callback records requests; worked out again whenever its callbacks, database, cache or
        router change."""
        proxy = compat.proxy_server()
        lists = compat.callback_lists()
        # Looked at once per batch: built with C-level iteration.
        fingerprint = (
            *map(id, itertools.chain.from_iterable(lists)),
            *map(len, lists),
            id(proxy.prisma_client),
            id(litellm.cache),
            id(proxy.llm_router),
            *map(logging.Logger.getEffectiveLevel, _litellm_loggers()),
        )
        if self._worker is None or self._worker[0] != fingerprint:
            self._worker = (fingerprint, _worker_reason(proxy, lists))
            forget_deployments()
        return self._worker[1]

    def _deployment(self, deployment_id: str) -> tuple[str, str] | str:
        """The deployment's (model group, model) where its usage is LiteLLM's plain count, or why
        its replay is needed."""
        found = _deployments.get(deployment_id)
        if found is None:
            router = compat.proxy_server().llm_router
            found = _deployments[deployment_id] = _deployment(router, deployment_id)
        return found


# By deployment id: its (model group, model), or why its requests are replayed; forgotten
# whenever the router's deployments change (`groups.keep_current`) or the worker's callbacks do.
_deployments: dict[str, tuple[str, str] | str] = {}


# The request shapes whose logging runs here, learnt from their replays; forgotten with the
# deployments (a request's arguments carry its deployment's).
_shapes = shapes.Shapes()


def forget_deployments() -> None:
    _deployments.clear()
    _shapes.forget()
    _token_counters.clear()


class _Worker(NamedTuple):
    """What the worker's setup allows: why no request may skip its replay (None: some may),
    whether a callback records requests, and the callbacks whose work for a served request the
    batch does (by id)."""

    why: str | None
    logs: bool = False
    counted: frozenset[int] = frozenset()
    limiters: frozenset[int] = frozenset()
    router_success: frozenset[int] = frozenset()
    routing: frozenset[int] = frozenset()


def _worker_reason(proxy: Any, lists: tuple[list[Any], ...]) -> _Worker:
    if litellm.cache is not None:
        return _Worker("cache")
    if proxy.llm_router is None or not isinstance(proxy.master_key, str):
        return _Worker("proxy")
    if litellm.service_callback:
        return _Worker("service_callback")
    if any(logging.getLogger(name).isEnabledFor(logging.INFO) for name in _LITELLM_LOGGERS):
        return _Worker("verbose_logs")
    inert = _inert_types()
    limiter = _limiter_type()
    logs, counted, limiters, router_success, routing = False, set(), set(), set(), set()
    for items in lists:
        for callback in items:
            if _leaves_nothing(callback, inert, proxy.llm_router):
                counted.add(id(callback))
                if type(callback) is limiter:
                    limiters.add(id(callback))
                if _is_router_success(callback, proxy.llm_router):
                    router_success.add(id(callback))
            elif _is_routing(callback, proxy.llm_router):
                # Usage-based routing's: the batch counts its requests, and their tokens but a
                # stream's (it runs in the stream's logging).
                counted.add(id(callback))
                routing.add(id(callback))
            elif _only_logs(callback):
                logs = True
            else:
                return _Worker(f"callback:{_name(callback)}")
    return _Worker(
        None,
        logs,
        frozenset(counted),
        frozenset(limiters),
        frozenset(router_success),
        frozenset(routing),
    )


def _class(module: str, name: str) -> type | None:
    """A LiteLLM class as installed (None: not in this release, never matched)."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


@functools.cache
def _limiter_type() -> type | None:
    return _class(*_LIMITER)


@functools.cache
def _inert_types() -> frozenset[type]:
    """The classes of `_INERT` and the limiter's (accounted for here), as installed."""
    found = (_class(module, name) for module, name in (*_INERT, _LIMITER))
    return frozenset(klass for klass in found if klass is not None)


def _leaves_nothing(callback: Any, inert: frozenset[type], router: Any) -> bool:
    if type(callback) in inert or type(callback).__module__ == _ACCELERATOR_MODULE:
        return True
    owner = getattr(callback, "__self__", None)
    if owner is router and getattr(callback, "__name__", None) in _ROUTER_CALLBACKS:
        return True
    return (
        isinstance(callback, compat.CustomLogger)
        and overridden_methods(callback) <= _NOT_ON_SUCCESS
    )


def _is_routing(callback: Any, router: Any) -> bool:
    """Usage-based routing's own callback, the router's (its pick reads what it counts)."""
    return usage.routes_by_usage(router) and callback is router.lowesttpm_logger_v2


def _is_router_success(callback: Any, router: Any) -> bool:
    return (
        getattr(callback, "__self__", None) is router
        and getattr(callback, "__name__", None) == "deployment_callback_on_success"
    )


def _only_logs(callback: Any) -> bool:
    """A CustomLogger that replaces only the methods LiteLLM's logging calls around a provider
    call (which runs for a served request whose logging runs here), besides those never called
    for a served answer."""
    return isinstance(callback, compat.CustomLogger) and overridden_methods(callback) <= (
        LOGGING_EVENTS | _NOT_ON_SUCCESS
    )


def overridden_methods(callback: Any) -> set[str]:
    """CustomLogger's per-request methods a callback object replaces (on its class, a base
    between, or itself)."""
    base = compat.CustomLogger
    names = _hook_names(base)
    found = set(names & set(getattr(callback, "__dict__", {})))
    for klass in type(callback).__mro__:
        if klass is not base and klass is not object:
            found |= names & set(vars(klass))
    return found


@functools.cache
def _hook_names(base: type) -> frozenset[str]:
    """CustomLogger's methods a proxy may call per request."""
    return frozenset(
        name
        for name, value in vars(base).items()
        if not name.startswith("__")
        and name not in _NOT_PER_REQUEST
        and (callable(value) or isinstance(value, (staticmethod, classmethod)))
    )


def _name(callback: Any) -> str:
    if isinstance(callback, str):
        return callback
    return getattr(callback, "__qualname__", None) or type(callback).__qualname__


def _deployment(router: Any, deployment_id: str) -> tuple[str, str] | str:
    """(model group, model) of a deployment whose usage the router counts in the plain way, or
    per minute for a group the lane serves with its usage headers (`usage`), or why its
    requests need their replay (as `Router._increment_deployment_usage` and the limiter's
    default per-key limits for a group decide)."""
    deployment = router.get_deployment(model_id=deployment_id)
    if deployment is None:
        return "deployment"
    group = deployment.model_name
    info = router.get_router_model_info(deployment=deployment, received_model_name=group)
    limits = (
        deployment.get("tpm", None),
        deployment.get("rpm", None),
        deployment.litellm_params.tpm,
        deployment.litellm_params.rpm,
        info.get("tpm", None),
        info.get("rpm", None),
    )
    if compat.deployment_has_io_token_limits(deployment.model_dump()):
        return "deployment_usage"
    if any(limit is not None for limit in limits) and not usage.tracked(group):
        return "deployment_usage"
    if (
        compat.deployment_default_rpm_limit(group) is not None
        or compat.deployment_default_tpm_limit(group) is not None
    ):
        return "deployment_limits"
    return group, deployment.litellm_params.model


async def _logged(
    path: str,
    claimed: Any,
    arguments: dict[str, Any],
    counted: frozenset[int],
    waiting: str | None,
) -> None:
    """LiteLLM's logging of a served request, run as its replay's provider call runs it (the
    accelerator's, given the lane's outcome): its callbacks are given what they would be, but
    those in `counted`, whose work the batch does (the router's, the limiter's). `waiting`: the
    ticket of a stream whose client waits for the end of the proxy's reading of it (its usage
    chunk), sent to the lane whatever happens (empty: the lane ends the stream itself)."""
    tail: list[bytes] = []
    try:
        await _log(path, claimed, arguments, counted, tail if waiting else None)
    finally:
        if waiting is not None:
            _native.lane_stream_tail(waiting, b"".join(tail))


async def _log(
    path: str,
    claimed: Any,
    arguments: dict[str, Any],
    counted: frozenset[int],
    tail: list[bytes] | None,
) -> None:
    claims.hold(claimed)  # in this task's own context
    if claimed.rate_limited:
        try:
            await _count_in_limiter(path, arguments)
        except Exception as err:  # the hold goes; the logging still runs, as in a replay
            logger.warning("fastpath_lane: the limiter's count failed: %s", type(err).__name__)
        finally:
            if claimed.hold is not None:
                _native.lane_release_hold(claimed.hold)  # released already, but on a failure
    logging_obj = arguments["litellm_logging_obj"]
    streamed = isinstance(claimed.call, _native.PreparedStream)
    if not streamed:
        # As the proxy defers an answer's past its post-call steps, which the logging reads (a
        # stream's runs once the proxy read it to its end).
        logging_obj.defer_async_logging = True
    should_run = logging_obj.should_run_callback

    def should_run_callback(callback: Any, litellm_params: dict, event_hook: str) -> bool:
        if id(callback) not in counted:
            return bool(should_run(callback, litellm_params, event_hook))
        if callable(callback) and not isinstance(callback, compat.CustomLogger):
            # What LiteLLM's logging writes before it calls a function callback (the router's),
            # which the callbacks after it read (`CustomLogger.async_log_event`).
            logging_obj.model_call_details["log_event_type"] = "post_api_call"
        return False

    logging_obj.should_run_callback = should_run_callback
    call = litellm.anthropic_messages if path == MESSAGES_PATH else litellm.acompletion
    try:
        response = await _after_router(await call(**arguments), arguments, path)
        if streamed:
            await _read_stream(response, arguments, path, tail)
        else:
            await _after_call(response, arguments, path, logging_obj)
    except Exception as err:  # the client has its answer; the logging's own failure
        global logging_failed
        logging_failed += 1
        logger.warning("fastpath_lane: logging a served request failed: %s", type(err).__name__)
        return
    if logging_obj.enqueue_deferred_logging is not None:
        logging_obj.enqueue_deferred_logging()


async def _count_in_limiter(path: str, arguments: dict[str, Any]) -> None:
    """The rate limiter's pre-call hook for a rate-limited key's request, given what the proxy
    gives it (the request as received, its metadata and call id): see `limits.count_batched`.
    Its stash, in this task's context, is the one its logging's callbacks then read."""
    metadata_name = _metadata_name(path)
    metadata = arguments[metadata_name]
    data = {
        **_client_body(arguments),
        metadata_name: metadata,
        "litellm_call_id": arguments["litellm_call_id"],
    }
    call_type = "anthropic_messages" if path == MESSAGES_PATH else "acompletion"
    await limits.count_batched(metadata["user_api_key_auth"], data, call_type)


async def _after_router(response: Any, arguments: dict[str, Any], path: str) -> Any:
    """What the router does to an answer or a stream before the proxy has it (LiteLLM's own
    steps, in their order): its usage count, its response headers, its retry and fallback
    headers."""
    router = compat.proxy_server().llm_router
    group = _metadata(arguments, path).get("model_group")
    request = {**arguments, "model": group}
    if usage.tracked(group):
        # The router's count of the answer per minute (`lane.usage` moves it from the lane's).
        await router.increment_deployment_usage_for_response(
            response=response, request_kwargs=request
        )
    else:
        # `increment_deployment_usage_for_response`: for a deployment without tpm, rpm or token
        # limits the router counts nothing; what remains is its mark of the tokens (none yet for
        # a stream).
        found = compat.find_deployment_metadata(request)
        if found is not None:
            tokens = compat.response_total_token_count(response)
            found[compat.ROUTER_USAGE_COUNTED_TOKENS_METADATA_KEY] = tokens
    response = await router.set_response_headers(
        response=response, model_group=group, request_kwargs=request
    )
    response = compat.add_retry_headers_to_response(
        response=response, attempted_retries=0, max_retries=None
    )
    return compat.add_fallback_headers_to_response(response=response, attempted_fallbacks=0)


async def _read_stream(
    stream: Any, arguments: dict[str, Any], path: str, tail: list[bytes] | None
) -> None:
    """The proxy's reading of a stream for its client (its stream hooks, its chunks' model,
    then the stream's logging), the frames it writes dropped: the client had the lane's, but
    where it waits for the proxy's end (`tail`): the frames past the first chunk's, as its
    replay's endpoint writes them."""
    key = _metadata(arguments, path).get("user_api_key_auth")
    model = _client_body(arguments).get("model")
    request_data = {**arguments, "model": model, "_litellm_client_requested_model": model}
    if path == MESSAGES_PATH:
        processing = compat.ProxyBaseLLMRequestProcessing
        frames = processing.async_sse_data_generator(
            response=stream,
            user_api_key_dict=key,
            request_data=request_data,
            proxy_logging_obj=compat.proxy_server().proxy_logging_obj,
            restamp_model=None if compat.should_return_raw_model_name(request_data) else model,
        )
    else:
        frames = compat.proxy_stream_frames(
            response=stream, user_api_key_dict=key, request_data=request_data
        )
    first = True
    async for frame in frames:
        if tail is not None and not first:
            tail.append(frame.encode() if isinstance(frame, str) else bytes(frame))
        first = False


async def _after_call(
    response: Any, arguments: dict[str, Any], path: str, logging_obj: Any
) -> None:
    """What the proxy does to an answer before its logging reads it (LiteLLM's own steps, in
    their order): its post-call hooks, its answer's model, the texts it served."""
    metadata = _metadata(arguments, path)
    body = _client_body(arguments)
    response = await compat.proxy_server().proxy_logging_obj.post_call_success_hook(
        data=body, user_api_key_dict=metadata.get("user_api_key_auth"), response=response
    )
    compat.override_openai_response_model(
        response_obj=response, requested_model=body.get("model"), log_context="fastpath_lane"
    )
    compat.record_served_output_texts(
        logging_obj.model_call_details, compat.served_output_texts(response)
    )


def _client_body(arguments: dict[str, Any]) -> dict[str, Any]:
    """The request's body as the proxy received it (in the call's `proxy_server_request`)."""
    return (arguments.get("proxy_server_request") or {}).get("body") or {}


def _metadata_name(path: str) -> str:
    """Where the router keeps a call's metadata (`litellm_metadata` for `/v1/messages`)."""
    return "litellm_metadata" if path == MESSAGES_PATH else "metadata"


def _metadata(arguments: dict[str, Any], path: str) -> dict[str, Any]:
    return arguments.get(_metadata_name(path)) or {}


def _is_master_key(headers: list[tuple[str, str]]) -> bool:
    master = compat.proxy_server().master_key
    presented = [value for name, value in headers if name == "authorization"]
    return (
        isinstance(master, str)
        and len(presented) == 1
        and secrets.compare_digest(presented[0].encode(), f"Bearer {master}".encode())
    )


async def _count_tokens(
    tokens: dict[tuple[str, str, str | None], int], callers: dict[str, dict[str, Any]]
) -> None:
    """The limiter's success callback for each answer: its tokens on its key's counters
    (LiteLLM's own op builder, from the metadata its logging would carry), summed per counter
    into one pipeline."""
    proxy = compat.proxy_server()
    limiter = proxy.proxy_logging_obj.get_proxy_hook("parallel_request_limiter")
    if type(limiter) not in _inert_types():
        return
    master = await _master_key_metadata()
    rate_limit_type = limiter.get_rate_limit_type()
    summed: dict[str, Any] = {}
    for (group, usage_json, caller), count in tokens.items():
        metadata = master if caller is None else callers[caller]
        usage = _usage(usage_json)
        # As the op builder counts an answer's tokens.
        answer_tokens = limiter._get_total_tokens_from_usage(
            usage=usage, rate_limit_type=rate_limit_type
        ) or limiter._aggregate_only_total_tokens(usage=usage)
        counted = (group, rate_limit_type)
        # A virtual key's ops are built each batch (its user or team may have changed).
        counters = _token_counters.get(counted) if caller is None else None
        if counters is None or answer_tokens <= 0:
            kwargs = {
                "litellm_params": {"metadata": {"model_group": group}},
                "standard_logging_object": {"metadata": metadata},
                "combined_usage_object": usage,
            }
            ops = limiter._build_success_event_pipeline_operations(
                kwargs=kwargs, response_obj=None, rate_limit_type=rate_limit_type
            )
            if (
                caller is None
                and answer_tokens > 0
                and all(op["increment_value"] == answer_tokens for op in ops)
            ):
                _token_counters[counted] = ops
        else:
            ops = [{**op, "increment_value": answer_tokens} for op in counters]
        for op in ops:
            total = summed.get(op["key"])
            if total is None:
                summed[op["key"]] = {**op, "increment_value": op["increment_value"] * count}
            else:
                total["increment_value"] += op["increment_value"] * count
    await limiter.async_increment_tokens_with_ttl_preservation(
        pipeline_operations=list(summed.values()), parent_otel_span=None
    )


# By (model group, the limiter's rate limit type): the counters the limiter adds the master key's
# answer's tokens to, where it adds each the answer's count (the op builder's answer for one
# answer, checked so); forgotten with the deployments.
_token_counters: dict[tuple[str, str], list[Any]] = {}


@functools.lru_cache(maxsize=1024)
def _usage(usage_json: str) -> Any:
    """An answer's usage as LiteLLM's logging carries it (the op builder only reads it)."""
    return litellm.Usage(**json.loads(usage_json))


# What LiteLLM's logging carries of the master key, by the proxy admin's name it is built with.
_master_metadata: dict[str, dict[str, Any]] = {}


async def _master_key_metadata() -> dict[str, Any]:
    """The master key's auth object as LiteLLM's auth builds it, as its logging carries it."""
    admin = compat.proxy_server().litellm_proxy_admin_name
    found = _master_metadata.get(admin)
    if found is None:
        key = await compat.return_user_api_key_auth_obj(
            user_obj=None,
            user_role=compat.LitellmUserRoles.PROXY_ADMIN,
            api_key=compat.LITELLM_PROXY_MASTER_KEY_ALIAS,
            parent_otel_span=None,
            valid_token_dict={"user_id": admin},
            route="/chat/completions",
            start_time=compat.now(),
        )
        found = dict(compat.LiteLLMProxyRequestSetup.get_sanitized_user_information_from_key(key))
        _master_metadata[admin] = found
    return found


def counts() -> Iterable[tuple[str, int]]:
    """`accounted` (`tokens_counted` of them), `logging_failed` and `replay_needed:<why>`, for
    the lane's counts."""
    yield "accounted", accounted
    yield "tokens_counted", tokens_counted
    if logging_failed:
        yield "logging_failed", logging_failed
    for why, n in replay_needed.items():
        yield f"replay_needed:{why}", n
