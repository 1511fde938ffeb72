"""What every fast-path call does around the provider call, as LiteLLM's `client` wrapper does
it: set up LiteLLM's logging object, make the call (or take the outcome the fast lane claimed for
a request it served), record the call's window for LiteLLM's overhead header, stamp the answer's
metadata, and report the success or failure through LiteLLM's logging."""

from __future__ import annotations

import asyncio
import datetime
import traceback
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from litellm_fastpath import _native, claims, compat, errors, metrics, routing
from litellm_fastpath.bridge import settle
from litellm_fastpath.declines import Decline, record_decline

RouteT = TypeVar("RouteT", bound=routing.Route)
PreparedT = TypeVar("PreparedT")


def admitted(
    decision: RouteT | Decline, prepare: Callable[[RouteT], PreparedT | _native.Declined]
) -> tuple[RouteT, PreparedT] | None:
    """A routing decision, then Rust's admission and transform of the call (`prepare`): the
    route and the prepared call, or None when either declines (counted and logged; LiteLLM's
    path serves the call). A call Rust finds malformed raises LiteLLM's 400 before any I/O."""
    if isinstance(decision, Decline):
        record_decline(decision)
        return None
    try:
        prepared = prepare(decision)
    except _native.InvalidRequestError as err:
        raise errors.bad_request(err, decision) from None
    if isinstance(prepared, _native.Declined):
        record_decline(prepared)
        return None
    return decision, prepared


def elapsed(start_time: datetime.datetime) -> float:
    return (datetime.datetime.now() - start_time).total_seconds()


def logging_obj(
    kwargs: dict[str, Any], call_type: str, start_time: datetime.datetime, required: bool = False
) -> Any:
    """LiteLLM's logging object for this call: the proxy's, or one built as LiteLLM's `client`
    wrapper builds it when callbacks exist (or the call needs one: LiteLLM's stream wrapper
    does). Without callbacks nobody reads it, so the SDK fast path builds none (None)."""
    found = kwargs.get("litellm_logging_obj")
    if found is None:
        if not required and not compat.callbacks_configured():
            return None
        # What LiteLLM's own wrapper does before building its logging object.
        kwargs.setdefault("litellm_call_id", str(uuid.uuid4()))
        found, _ = compat.function_setup(call_type, compat.Rules(), start_time, **kwargs)
        kwargs["litellm_logging_obj"] = found
    return found


def bind_reservation(logging_obj: Any) -> None:
    """As LiteLLM's async wrapper does before the call: the proxy's budget reservation for this
    request is settled by the cost callback (not released unspent when the request ends)."""
    if logging_obj is not None and not compat.is_internal_call.get():
        compat.bind_budget_reservation_to_callbacks(logging_obj.litellm_params)


def mark_dispatched(logging_obj: Any) -> None:
    """What LiteLLM's `pre_call` stamps as a request goes to the provider: when (and, once, when
    first). The proxy reads them: a failure after the handoff gets its input tokens estimated and
    its deployment named in its spend row; latency metrics start there."""
    if logging_obj is None:
        return
    details = logging_obj.model_call_details
    if compat.LITELLM_LOGGING_NO_UPSTREAM_LLM_CALL in details:
        return
    now = datetime.datetime.now()
    details["api_call_start_time"] = now
    if details.get("first_api_call_start_time") is None:
        details["first_api_call_start_time"] = now


def record_api_window(logging_obj: Any, start_time: datetime.datetime) -> None:
    """The provider call's duration, from which LiteLLM derives `x-litellm-overhead-duration-ms`.

    Admission and the Rust transform take microseconds, so the call's window starts at
    `start_time`."""
    if logging_obj is not None:
        compat.set_duration_in_model_call_details(logging_obj, start_time, datetime.datetime.now())


