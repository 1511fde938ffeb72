"""The replay: each request the lane served runs through the proxy's own endpoint in-process
once the client has its answer (auth, hooks, router, logging, cost and spend), holding the
lane's outcome of its provider call (a ticket) so that the provider is not called again.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import litellm

from litellm_fastpath import _native, claims, compat
from litellm_fastpath.bridge import settle
from litellm_fastpath.lane import accounting, limits, middleware, reauth

logger = logging.getLogger("litellm_fastpath")

# Not `x-litellm-*`: the proxy leaves those out of the headers its hooks see.
TICKET_HEADER = "x-fastpath-lane-ticket"
MESSAGES_PATH = "/v1/messages"
CALL_ID_HEADER = "x-litellm-call-id"
# Where LiteLLM's proxy resolves a request's call id (`resolve_litellm_call_id`).
_CALL_ID_MODULE = "litellm.proxy.common_request_processing"
# The call id the lane chose for the replayed request (the client sent none).
_lane_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "litellm_fastpath_lane_call_id", default=None
)
# Replays running at once: they run the proxy's per-request Python, one at a time on its loop
# anyway; a few in flight overlap their awaits.
REPLAY_CONCURRENCY = 8
# LiteLLM's success logging runs after a replay (or a batch's logging) in its logging worker,
# queued. Past this many queued, the next batch waits: the served requests then wait in the
# lane's backlog, which bounds them (`lane_backlog`) and which the drain at shutdown waits for,
# instead of in LiteLLM's queue, which its shutdown gives only seconds. Measured without it: at
# 1,000 req/s with a recording callback the lane outran the worker's logging, and a quarter of
# the events were never logged (lost at shutdown).
LOGGING_QUEUE_BOUND = 256
LOGGING_QUEUE_POLL_S = 0.005


async def replay_served(
    judged: Callable[[str], bool], rejudged: Callable[[Any, int], Awaitable[None]]
) -> None:
    """Takes the lane's served requests in batches and runs each through the proxy's own
    endpoint in-process (auth, hooks, router, logging, cost and spend), with its ticket, or
    accounts for it in the batch (`accounting`). `judged(key_hash)`: whether this worker holds
    the key's verdict (its replays then skip LiteLLM's checks, see `reauth`); `rejudged(key,
    hold)`: hands a key's verdict to the lane again once a request's budget reservation is in
    LiteLLM's counters, releasing the lane's hold (`keys`)."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(REPLAY_CONCURRENCY)
    running: set[asyncio.Task[None]] = set()
    ledger = accounting.Ledger()
    while True:
        while compat.logging_queue_length() > LOGGING_QUEUE_BOUND:
            await asyncio.sleep(LOGGING_QUEUE_POLL_S)
        future: asyncio.Future[list[_native.LaneReplay]] = loop.create_future()
        _native.lane_next_replays(loop, future, settle)
        taken = 0
        records = await future
        ledger.begin()
        # By request shape (its key among its headers): the auth object a virtual key's requests
        # in this batch are logged with, built once (their spend as of the batch).
        batch_keys: dict[Any, Any] = {}
        # The batch's requests holding their key's budget: each with its own reservation.
        reserved: list[Any] = []
        for record in records:
            claimed = _native.lane_claim(record.ticket)
            learner = None
            if claimed is not None:
                why = _replay_reason(ledger, record, claimed)
                key = None
                if why is None and ledger.needs_key():
                    if claimed.hold is not None:
                        key = await _held_key(record, claimed, judged, rejudged, reserved)
                    else:
                        shape = ledger.shape()
                        if shape not in batch_keys:
                            request = _batch_request(record, claimed)
                            batch_keys[shape] = await _batch_key(request, judged)
                        key = batch_keys[shape]
                    if key is None:
                        why = "key_auth"
                        accounting.replay_needed[why] += 1
                if why is None:
                    ledger.take(record, claimed, key)
                    taken += 1
                    continue
                if why == "shape":
                    learner = ledger.learner(record, claimed)
            await slots.acquire()
            task = loop.create_task(_replay(record, judged, claimed, learner))
            running.add(task)
            task.add_done_callback(running.discard)
            task.add_done_callback(lambda _: slots.release())
        await ledger.settle()
        for request in reserved:
            await _release_unbound_reservation(request)
        for _ in range(taken):
            _native.lane_replayed()


