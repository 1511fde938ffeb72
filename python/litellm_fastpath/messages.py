"""The Anthropic Messages API (`litellm.anthropic_messages`, the proxy's `/v1/messages`) for
`rust: true` deployments: `anthropic/…` and Bedrock Invoke Claude models, streamed and not.

LiteLLM's path is the specification. What it does to a request is split by size:
- the small top-level params (thinking, sampling, headers and betas) are asked of LiteLLM's own
  functions, once per distinct value (cached), and admitted only when LiteLLM sends them as
  given;
- the large fields (`messages`, `system`, `tools`) are walked in Rust, which applies LiteLLM's
  block rules or declines what it does not reproduce.
The answer is LiteLLM's too: the caller gets `json.loads` of the provider's bytes (a stream: the
provider's bytes as they arrive), and LiteLLM's own logging turns them into usage and cost.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

import httpx
import litellm

from litellm_fastpath import _native, calls, claims, compat, errors, hooks, routing
from litellm_fastpath.bridge import settle
from litellm_fastpath.declines import Decline
from litellm_fastpath.providers import PROVIDERS, Messages

# `anthropic_messages`'s positional parameters, in order.
POSITIONAL = ("max_tokens", "messages", "model")
# Request fields LiteLLM forwards and the fast path serves, in the order LiteLLM's body has them
# (sampling params go last: LiteLLM pops and re-adds them).
_BODY_FIELDS = ("metadata", "stop_sequences", "system", "thinking", "tool_choice", "tools")
_SAMPLING_FIELDS = ("temperature", "top_p", "top_k")
# Fields LiteLLM forwards with rewrites or betas of its own per model and provider.
_DECLINED_FIELDS = frozenset(
    {
        "inference_geo",
        "mcp_servers",
        "context_management",
        "compaction",
        "container",
        "output_format",
        "output_config",
        "speed",
        "cache_control",
        "reasoning_effort",
        "safeguards",
        "cache_control_injection_points",
        "model_id",
        "aws_bedrock_runtime_endpoint_override",
    }
)
# Fields read above (or headers), and fields LiteLLM's body never carries (it drops them).
_HANDLED = frozenset(
    {
        *POSITIONAL,
        *_BODY_FIELDS,
        *_SAMPLING_FIELDS,
        "stream",
        "headers",
        "extra_headers",
        "provider_specific_header",
        "is_async",
        "user",
        "service_tier",
        "extra_body",
    }
)
# The CustomLogger hooks that see or change a `/v1/messages` request or answer in Python.
_REQUEST_HOOKS = (
    "async_pre_request_hook",
    "async_pre_call_deployment_hook",
    "async_post_call_success_deployment_hook",
    "async_should_run_agentic_loop",
)
_STREAM_HIDDEN_PARAMS = "additional_headers"
# How long closing a stream waits for the pump to hand over what it read.
_STOP_WAIT_S = 1.0
_PARTIAL_LOGS: set[asyncio.Future[None]] = set()
_FASTPATH_HEADERS = {"x-litellm-rust": "true", "x-litellm-fastpath": _native.__version__}


# Hooks LiteLLM's proxy installs itself, and when they leave a request alone.
_IDLE_HOOKS: dict[str, hooks.Idle] = {"SkillsInjectionHook": hooks.skills_hook_idle}


def _hook_decline(kwargs: Mapping[str, Any]) -> Decline | None:
    """A configured hook or setting that makes LiteLLM treat the request in Python."""
    if litellm.modify_params or litellm.max_budget or litellm.cache is not None:
        return Decline("messages_hook", "modify_params, max_budget or a cache is set")
    if getattr(litellm, "enable_anthropic_prompt_caching", False) or getattr(
        litellm, "enable_prompt_caching", False
    ):
        return Decline("messages_hook", "prompt caching injection is on")
    name = hooks.acting(
        kwargs, _REQUEST_HOOKS, lambda callback: _IDLE_HOOKS.get(type(callback).__name__)
    )
    return None if name is None else Decline("messages_hook", f"{name} hook")


def _caller_headers(kwargs: Mapping[str, Any], provider: str) -> dict[str, str] | Decline:
    """LiteLLM's merge: forwarded `headers` < `extra_headers` < provider-specific headers."""
    merged: dict[str, Any] = {}
    for source in (kwargs.get("headers"), kwargs.get("extra_headers")):
        if source:
            if not isinstance(source, Mapping):
                return Decline("extra_headers", "headers are not a mapping")
            merged.update(source)
    specific = kwargs.get("provider_specific_header")
    if specific:
        merged.update(
            compat.ProviderSpecificHeaderUtils.get_provider_specific_headers(
                provider_specific_header=specific, custom_llm_provider=provider
            )
        )
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in merged.items()):
        return Decline("extra_headers", "a header that is not text")
    if any(k.lower() in ("x-api-key", "authorization") for k in merged):
        # The caller's own credential (or OAuth token) replaces the deployment's.
        return Decline("credentials", "the caller sends its own credential")
    return merged


