"""LiteLLM integration: `litellm.acompletion(..., rust=True)` runs through the Rust path.

`install()` swaps the module attributes `litellm.acompletion` / `litellm.completion` (the router
looks them up at call time) for wrappers that admit or decline each call before any I/O. A
declined call goes to LiteLLM's own function unchanged. An admitted call is final: its answer or
error comes from the one provider request Rust made; nothing is retried through Python.
"""

from __future__ import annotations

import contextvars
import datetime
import functools
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import litellm

from litellm_fastpath import (
    _native,
    calls,
    claims,
    compat,
    errors,
    hooks,
    messages,
    metrics,
    providers,
    routing,
    streaming,
)
from litellm_fastpath.declines import Decline, record_decline

FASTPATH_HEADERS = {"x-litellm-rust": "true", "x-litellm-fastpath": _native.__version__}

_originals: dict[str, Callable[..., Any]] = {}

# What admission hands over: a call, or a stream (`stream=True` chat).
Prepared = _native.PreparedCall | _native.PreparedStream


def is_installed() -> bool:
    return bool(_originals)


def install() -> None:
    """Routes `rust=True` calls of `litellm.acompletion`/`completion`/`atranscription`/
    `transcription`/`aembedding`/`embedding`/`anthropic_messages` through Rust.

    Idempotent. Calls without `rust=True` are passed to LiteLLM untouched. On a LiteLLM release
    the fast path is not tested with, warns once and patches nothing (see `compat`)."""
    if _originals or not compat.usable():
        return
    for name, wrapper in _WRAPPERS.items():
        _originals[name] = getattr(litellm, name)
        setattr(litellm, name, wrapper)


def uninstall() -> None:
    """Restores LiteLLM's own functions."""
    for name, original in list(_originals.items()):
        setattr(litellm, name, original)
        del _originals[name]


def chat_decision(kwargs: Mapping[str, Any]) -> routing.Route | Decline:
    """Whether a chat call can take the fast path: no hook or check LiteLLM's `client` wrapper
    runs in Python may act on it, and routing admits it."""
    return (
        hooks.client_hook_decline(kwargs)
        or hooks.client_checks_decline(kwargs, answer_checked=True)
        or routing.route(kwargs)
    )


def embedding_decision(kwargs: Mapping[str, Any]) -> routing.EmbeddingRoute | Decline:
    return hooks.client_hook_decline(kwargs) or routing.route_embedding(kwargs)


def transcription_decision(kwargs: Mapping[str, Any]) -> routing.TranscriptionRoute | Decline:
    return hooks.client_hook_decline(kwargs) or routing.route_transcription(kwargs)


def _admit_chat(kwargs: dict[str, Any]) -> tuple[routing.Route, Prepared] | None:
    """The routing decision and Rust's admission; None means "LiteLLM's Python path". Raises
    on malformed input."""
    return calls.admitted(chat_decision(kwargs), functools.partial(_prepare_chat, kwargs))


def _prepare_chat(kwargs: dict[str, Any], route: routing.Route) -> Prepared | _native.Declined:
    non_finite = routing.non_finite_param(route.params)
    if non_finite is not None:
        # LiteLLM would put NaN/Infinity into the JSON body (or fail converting it).
        raise errors.invalid_param(non_finite, "must be a finite number", route)
    if isinstance(route, routing.StreamRoute):
        return _native.prepare_chat_stream(
            route.deployment,
            kwargs.get("messages"),
            route.params,
            stream_options=route.stream_options,
            strip_usage=route.strip_usage,
            repeat_limit=litellm.REPEATED_STREAMING_CHUNK_LIMIT,
            timeout=route.timeout,
        )
    return _native.prepare_chat(
        route.deployment, kwargs.get("messages"), route.params, route.timeout
    )


def _admit_transcription(
    kwargs: dict[str, Any],
) -> tuple[routing.TranscriptionRoute, _native.PreparedCall] | None:
    return calls.admitted(transcription_decision(kwargs), _prepare_transcription)