async def _batch_key(request: Any, judged: Callable[[str], bool]) -> Any | None:
    """The auth object a virtual key's replay would get (`reauth`, LiteLLM's own builders on
    its cached key, user and team: their spend as of now), for its logging in the batch; None
    where its replay must authenticate."""
    try:
        return await reauth.authenticate(request, judged)
    except Exception as err:  # a LiteLLM change, or its budget refused: the replay decides
        logger.debug("fastpath_lane: a batch key failed: %s", type(err).__name__)
        return None


async def _held_key(
    record: _native.LaneReplay,
    claimed: _native.LaneClaim,
    judged: Callable[[str], bool],
    rejudged: Callable[[Any, int], Awaitable[None]],
    reserved: list[Any],
) -> Any | None:
    """For a request holding its key's budget or rpm windows: its own auth object, with the
    reservation its replay's auth would make (added to `reserved`, whose unclaimed reservations
    are released once the batch is logged, as the proxy releases them once it answered); the
    key's verdict handed to the lane again, releasing the lane's hold (for a rate-limited key,
    once its logging's limiter counted it). None where its replay must
    authenticate (a budget LiteLLM's counters refuse now among them: the replay bills it)."""
    assert claimed.hold is not None
    request = _batch_request(record, claimed)
    key = await _batch_key(request, judged)
    if key is None:
        await _release_unbound_reservation(request)  # one made before a later step failed
        return None
    reserved.append(request)
    if claimed.rate_limited:
        # Its hold is on the key's rpm windows too: the limiter's hook, run in its logging,
        # counts it there, then hands the verdict over, releasing it (as in its replay).
        return key
    try:
        await rejudged(key, claimed.hold)  # releases the hold, whatever it raises
    except Exception as err:  # the verdict is worked out again on the key's next replay
        logger.debug("fastpath_lane: a held key's verdict failed: %s", type(err).__name__)
    return key


def _batch_request(record: _native.LaneReplay, claimed: _native.LaneClaim) -> Any:
    """The request as the replay's auth would read it (the client's headers)."""
    headers, _ = _client_headers(record.headers, claimed)
    return asgi_request(record.path, headers, record.body, record.client, record.server)


def _replay_reason(
    ledger: accounting.Ledger, record: _native.LaneReplay, claimed: _native.LaneClaim
) -> str | None:
    """Why this request is replayed (counted); None where the ledger accounts for it."""
    try:
        why = ledger.replay_reason(record, claimed)
    except Exception as err:  # a LiteLLM change: the replay does it all
        why = f"error:{type(err).__name__}"
    if why is not None:
        accounting.replay_needed[why] += 1
    return why