# The providers `/v1/messages` runs in Rust for, from the provider table.
_MESSAGING = [name for name, entry in PROVIDERS.items() if entry.messages]


def _api(provider: str) -> Messages:
    """The provider's `/v1/messages` entry (of a provider it routes to)."""
    api = PROVIDERS[provider].messages
    assert api is not None
    return api


def _config(provider: str, model: str) -> Any:
    return compat.ProviderConfigManager.get_provider_anthropic_messages_config(
        model=model, provider=litellm.LlmProviders(provider)
    )


@functools.lru_cache(maxsize=1024)
def _litellm_params_as_sent(
    provider: str, model: str, params_json: str, drop_params: bool
) -> tuple[str, ...] | None:
    """The small params LiteLLM would change for this model (None when it keeps them all),
    asked of LiteLLM's own functions with an empty conversation."""
    params = json.loads(params_json)
    try:
        filtered = (
            compat.AnthropicMessagesRequestUtils.get_requested_anthropic_messages_optional_param(
                params=dict(params),
                model=model,
                drop_params=drop_params,
                custom_llm_provider=provider,
            )
        )
        sent = _config(provider, model).transform_anthropic_messages_request(
            model=model,
            messages=[],
            anthropic_messages_optional_request_params=dict(filtered),
            litellm_params=compat.GenericLiteLLMParams(),
            headers={},
        )
    except Exception:  # LiteLLM refuses (unsupported param): its own path says how
        return tuple(params)
    changed = tuple(
        name for name, value in params.items() if name != "max_tokens" and sent.get(name) != value
    )
    added = tuple(
        name for name in ("thinking", "output_config") if name in sent and name not in params
    )
    return (changed + added) or None


@functools.lru_cache(maxsize=1024)
def _litellm_headers(
    provider: str, model: str, caller: tuple[tuple[str, str], ...], thinking_json: str
) -> tuple[tuple[str, str], ...]:
    """The headers LiteLLM sends besides the credential (versions and betas merged, sorted and
    filtered its way), from its own functions."""
    config = _config(provider, model)
    headers = dict(caller)
    if _api(provider).merges_betas:
        # Adding the credential merges (dedupes, sorts) the caller's betas.
        betas = compat.merge_anthropic_beta_headers(headers.get("anthropic-beta"), None)
        if betas:
            headers["anthropic-beta"] = betas
        optional = {"thinking": json.loads(thinking_json)} if thinking_json != "null" else {}
        headers = config._finalize_messages_headers(headers, optional, [])
    if config.should_filter_anthropic_beta_headers():
        headers = compat.update_headers_with_filtered_beta(headers=headers, provider=provider)
    return tuple(headers.items())