def _prepare_transcription(route: routing.TranscriptionRoute) -> _native.PreparedCall:
    audio = route.audio
    if memoryview(audio.data).nbytes == 0:
        # LiteLLM's native route refuses an empty file before any I/O, with these words.
        raise litellm.APIConnectionError(
            message="missing required field: audio.data",
            model=route.model,
            llm_provider=route.provider,
        )
    transcription = providers.PROVIDERS[route.provider].transcription
    assert transcription is not None  # routed by it
    if audio.audio_format not in transcription.audio_formats:
        # The caller sent a file the provider cannot take.
        raise litellm.BadRequestError(
            message=transcription.unsupported_audio.format(filename=audio.filename),
            model=route.model,
            llm_provider=route.provider,
        )
    return _native.prepare_transcription(
        route.deployment,
        audio.data,
        audio.audio_format,
        language=route.params.get("language"),
        prompt=route.params.get("prompt"),
        temperature=route.params.get("temperature"),
        timeout=route.timeout,
    )


def _admit_embedding(
    kwargs: dict[str, Any],
) -> tuple[routing.EmbeddingRoute, _native.PreparedCall] | None:
    return calls.admitted(embedding_decision(kwargs), _prepare_embedding)


def _prepare_embedding(route: routing.EmbeddingRoute) -> _native.PreparedCall | _native.Declined:
    return _native.prepare_embedding(route.deployment, route.input, route.params, route.timeout)


def _chat_response(
    body: dict[str, Any], provider_headers: Mapping[str, str], route: routing.Route
) -> Any:
    response = litellm.ModelResponse(**body)
    response._hidden_params["additional_headers"] = {
        **compat.process_response_headers(dict(provider_headers)),
        **FASTPATH_HEADERS,
    }
    return response


def _transcription_response(
    body: dict[str, Any], _provider_headers: Mapping[str, str], route: routing.Route
) -> Any:
    # LiteLLM's own Bedrock transcription route passes no provider headers on either.
    response = litellm.TranscriptionResponse(**body)
    response._hidden_params["additional_headers"] = dict(FASTPATH_HEADERS)
    return response


def _embedding_response(
    body: dict[str, Any], provider_headers: Mapping[str, str], route: routing.Route
) -> Any:
    assert isinstance(route, routing.EmbeddingRoute)
    embeddings = providers.PROVIDERS[route.provider].embeddings
    assert embeddings is not None  # routed by it
    response, headers = embeddings.response(body, provider_headers, route.model, route.input)
    response._hidden_params["additional_headers"] = {**headers, **FASTPATH_HEADERS}
    return response


@dataclass(frozen=True)
class _Kind:
    """One LiteLLM entry point pair the fast path serves."""

    async_name: str
    sync_name: str
    route: str  # the metrics' `route` label
    positional: tuple[str, ...]
    admit: Callable[[dict[str, Any]], tuple[routing.Route, Prepared] | None]
    response: Callable[[dict[str, Any], Mapping[str, str], routing.Route], Any]


_CHAT = _Kind(
    "acompletion", "completion", "chat", ("model", "messages"), _admit_chat, _chat_response
)
_EMBEDDING = _Kind(
    "aembedding",
    "embedding",
    "embeddings",
    ("model", "input"),
    _admit_embedding,
    _embedding_response,
)
_TRANSCRIPTION = _Kind(
    "atranscription",
    "transcription",
    "transcription",
    ("model", "file"),
    _admit_transcription,
    _transcription_response,
)