async def _replay(
    record: _native.LaneReplay,
    judged: Callable[[str], bool],
    claimed: _native.LaneClaim | None,
    learner: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """`learner`: given the replay's provider-call arguments (see `accounting.Ledger.learner`)."""
    ticket = record.ticket
    tail: list[bytes] = []
    request = None
    try:
        if claimed is None:
            return
        claims.hold(claimed)
        if learner is not None:
            claims.learn_from(learner)
        middleware.count_served(record.path, claimed.deployment_id)
        headers, call_id = _client_headers(record.headers, claimed)
        _lane_call_id.set(call_id)
        request = asgi_request(record.path, headers, record.body, record.client, record.server)
        try:
            key = await _authenticate(request, judged)
        except Exception as err:
            if claimed.hold is None or not _refused_for_budget(err):
                raise
            # The lane admitted it on the key's headroom, but LiteLLM's counters moved
            # meanwhile (another worker or instance spent them): the provider answered, so
            # it is billed, as LiteLLM bills a request it admitted, without a second check.
            claims.set_admitted()
            request = asgi_request(record.path, headers, record.body, record.client, record.server)
            key = await _authenticate(request, judged)
        try:
            answer = await _endpoint(record.path, request, key)
        except Exception as err:
            if claimed.hold is None or not limits.refused(err):
                raise
            # The lane admitted it on the windows' counts, and the limiter refused it meanwhile
            # (other requests counted on a shared window first): the provider answered, so it
            # is logged and billed, counted once (by the refusal) and not refused again.
            await _release_unbound_reservation(request)
            claims.set_rate_counted()
            request = asgi_request(record.path, headers, record.body, record.client, record.server)
            key = await _authenticate(request, judged)
            answer = await _endpoint(record.path, request, key)
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
        if request is not None:
            await _release_unbound_reservation(request)
        if claimed is not None and claimed.hold is not None:
            # Released already once LiteLLM reserved; else the replay ended before that.
            _native.lane_release_hold(claimed.hold)
        _native.lane_stream_tail(ticket, b"".join(tail))
        _native.lane_replayed()


def _client_headers(
    headers: list[tuple[str, str]], claimed: _native.LaneClaim
) -> tuple[list[tuple[str, str]], str | None]:
    """The client's headers, and the call id the lane chose where the client sent none: LiteLLM
    takes that from the replay's context (`install_call_ids`), not from a header the client did
    not send, which LiteLLM would record as the client's."""
    if not claimed.call_id_added:
        return headers, None
    chosen = [value for name, value in headers if name == CALL_ID_HEADER]
    kept = [(name, value) for name, value in headers if name != CALL_ID_HEADER]
    return kept, chosen[0] if chosen else None


async def _endpoint(path: str, request: Any, key: Any) -> Any:
    """The proxy's own endpoint for the replayed route."""
    from starlette.responses import Response

    if path == MESSAGES_PATH:
        return await compat.proxy_anthropic_response(
            fastapi_response=Response(), request=request, user_api_key_dict=key
        )
    return await compat.proxy_chat_completion(
        request=request, fastapi_response=Response(), model=None, user_api_key_dict=key
    )


async def _release_unbound_reservation(request: Any) -> None:
    """What LiteLLM's `BudgetReservationReleaseMiddleware` does once a response is sent (the
    replay runs below it): a budget reservation auth made that no cost callback claimed is
    released, not left pinning the counter until its TTL."""
    reservation = (request.scope.get("state") or {}).get("budget_reservation")
    if isinstance(reservation, dict):
        try:
            await compat.release_unbound_budget_reservation(reservation)
        except Exception as err:  # LiteLLM's counter TTL releases it then
            logger.debug("fastpath_lane: releasing a reservation failed: %s", type(err).__name__)


async def _authenticate(request: Any, judged: Callable[[str], bool]) -> Any:
    """The replay's auth object: for a key the lane judged, LiteLLM's auth without its checks
    (`reauth`); else LiteLLM's auth."""
    key = await reauth.authenticate(request, judged)
    if key is not None:
        return key
    return await litellm_auth(request)


async def litellm_auth(request: Any) -> Any:
    """LiteLLM's own auth of a replayed request, as the proxy's endpoint runs it."""
    return await compat.user_api_key_auth(
        request=request,
        api_key=request.headers.get("authorization"),
        azure_api_key_header=None,
        # The lane takes `x-api-key` on `/v1/messages` only (as the key, sent alone).
        anthropic_api_key_header=request.headers.get("x-api-key"),
        google_ai_studio_api_key_header=None,
        azure_apim_header=None,
        custom_litellm_key_header=None,
    )


def _refused_for_budget(err: Exception) -> bool:
    """LiteLLM's auth refusing on a budget (a `ProxyException` of its `budget_exceeded` type)."""
    kind = getattr(err, "type", None)
    return getattr(kind, "value", kind) == "budget_exceeded" or isinstance(
        err, litellm.BudgetExceededError
    )


# The modules that name LiteLLM's zero-cost predicate, with which its auth skips every budget
# check (the key's, team's, user's and end user's, and the reservation) for a request.
_BUDGET_SKIP_MODULES = (
    "litellm.proxy.auth.auth_checks",
    "litellm.proxy.auth.user_api_key_auth",
    "litellm.proxy.auth.fallback_budget",
)


def install_call_ids() -> None:
    """A replay whose call id the lane chose goes by it: LiteLLM's proxy takes a request's call
    id from its `x-litellm-call-id` header, or draws one; for such a replay it is the lane's."""
    module = importlib.import_module(_CALL_ID_MODULE)
    original = module.resolve_litellm_call_id
    if getattr(original, "_litellm_fastpath", False):
        return

    @functools.wraps(original)
    def resolve_litellm_call_id(client_call_id: str | None) -> str:
        chosen = _lane_call_id.get()
        if client_call_id is None and chosen is not None:
            return chosen
        return str(original(client_call_id))

    resolve_litellm_call_id._litellm_fastpath = True  # type: ignore[attr-defined]
    setattr(module, "resolve_litellm_call_id", resolve_litellm_call_id)  # noqa: B010


def install_admitted_budget_skip() -> None:
    """A replay the lane admitted skips LiteLLM's budget checks and reservation when
    authenticated again (`claims.admitted`), as LiteLLM skips them for a zero-cost model; every
    other request is judged as before."""
    for name in _BUDGET_SKIP_MODULES:
        module = importlib.import_module(name)
        original = module.is_model_cost_zero
        if getattr(original, "_litellm_fastpath", False):
            continue
        setattr(module, "is_model_cost_zero", _skipping_when_admitted(original))  # noqa: B010


def _skipping_when_admitted(original: Any) -> Any:
    @functools.wraps(original)
    def is_model_cost_zero(*args: Any, **kwargs: Any) -> bool:
        return claims.admitted() or bool(original(*args, **kwargs))

    is_model_cost_zero._litellm_fastpath = True  # type: ignore[attr-defined]
    return is_model_cost_zero


def asgi_request(
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


def take_ticket(data: dict[str, Any]) -> None:
    """A replayed request: claim its ticket, force the router's pick to the lane's deployment,
    and keep the lane's own headers out of what LiteLLM records of the request."""
    request = data.get("proxy_server_request") or {}
    headers = request.get("headers") or {}
    ticket_id = headers.get(TICKET_HEADER)
    if not ticket_id:
        return
    claimed = _native.lane_claim(ticket_id)
    lane_headers = [TICKET_HEADER]
    if claimed is not None and claimed.call_id_added:
        lane_headers.append(CALL_ID_HEADER)  # LiteLLM took the call id from it already
    for recorded in _recorded_headers(data):
        for name in lane_headers:
            recorded.pop(name, None)
    if claimed is None:
        # Only the lane sends tickets (it strips them from clients' requests), and each is
        # claimed once: a replay that finds none must not reach the provider.
        raise RuntimeError("fast lane replay without its outcome; not calling the provider")
    claims.hold(claimed)


def _recorded_headers(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Where LiteLLM's pre-call steps recorded the client's headers (a request the lane hands
    to the proxy carries the lane's own): the request's, its metadata's, the copy of those it
    keeps as the requester's metadata, and its custom `x-` headers."""
    request = data.get("proxy_server_request") or {}
    yield from _dicts(request.get("headers"))
    for name in ("metadata", "litellm_metadata"):
        metadata = data.get(name)
        if isinstance(metadata, dict):
            yield from _dicts(metadata.get("headers"), metadata.get("requester_custom_headers"))
            requester = metadata.get("requester_metadata")
            if isinstance(requester, dict):
                yield from _dicts(requester.get("headers"))


def _dicts(*values: Any) -> Iterator[dict[str, Any]]:
    return (value for value in values if isinstance(value, dict))


def install_forced_pick(router: Any) -> None:
    """A replay's router picks the deployment the lane called (its own pick is random)."""
    if getattr(router, "_litellm_fastpath_forced_pick", False):
        return
    original = router.async_get_available_deployment

    async def pick(model: str, *args: Any, **kwargs: Any) -> Any:
        forced = claims.forced_deployment()
        if forced is not None:
            for deployment in router.model_list:
                if (deployment.get("model_info") or {}).get("id") == forced and deployment.get(
                    "model_name"
                ) == model:
                    return deployment
        return await original(model, *args, **kwargs)

    router.async_get_available_deployment = pick
    router._litellm_fastpath_forced_pick = True