def _metadata(value: Any) -> dict[str, Any] | Decline | None:
    """LiteLLM's `validate_anthropic_api_metadata`: only `user_id` goes to the provider."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return Decline("messages_param", "metadata is not an object")
    user_id = value.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        return Decline("messages_param", "metadata.user_id is not a string")
    return {} if user_id is None else {"user_id": user_id}


def route_messages(kwargs: Mapping[str, Any]) -> routing.MessagesRoute | Decline:
    """Decides whether an `anthropic_messages` call can take the fast path."""
    split = routing.provider_and_model(
        kwargs, _MESSAGING, f"/v1/messages runs in Rust for {', '.join(_MESSAGING)}"
    )
    if isinstance(split, Decline):
        return split
    provider, upstream_model = split
    hook = _hook_decline(kwargs) or hooks.client_checks_decline(kwargs, answer_checked=False)
    if hook is not None:
        return hook
    for name, value in kwargs.items():
        if value is None or name in _HANDLED or name in routing.DEPLOYMENT_KWARGS:
            continue
        if name in _DECLINED_FIELDS:
            return Decline("messages_param", f"field {name!r}")
        if name in routing.BEHAVIOUR_KWARGS and value:
            return routing.behaviour_decline(name)
    max_tokens = kwargs.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        # LiteLLM's own error (or its coercion) for a missing or odd max_tokens.
        return Decline("messages_param", "max_tokens is not an integer")
    stream = kwargs.get("stream")
    if stream not in (None, True, False) or ("stream" in kwargs and stream is None):
        # An explicit `stream=None` leaves `stream` out of LiteLLM's body (absent: `false`).
        return Decline("stream", "stream is not a boolean")
    api = _api(provider)
    # LiteLLM's messages handler: a deployment's `stream_timeout` wins for streams.
    stream_timeout = kwargs.get("stream_timeout") if stream is True else None
    timeout = routing.call_timeout(
        kwargs if stream_timeout is None else {"timeout": stream_timeout}
    )
    if isinstance(timeout, Decline):
        return timeout
    # Extra headers join LiteLLM's header merge below, not the deployment's fixed headers.
    settings = {k: v for k, v in kwargs.items() if k != "extra_headers"}
    deployment = routing.resolve_deployment(provider, upstream_model, settings, api.settings)
    if isinstance(deployment, Decline):
        return deployment
    metadata = _metadata(kwargs.get("metadata"))
    if isinstance(metadata, Decline):
        return metadata
    small = {
        name: kwargs[name]
        for name in ("thinking", *_SAMPLING_FIELDS)
        if kwargs.get(name) is not None
    }
    try:
        small_json = json.dumps({"max_tokens": max_tokens, **small}, allow_nan=False)
    except (TypeError, ValueError):
        return Decline("param_type", "thinking or sampling params JSON cannot hold")
    changed = _litellm_params_as_sent(
        provider, deployment.model, small_json, kwargs.get("drop_params") is True
    )
    if changed is not None:
        return Decline("messages_param", f"LiteLLM rewrites {', '.join(changed)} here")
    caller = _caller_headers(kwargs, provider)
    if isinstance(caller, Decline):
        return caller
    if not api.merges_betas and any(k.lower() == "anthropic-beta" for k in caller):
        return Decline("messages_param", f"anthropic-beta for {provider}")
    headers = _litellm_headers(
        provider,
        deployment.model,
        tuple(caller.items()),
        json.dumps(small.get("thinking"), sort_keys=True),
    )
    if not kwargs.get("headers") and not kwargs.get("extra_headers"):
        claims.learn_messages_headers(kwargs, {"max_tokens": max_tokens, **small}, caller, headers)
    fields: list[tuple[str, Any]] = [
        ("messages", kwargs.get("messages")),
        ("max_tokens", max_tokens),
    ]
    optional: dict[str, Any] = {"max_tokens": max_tokens}
    for name in _BODY_FIELDS:
        value = metadata if name == "metadata" else kwargs.get(name)
        if value is not None:
            fields.append((name, value))
    optional.update(fields[2:])
    optional["stream"] = bool(stream)
    for name in _SAMPLING_FIELDS:
        if name in small:
            fields.append((name, small[name]))
            optional[name] = small[name]
    return routing.MessagesRoute(
        deployment=deployment,
        provider=provider,
        model=deployment.model,
        params={},
        timeout=timeout,
        errors=api.errors,
        requested_model=str(kwargs.get("model")),
        stream=stream is True,
        fields=tuple(fields),
        headers=headers,
        optional_params=optional,
    )


def admit(kwargs: dict[str, Any]) -> tuple[routing.MessagesRoute, Any, bool] | None:
    """The route, the prepared call or stream and whether LiteLLM's block rules dropped
    anything; None when LiteLLM's path serves the call."""
    admitted = calls.admitted(route_messages(kwargs), _prepare)
    if admitted is None:
        return None
    route, (call, rewrote) = admitted
    return route, call, rewrote