async def start(
    prepared: _native.PreparedCall | _native.PreparedStream,
    route: routing.Route,
    kwargs: Mapping[str, Any],
    logging_obj: Any,
    start_time: datetime.datetime,
) -> tuple[Any, Any]:
    """Starts the provider call on the Rust runtime and awaits its first result: its handle,
    and a call's answer (its body and the provider's headers) or a stream's headers (once the
    provider answered 2xx: an error status raises here, before any chunk, as on LiteLLM's path);
    or LiteLLM's exception, once LiteLLM's failure logging saw it. Cancelling the awaiting task
    aborts the call in Rust. For a request the fast lane served, replayed through the proxy,
    the call is the lane's: its outcome, or the stream it read."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    claimed = claims.claimed_call()
    handle = (claimed or prepared).start(loop, future, settle)
    try:
        result = await future
    except BaseException as err:
        handle.cancel()
        if isinstance(err, _native.FastpathError):
            record_api_window(logging_obj, start_time)
            if claimed is None and metrics.recorder is not None:
                _measured(metrics.recorder, route, kwargs, start_time)
            raise await failed(err, route, kwargs, logging_obj, start_time) from None
        raise
    record_api_window(logging_obj, start_time)
    if claimed is None and metrics.recorder is not None:
        _measured(metrics.recorder, route, kwargs, start_time)
    return handle, result


def route_name(route: routing.Route) -> str:
    """The route's name in the metrics' `route` label."""
    if isinstance(route, routing.MessagesRoute):
        return "messages"
    if isinstance(route, routing.EmbeddingRoute):
        return "embeddings"
    if isinstance(route, routing.TranscriptionRoute):
        return "transcription"
    return "chat"


def _measured(
    recorder: metrics.Recorder,
    route: routing.Route,
    kwargs: Mapping[str, Any],
    start_time: datetime.datetime,
) -> None:
    """A provider call the fast path made in Python's hands (the lane counts its own)."""
    name = route_name(route)
    recorder.count(name, kwargs, metrics.RUST)
    recorder.upstream.labels(name, metrics.RUST).observe(elapsed(start_time))


def annotated(exc: Exception, kwargs: Mapping[str, Any]) -> Exception:
    """LiteLLM's wrapper tags failures with the call's timeout (the proxy's `x-litellm-timeout`)."""
    exc.timeout = kwargs.get("timeout")  # type: ignore[attr-defined]
    return exc


async def failed(
    err: _native.FastpathError,
    route: routing.Route,
    kwargs: Mapping[str, Any],
    logging_obj: Any,
    start_time: datetime.datetime,
) -> Exception:
    """LiteLLM's exception for `err`, after LiteLLM's failure logging saw it."""
    exc = annotated(errors.to_litellm(err, route, elapsed(start_time)), kwargs)
    if logging_obj is not None:
        if not compat.is_internal_call.get():
            # Failure handlers never settle it: the proxy releases it when the request ends.
            compat.unbind_budget_reservation_from_callbacks(logging_obj.litellm_params)
        end_time = datetime.datetime.now()
        tb = traceback.format_exc()
        logging_obj.failure_handler(exc, tb, start_time, end_time)
        await logging_obj.async_failure_handler(exc, tb, start_time, end_time)
    return exc


def update_metadata(
    result: Any,
    logging_obj: Any,
    kwargs: Mapping[str, Any],
    start_time: datetime.datetime,
    end_time: datetime.datetime | None = None,
) -> None:
    """LiteLLM's `update_response_metadata` for an answer or a stream (hidden params, timings)."""
    compat.update_response_metadata(
        result=result,
        logging_obj=logging_obj,
        model=kwargs.get("model"),
        kwargs=kwargs,
        start_time=start_time,
        end_time=end_time or datetime.datetime.now(),
    )


def dispatch_success(
    logging_obj: Any,
    result: Any,
    start_time: datetime.datetime,
    end_time: datetime.datetime,
    kwargs: Mapping[str, Any],
) -> None:
    """LiteLLM's success logging for an async call (callbacks, cost, spend)."""
    compat.dispatch_success_logging(
        logging_obj=logging_obj,
        result=result,
        start_time=start_time,
        end_time=end_time,
        is_completion_with_fallbacks=kwargs.get("fallbacks") is not None,
        is_litellm_internal_call=False,
    )