def _normalize(kind: _Kind, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Positional form (`acompletion(model, messages, ...)`) -> keyword form."""
    for name, value in zip(kind.positional, args, strict=False):
        kwargs[name] = value
    return kwargs


async def _call_async(kind: _Kind, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    original = _originals[kind.async_name]
    if kind is _CHAT:
        claims.show_call(kwargs)
    if kwargs.pop("rust", False) is not True:
        # LiteLLM's path is about to call the provider: never for a request the lane served.
        claims.refuse_second_call()
        if metrics.recorder is not None:
            metrics.recorder.count(kind.route, kwargs, metrics.PYTHON)
        return await original(*args, **kwargs)
    kwargs = _normalize(kind, args, kwargs)
    admitted = kind.admit(kwargs)
    if admitted is None:
        claims.refuse_second_call()
        if metrics.recorder is not None:
            metrics.recorder.count(kind.route, kwargs, metrics.PYTHON)
        return await original(**kwargs)
    route, prepared = admitted
    start_time = datetime.datetime.now()
    streamed = isinstance(prepared, _native.PreparedStream)
    # LiteLLM's stream wrapper needs a logging object.
    logging_obj = _logging_obj(kwargs, route, prepared, start_time, kind.async_name, streamed)
    calls.bind_reservation(logging_obj)
    calls.mark_dispatched(logging_obj)
    if isinstance(prepared, _native.PreparedStream):
        assert isinstance(route, routing.StreamRoute)
        return await _start_stream(route, prepared, kwargs, logging_obj, start_time)
    _handle, (body, provider_headers) = await calls.start(
        prepared, route, kwargs, logging_obj, start_time
    )
    response = kind.response(body, provider_headers, route)
    return _succeeded(response, route, kwargs, logging_obj, start_time)


def _call_sync(kind: _Kind, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    original = _originals[kind.sync_name]
    if kwargs.pop("rust", False) is not True:
        return original(*args, **kwargs)
    if kwargs.get("stream") is True:
        # Synchronous streams stay on LiteLLM's path (its sync wrapper iterates in this thread).
        record_decline(Decline("stream", "a synchronous stream"))
        return original(*args, **kwargs)
    kwargs = _normalize(kind, args, kwargs)
    admitted = kind.admit(kwargs)
    if admitted is None:
        return original(**kwargs)
    route, prepared = admitted
    assert isinstance(prepared, _native.PreparedCall)  # sync streams were declined above
    start_time = datetime.datetime.now()
    logging_obj = _logging_obj(kwargs, route, prepared, start_time, kind.sync_name)
    calls.mark_dispatched(logging_obj)
    try:
        body, provider_headers = prepared.send_blocking()
    except _native.FastpathError as err:
        calls.record_api_window(logging_obj, start_time)
        exc = calls.annotated(errors.to_litellm(err, route, calls.elapsed(start_time)), kwargs)
        _log_failure_sync(logging_obj, exc, start_time)
        raise exc from None
    calls.record_api_window(logging_obj, start_time)
    response = kind.response(body, provider_headers, route)
    return _succeeded(response, route, kwargs, logging_obj, start_time, sync=True)


async def acompletion(*args: Any, **kwargs: Any) -> Any:
    return await _call_async(_CHAT, args, kwargs)


def completion(*args: Any, **kwargs: Any) -> Any:
    return _call_sync(_CHAT, args, kwargs)


async def atranscription(*args: Any, **kwargs: Any) -> Any:
    return await _call_async(_TRANSCRIPTION, args, kwargs)


def transcription(*args: Any, **kwargs: Any) -> Any:
    return _call_sync(_TRANSCRIPTION, args, kwargs)


async def aembedding(*args: Any, **kwargs: Any) -> Any:
    return await _call_async(_EMBEDDING, args, kwargs)


def embedding(*args: Any, **kwargs: Any) -> Any:
    return _call_sync(_EMBEDDING, args, kwargs)


async def anthropic_messages(*args: Any, **kwargs: Any) -> Any:
    """`litellm.anthropic_messages` (the proxy's `/v1/messages`). The router keeps the function
    it finds when it is built, so `install()` must run before any `Router` exists (the proxy
    imports its callbacks first)."""
    original = _originals["anthropic_messages"]
    claims.show_call(kwargs)
    if kwargs.pop("rust", False) is not True:
        claims.refuse_second_call()
        if metrics.recorder is not None:
            metrics.recorder.count("messages", kwargs, metrics.PYTHON)
        return await original(*args, **kwargs)
    for name, value in zip(messages.POSITIONAL, args, strict=False):
        kwargs[name] = value
    admitted = messages.admit(kwargs)
    if admitted is None:
        claims.refuse_second_call()
        if metrics.recorder is not None:
            metrics.recorder.count("messages", kwargs, metrics.PYTHON)
        return await original(**kwargs)
    return await messages.call(kwargs, admitted)


_WRAPPERS: dict[str, Callable[..., Any]] = {
    "acompletion": acompletion,
    "completion": completion,
    "atranscription": atranscription,
    "transcription": transcription,
    "aembedding": aembedding,
    "embedding": embedding,
    "anthropic_messages": anthropic_messages,
}


async def _start_stream(
    route: routing.StreamRoute,
    prepared: _native.PreparedStream,
    kwargs: dict[str, Any],
    logging_obj: Any,
    start_time: datetime.datetime,
) -> streaming.FastStream:
    """Opens the stream and wraps it in LiteLLM's stream wrapper, once the provider answered
    2xx with its headers."""
    handle, provider_headers = await calls.start(prepared, route, kwargs, logging_obj, start_time)
    logging_obj.stream = True
    logging_obj.model_call_details["stream"] = True
    stream = streaming.FastStream(
        handle, route, logging_obj, provider_headers, streaming.frames_allowed(kwargs)
    )
    stream._hidden_params["additional_headers"].update(FASTPATH_HEADERS)
    calls.update_metadata(stream, logging_obj, kwargs, start_time)
    return stream


def _logging_obj(
    kwargs: dict[str, Any],
    route: routing.Route,
    prepared: Prepared,
    start_time: datetime.datetime,
    call_type: str,
    required: bool = False,
) -> Any:
    """LiteLLM's logging object for this call (`calls.logging_obj`), told about the call."""
    logging_obj = calls.logging_obj(kwargs, call_type, start_time, required)
    if logging_obj is None:
        return None
    logging_obj.update_environment_variables(
        model=route.model,
        user=kwargs.get("user"),
        optional_params=dict(route.params),
        litellm_params=_litellm_params(kwargs, route, prepared),
        custom_llm_provider=route.provider,
    )
    return logging_obj


def _litellm_params(
    kwargs: Mapping[str, Any], route: routing.Route, prepared: Prepared
) -> dict[str, Any]:
    """What LiteLLM's logging reads from `litellm_params` (spend tracking keys live in metadata)."""
    # LiteLLM's handlers log the URL they post to or the configured base (the provider table
    # says which); its transcription entry point logs none (the spend row's `api_base` is
    # empty), as it hands the base to its handler as an argument, not in `litellm_params`.
    api_base: str | None
    if isinstance(route, routing.TranscriptionRoute):
        api_base = None
    elif providers.PROVIDERS[route.provider].logs_url:
        api_base = prepared.url
    else:
        api_base = route.deployment.api_base
    return {
        "metadata": kwargs.get("metadata") or {},
        "litellm_metadata": kwargs.get("litellm_metadata"),
        "model_info": kwargs.get("model_info"),
        "proxy_server_request": kwargs.get("proxy_server_request"),
        "litellm_call_id": kwargs.get("litellm_call_id"),
        "api_base": api_base,
        "custom_llm_provider": route.provider,
        "acompletion": True,
        "stream": isinstance(route, routing.StreamRoute),
    }


def _succeeded(
    response: Any,
    route: routing.Route,
    kwargs: dict[str, Any],
    logging_obj: Any,
    start_time: datetime.datetime,
    sync: bool = False,
) -> Any:
    end_time = datetime.datetime.now()
    response._hidden_params["custom_llm_provider"] = route.provider
    if logging_obj is None:
        response._hidden_params["model_id"] = (kwargs.get("model_info") or {}).get("id")
        return response
    calls.update_metadata(response, logging_obj, kwargs, start_time, end_time)
    if sync:
        # LiteLLM's synchronous wrapper: its success handler on its logging thread pool (there
        # is no event loop to schedule the async callbacks on).
        compat.logging_executor().submit(
            contextvars.copy_context().run,
            logging_obj.success_handler,
            response,
            start_time,
            end_time,
        )
    else:
        calls.dispatch_success(logging_obj, response, start_time, end_time, kwargs)
    return response


def _log_failure_sync(logging_obj: Any, exc: Exception, start_time: datetime.datetime) -> None:
    if logging_obj is not None:
        logging_obj.failure_handler(
            exc, traceback.format_exc(), start_time, datetime.datetime.now()
        )