def _prepare(
    route: routing.MessagesRoute,
) -> tuple[_native.PreparedCall | _native.PreparedStream, bool] | _native.Declined:
    return _native.prepare_messages(
        route.deployment,
        list(route.fields),
        list(route.headers),
        stream=route.stream,
        timeout=route.timeout,
    )


def _logged_messages(route: routing.MessagesRoute, rewrote: bool) -> Any:
    messages = route.fields[0][1]
    if not rewrote:
        return messages
    # The rare request whose blocks LiteLLM dropped: its own functions make the logged copy.
    return compat.strip_provider_specific_fields_from_anthropic_messages(
        compat.strip_empty_content_blocks_from_anthropic_messages(messages)
    )


def _logging_obj(
    kwargs: dict[str, Any],
    route: routing.MessagesRoute,
    prepared: Any,
    rewrote: bool,
    start_time: datetime.datetime,
) -> Any:
    """LiteLLM's logging object (`calls.logging_obj`), set up as its messages handler sets it
    up."""
    logging_obj = calls.logging_obj(kwargs, "anthropic_messages", start_time)
    if logging_obj is None:
        return None
    logging_obj.model_call_details["agentic_loop_params"] = {
        "model": route.requested_model,
        "custom_llm_provider": route.provider,
    }
    logging_obj.model_call_details.setdefault("litellm_params", {})["aanthropic_messages"] = True
    logging_obj.update_from_kwargs(
        kwargs=kwargs,
        model=route.model,
        optional_params=dict(route.optional_params),
        litellm_params={
            "preset_cache_key": None,
            "stream_response": {},
            "model_info": kwargs.get("model_info"),
            **route.optional_params,
        },
        custom_llm_provider=route.provider,
    )
    logging_obj.stream = route.stream
    body = dict(route.fields)
    body["messages"] = _logged_messages(route, rewrote)
    if _api(route.provider).body_names_model:
        body["model"] = route.model
        body["stream"] = route.stream
    logging_obj.model_call_details.update(body)
    # What LiteLLM's `pre_call` records of the request it is about to send.
    logging_obj.model_call_details["api_key"] = ""
    logging_obj.model_call_details["litellm_params"]["api_base"] = logging_obj._get_masked_api_base(
        prepared.url
    )
    return logging_obj


def _answer(raw: bytes, route: routing.MessagesRoute) -> Any:
    """`json.loads` of the provider's bytes, as LiteLLM's `raw_response.json()`."""
    try:
        answer = json.loads(raw)
        if not isinstance(answer, dict):
            raise ValueError("not an object")
    except ValueError:
        raise errors.to_litellm(
            _native.InvalidResponseError(raw.decode("utf-8", "replace"), "unparsable"),
            route,
        ) from None
    return answer


async def call(kwargs: dict[str, Any], admitted: tuple[routing.MessagesRoute, Any, bool]) -> Any:
    route, prepared, rewrote = admitted
    start_time = datetime.datetime.now()
    logging_obj = _logging_obj(kwargs, route, prepared, rewrote, start_time)
    calls.bind_reservation(logging_obj)
    calls.mark_dispatched(logging_obj)
    if route.stream:
        return await _start_stream(route, prepared, kwargs, logging_obj, start_time)
    _handle, (body, provider_headers) = await calls.start(
        prepared, route, kwargs, logging_obj, start_time
    )
    raw = cast(bytes, body)  # a `/v1/messages` call answers with the provider's bytes
    answer = _answer(raw, route)
    if kwargs.get("proxy_server_request") is not None:
        # The proxy reads a dict answer's `_hidden_params` for its headers and drops the key
        # before sending the body; SDK callers get the provider's JSON untouched.
        answer["_hidden_params"] = {_STREAM_HIDDEN_PARAMS: dict(_FASTPATH_HEADERS)}
    if logging_obj is None:
        return answer
    # LiteLLM's logging rebuilds usage and cost from the provider's response.
    response = httpx.Response(200, headers=provider_headers, content=raw)
    logging_obj.model_call_details["httpx_response"] = response
    logging_obj.model_call_details["response_headers"] = dict(response.headers)
    end_time = datetime.datetime.now()
    calls.update_metadata(answer, logging_obj, kwargs, start_time, end_time)
    calls.dispatch_success(logging_obj, answer, start_time, end_time, kwargs)
    return answer


class MessagesStream:
    """The provider's bytes as they arrive, like LiteLLM's `AnthropicMessagesStreamingResponse`
    (its `_hidden_params` carry the provider's headers to the proxy). At the end, LiteLLM's own
    stream logging runs once, over a compact transcript Rust kept of the stream."""

    def __init__(
        self,
        handle: _native.StreamHandle,
        route: routing.MessagesRoute,
        logging_obj: Any,
        provider_headers: dict[str, str],
        start_time: datetime.datetime,
    ) -> None:
        self._handle = handle
        self._route = route
        self._logging_obj = logging_obj
        self._start_time = start_time
        self._first_at: datetime.datetime | None = None
        self._ended = False
        self._failure: BaseException | None = None
        # The end of a stream read to its end, logged once the caller has taken the last bytes
        # (as LiteLLM's generator logs on its way out, after the proxy sent its headers).
        self._transcript: str | None = None
        self._hidden_params: dict[str, Any] = {
            _STREAM_HIDDEN_PARAMS: {
                **compat.process_response_headers(dict(provider_headers)),
                **_FASTPATH_HEADERS,
            }
        }

    @property
    def hidden_params(self) -> dict[str, Any]:
        return self._hidden_params

    @hidden_params.setter
    def hidden_params(self, value: dict[str, Any]) -> None:
        self._hidden_params = value

    def __aiter__(self) -> MessagesStream:
        return self

    async def __anext__(self) -> bytes:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
        while not self._ended:
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            self._handle.next(loop, future, settle)
            try:
                payload, _text, end = await future
            except BaseException:
                # Cancelled: LiteLLM still logs what was read (its generator's `finally`).
                self._ended = True
                task = asyncio.ensure_future(self._stop_and_log())
                _PARTIAL_LOGS.add(task)
                task.add_done_callback(_PARTIAL_LOGS.discard)
                raise
            if end is not None:
                self._ended = True
                if isinstance(end, BaseException):
                    self._failure = self._failed(end)
                else:
                    self._transcript = end
            if payload:
                if self._first_at is None:
                    self._first_at = datetime.datetime.now()
                return payload
            failure, self._failure = self._failure, None
            if failure is not None:
                raise failure
        self._log_read_stream()
        raise StopAsyncIteration

    def _log_read_stream(self) -> None:
        transcript, self._transcript = self._transcript, None
        if transcript is not None:
            self._log(transcript)

    def _failed(self, err: BaseException) -> BaseException:
        """What reading LiteLLM's stream raises there; its failure logging, as LiteLLM runs it."""
        failure = errors.stream_failure(err, self._route)
        if self._logging_obj is not None and isinstance(failure, Exception):
            compat.GLOBAL_LOGGING_WORKER.ensure_initialized_and_enqueue(
                async_coroutine=compat.PassThroughStreamingHandler.schedule_stream_failure_logging(
                    litellm_logging_obj=self._logging_obj,
                    endpoint_type=compat.EndpointType.ANTHROPIC,
                    request_body=_request_body(self._logging_obj),
                    raw_bytes=[],
                    exception=failure,
                    stream_context=compat.PassThroughStreamContext(
                        passthrough_success_handler_obj=compat.GLOBAL_PASS_THROUGH_SUCCESS_HANDLER_OBJ,
                        url_route="/v1/messages",
                        start_time=self._start_time,
                    ),
                )
            )
        return failure

    def _log(self, transcript: str) -> None:
        """LiteLLM's end-of-stream logging, as its `chunk_processor` schedules it."""
        logging_obj = self._logging_obj
        if logging_obj is None:
            return
        if self._first_at is not None:
            logging_obj.completion_start_time = self._first_at
            logging_obj.model_call_details["completion_start_time"] = self._first_at
        coroutine = compat.PassThroughStreamingHandler.route_streaming_logging_to_handler(
            litellm_logging_obj=logging_obj,
            passthrough_success_handler_obj=compat.GLOBAL_PASS_THROUGH_SUCCESS_HANDLER_OBJ,
            url_route="/v1/messages",
            request_body=_request_body(logging_obj),
            endpoint_type=compat.EndpointType.ANTHROPIC,
            start_time=self._start_time,
            raw_bytes=[transcript.encode()],
            end_time=datetime.datetime.now(),
        )
        if getattr(logging_obj, "_on_deferred_stream_complete", None) is not None:
            # The proxy fires it after its end-of-stream guardrails.
            logging_obj._deferred_stream_complete_args = (coroutine,)
            return
        compat.GLOBAL_LOGGING_WORKER.ensure_initialized_and_enqueue(async_coroutine=coroutine)

    async def aclose(self) -> None:
        """Closes the upstream connection at once; what was read so far is logged, as LiteLLM
        logs a stream its caller closes."""
        if self._ended:
            self._log_read_stream()
            return
        self._ended = True
        await self._stop_and_log()

    async def _stop_and_log(self) -> None:
        self._handle.stop()
        end: Any = None
        try:
            async with asyncio.timeout(_STOP_WAIT_S):
                while end is None:
                    future = asyncio.get_running_loop().create_future()
                    self._handle.next(asyncio.get_running_loop(), future, settle)
                    payload, _text, end = await future
                    if payload is None:
                        break
        except (TimeoutError, asyncio.CancelledError):
            pass
        finally:
            self._handle.cancel()
        if isinstance(end, str):
            self._log(end)


def _request_body(logging_obj: Any) -> dict[str, Any]:
    details = logging_obj.model_call_details
    return {key: details[key] for key in ("messages", "max_tokens", "model") if key in details}


async def _start_stream(
    route: routing.MessagesRoute,
    prepared: _native.PreparedStream,
    kwargs: dict[str, Any],
    logging_obj: Any,
    start_time: datetime.datetime,
) -> AsyncIterator[bytes]:
    handle, provider_headers = await calls.start(prepared, route, kwargs, logging_obj, start_time)
    if logging_obj is not None:
        logging_obj.model_call_details["stream"] = True
    stream = MessagesStream(handle, route, logging_obj, provider_headers, start_time)
    if logging_obj is not None:
        calls.update_metadata(stream, logging_obj, kwargs, start_time)
    return stream
