"""The routing decision: may this `litellm.acompletion` call run in Rust?

Everything here happens before any I/O. A call is admitted only when the deployment, every
kwarg, message role and content part is one the Rust path serves exactly like LiteLLM; anything
else is declined with a reason (counted, and logged at debug level) and LiteLLM runs as usual.
"""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from litellm_fastpath import _native, compat
from litellm_fastpath.declines import Decline
from litellm_fastpath.errors import Call
from litellm_fastpath.providers import PROVIDERS, Served, Settings

# Keys LiteLLM, the router and the proxy add for their own bookkeeping. They never change what
# the provider receives, so the Rust path may ignore them (logging still sees them).
BOOKKEEPING_KWARGS = frozenset(
    {
        "metadata",
        # The proxy's own note that it asked for usage (read by `route` for streams).
        "_litellm_strip_stream_usage",
        "litellm_metadata",
        "litellm_call_id",
        "litellm_logging_obj",
        "litellm_trace_id",
        "litellm_session_id",
        "litellm_parent_otel_span",
        "model_info",
        "proxy_server_request",
        "secret_fields",
        "standard_callback_dynamic_params",
        "client",
        "acompletion",
        "rpm",
        "tpm",
        "max_parallel_requests",
        "order",
        "weight",
        "model_group",
        "model_group_size",
        "deployment",
        "api_version",
        "drop_params",
        "tags",
        "user_api_key",
        "user_api_key_alias",
        "user_api_key_user_id",
        "user_api_key_team_id",
        "user_api_key_end_user_id",
        "no-log",
        "litellm_request_debug",
        "rust",
        "headers",
        "max_retries",
        "mock_timeout",
        "allow_client_keepalive_override",
        "use_in_pass_through",
        "use_xai_oauth",
        "shared_session",
        "_context_compaction_state",
        # Deployment management settings (limits, budgets, auth policy): router and proxy only.
        "itpm",
        "otpm",
        "stream_timeout",
        "configurable_clientside_auth_params",
        "litellm_credential_name",
        "provider_affinity_header",
        "max_file_size_mb",
        "default_api_key_tpm_limit",
        "default_api_key_rpm_limit",
        "max_budget",
        "budget_duration",
        "keepalive_seconds",
    }
)

# Kwargs that make LiteLLM itself behave differently (caching, retries, fallbacks, pricing,
# credentials it resolves through its own chains). Truthy values decline.
BEHAVIOUR_KWARGS = frozenset(
    {
        "caching",
        "cache",
        "num_retries",
        "fallbacks",
        "context_window_fallback_dict",
        "mock_response",
        "mock_tool_calls",
        "input_cost_per_token",
        "output_cost_per_token",
        "input_cost_per_second",
        "output_cost_per_second",
        "base_model",
        "additional_drop_params",
        "organization",
        "stream_options",
        "azure_ad_token",
        "aws_role_name",
        "aws_profile_name",
        "aws_web_identity_token",
        "aws_session_name",
        "aws_sts_endpoint",
        "aws_external_id",
        "complete_response",
        "logger_fn",
        "use_litellm_proxy",
        "merge_reasoning_content_in_choices",
        "use_chat_completions_api",
        "fireworks_forward_user_id",
        "chatgpt_auth_file",
        "timeout_by_service_tier",
    }
)

# Kwargs that configure the deployment rather than the request body.
DEPLOYMENT_KWARGS = frozenset(
    {
        "model",
        "messages",
        "custom_llm_provider",
        "api_key",
        "api_base",
        "base_url",
        "timeout",
        "request_timeout",
        "extra_headers",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "aws_region_name",
        "aws_bedrock_runtime_endpoint",
    }
)

# Behaviour kwargs common enough to get their own decline counter.
_OWN_DECLINE_CODES = frozenset({"caching", "fallbacks", "num_retries", "mock_response"})

DEFAULT_TIMEOUT_S = 600.0
# About 31 years: longer timeouts are "no timeout" in practice and overflow a Rust `Duration`.
_MAX_TIMEOUT_S = 1e9


@dataclass(frozen=True, slots=True)
class Route(Call):
    """An admitted call: where it goes and with which params, what LiteLLM calls the model and
    provider, and how LiteLLM's handler for its provider and route reports faults."""

    deployment: _native.Deployment
    params: dict[str, Any]


def _split_provider(model: str, custom_llm_provider: str | None) -> tuple[str, str] | None:
    """`anthropic/claude-x` -> ("anthropic", "claude-x"); unknown or implicit providers -> None."""
    prefix, _, rest = model.partition("/")
    if custom_llm_provider:
        if prefix == custom_llm_provider and rest:
            return custom_llm_provider, rest
        return custom_llm_provider, model
    if rest and prefix in PROVIDERS:
        return prefix, rest
    return None


def provider_and_model(
    kwargs: Mapping[str, Any], served: Collection[str] | None, why: str
) -> tuple[str, str] | Decline:
    """(provider, upstream model) of the call's `model`, when the route serves that provider
    (`served`, None: any with a known prefix); else a decline (`why` may name `{model}`)."""
    model = kwargs.get("model")
    if not isinstance(model, str):
        return Decline("model", "model is not a string")
    split = _split_provider(model, kwargs.get("custom_llm_provider"))
    if split is None or (served is not None and split[0] not in served):
        return Decline("provider", why.format(model=model))
    return split


def call_timeout(kwargs: Mapping[str, Any]) -> float | Decline:
    """The call's timeout in seconds, LiteLLM's default when it sets none."""
    value = kwargs.get("timeout") or kwargs.get("request_timeout")
    if value is None:
        import litellm

        value = getattr(litellm, "request_timeout", None) or DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return Decline("timeout", f"timeout of type {type(value).__name__}")
    try:
        seconds = float(value)
    except ValueError:
        return Decline("timeout", "timeout is not a number")
    if not (0 < seconds <= _MAX_TIMEOUT_S):
        # NaN, infinities, zero, negative, or too large for a Rust Duration: LiteLLM's rules.
        return Decline("timeout", "timeout is not a positive number of seconds Rust can hold")
    return seconds


# RFC 9110 token characters: what a header name may contain.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Visible ASCII, space and tab: header values both clients send the same way.
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


def _extra_headers(kwargs: Mapping[str, Any]) -> list[tuple[str, str]] | Decline:
    headers = kwargs.get("extra_headers")
    if not headers:
        return []
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        return Decline("extra_headers", "extra_headers must map strings to strings")
    for name, value in headers.items():
        # LiteLLM has its own answers for these (header-injection errors, encoding errors).
        if not (_HEADER_NAME.fullmatch(name) and _HEADER_VALUE.fullmatch(value)):
            return Decline("extra_headers", "extra_headers with an invalid name or value")
    return list(headers.items())


_deployments: dict[tuple[Any, ...], _native.Deployment] = {}
_MAX_CACHED_DEPLOYMENTS = 1024


def resolve_deployment(
    provider: str, model: str, kwargs: Mapping[str, Any], settings: Settings | None
) -> _native.Deployment | Decline:
    """Resolves credentials and endpoints the way LiteLLM does, with the route's `settings` for
    the provider (None: the route does not serve it)."""
    if settings is None:
        return Decline("provider", f"provider {provider!r}")
    extra_headers = _extra_headers(kwargs)
    if isinstance(extra_headers, Decline):
        return extra_headers
    resolved = settings(model, kwargs)
    if isinstance(resolved, Decline):
        return resolved
    model, arguments = resolved
    api_key = arguments.get("api_key")
    if api_key is not None and not _HEADER_VALUE.fullmatch(api_key):
        return Decline("credentials", "an API key a header cannot carry")
    arguments["extra_headers"] = extra_headers
    key = (provider, model, *sorted((k, repr(v)) for k, v in arguments.items()))
    cached = _deployments.get(key)
    if cached is None:
        if len(_deployments) >= _MAX_CACHED_DEPLOYMENTS:
            _deployments.clear()
        try:
            cached = _native.Deployment(provider, model, **arguments)
        except _native.InvalidRequestError as err:
            # Settings Rust cannot use as given: LiteLLM applies its own rules to them.
            return Decline("deployment", str(err))
        _deployments[key] = cached
    return cached


def request_params(
    kwargs: Mapping[str, Any], ignored: frozenset[str] = frozenset()
) -> dict[str, Any] | Decline:
    """The kwargs that shape the provider request (None-valued ones dropped, as LiteLLM does);
    LiteLLM options that change its own behaviour decline."""
    params: dict[str, Any] = {}
    for name, value in kwargs.items():
        if value is None or name in DEPLOYMENT_KWARGS or name in BOOKKEEPING_KWARGS:
            continue
        if name in ignored:
            continue
        if name in BEHAVIOUR_KWARGS:
            if value:
                return behaviour_decline(name)
            continue
        params[name] = value
    stop = params.get("stop")
    if isinstance(stop, list) and len(stop) > 4:
        import litellm

        if not litellm.disable_stop_sequence_limit:
            # LiteLLM's `validate_openai_optional_params`: providers take four at most.
            params["stop"] = stop[:4]
    return params


def behaviour_decline(name: str) -> Decline:
    """The decline of a call that sets a LiteLLM option changing LiteLLM's own behaviour."""
    code = name if name in _OWN_DECLINE_CODES else "litellm_option"
    return Decline(code, f"kwarg {name!r}")


def non_finite_param(params: Mapping[str, Any]) -> str | None:
    """The name of a param holding NaN or an infinity (JSON has neither), if any."""

    def non_finite(value: Any) -> bool:
        if isinstance(value, float):
            return not math.isfinite(value)
        if isinstance(value, Mapping):
            return any(non_finite(item) for item in value.values())
        if isinstance(value, (list, tuple)):
            return any(non_finite(item) for item in value)
        return False

    return next((name for name, value in params.items() if non_finite(value)), None)


@dataclass(frozen=True, slots=True)
class StreamRoute(Route):
    """An admitted `stream=True` chat call."""

    # `stream_options` as the caller gave it (forwarded as is), or None.
    stream_options: dict[str, Any] | None
    # The proxy added `include_usage` itself and drops the usage chunk it causes.
    strip_usage: bool


_STREAM_KWARGS = frozenset({"stream", "stream_options"})


def _stream_options(kwargs: Mapping[str, Any]) -> dict[str, Any] | Decline | None:
    options = kwargs.get("stream_options")
    if options is None:
        return None
    if (
        not isinstance(options, dict)
        or set(options) - {"include_usage"}
        or not isinstance(options.get("include_usage", False), bool)
    ):
        return Decline("stream", "stream_options other than include_usage")
    return options


def _structured_output_decline(
    provider: str, model: str, params: Mapping[str, Any]
) -> Decline | None:
    """`json_schema` takes a form per model in LiteLLM for some providers: served when it is the
    form Rust builds for the provider (its table entry says)."""
    response_format = params.get("response_format")
    served = PROVIDERS[provider].chat.json_schema
    if served is None or not isinstance(response_format, Mapping):
        return None
    if response_format.get("type") != "json_schema" or served(model):
        return None
    return Decline("response_format", f"json_schema for this {provider} model")


def route(kwargs: Mapping[str, Any]) -> Route | Decline:
    """Decides whether a call's kwargs (already without `rust`) can take the fast path."""
    import litellm

    if litellm.modify_params:
        # LiteLLM then rewrites messages per provider (placeholders, merged or added turns).
        return Decline("litellm_option", "litellm.modify_params")
    split = provider_and_model(kwargs, None, "model {model!r} has no supported provider prefix")
    if isinstance(split, Decline):
        return split
    provider, upstream_model = split
    entry = PROVIDERS.get(provider)

    streamed = kwargs.get("stream") is True
    if streamed:
        if entry is None or not entry.chat.streams:
            return Decline("stream", f"streaming from {provider}")
        if litellm.post_call_rules:
            return Decline("stream", "post_call_rules see every streamed chunk in Python")
    stream_options = _stream_options(kwargs) if streamed else None
    if isinstance(stream_options, Decline):
        return stream_options
    params = request_params(kwargs, _STREAM_KWARGS if streamed else frozenset())
    if isinstance(params, Decline):
        return params
    chat = entry.chat if entry is not None else None
    routed: Route | Decline
    if streamed:
        routed = _route(
            StreamRoute,
            provider,
            upstream_model,
            kwargs,
            chat,
            params,
            stream_options=stream_options,
            strip_usage=kwargs.get("_litellm_strip_stream_usage") is True,
        )
    else:
        routed = _route(Route, provider, upstream_model, kwargs, chat, params)
    if isinstance(routed, Decline):
        return routed
    structured = _structured_output_decline(provider, routed.deployment.model, params)
    return routed if structured is None else structured


RouteT = TypeVar("RouteT", bound=Route)


def _route(
    kind: type[RouteT],
    provider: str,
    model: str,
    kwargs: Mapping[str, Any],
    served: Served | None,
    params: dict[str, Any],
    **fields: Any,
) -> RouteT | Decline:
    """The route of a call the provider's entry `served` serves (None: the route does not
    serve the provider): its timeout, and its deployment resolved as LiteLLM resolves it. The
    route names the model as LiteLLM does (e.g. `converse/<id>`): logging and errors use it."""
    timeout = call_timeout(kwargs)
    if isinstance(timeout, Decline):
        return timeout
    settings = served.settings if served is not None else None
    deployment = resolve_deployment(provider, model, kwargs, settings)
    if isinstance(deployment, Decline):
        return deployment
    assert served is not None  # resolved with its settings
    return kind(
        deployment=deployment,
        provider=provider,
        model=model,
        params=params,
        timeout=timeout,
        errors=served.errors,
        **fields,
    )


@dataclass(frozen=True, slots=True)
class MessagesRoute(Route):
    """An admitted `/v1/messages` call (`litellm.anthropic_messages`)."""

    # The caller's `model`: LiteLLM's messages handler maps errors with it.
    requested_model: str
    stream: bool
    # The body fields in LiteLLM's order (the large ones still the caller's objects).
    fields: tuple[tuple[str, Any], ...]
    headers: tuple[tuple[str, str], ...]
    # What LiteLLM passes as its optional params (logging reads them).
    optional_params: dict[str, Any]

    @property
    def error_model(self) -> str:
        # LiteLLM's messages handler names the caller's model in its errors.
        return self.requested_model


# Transcription kwargs the Rust path serves; every other non-bookkeeping kwarg declines.
TRANSCRIPTION_PARAMS = frozenset({"language", "prompt", "temperature", "response_format"})
_TRANSCRIPTION_RESPONSE_FORMATS = frozenset({"json", "text"})
# `file` is the audio itself; `user` (the proxy fills it in) never reaches a Converse body, nor
# does `max_tokens` (LiteLLM's transcription takes none: the proxy's v3 rate limiter caps the
# output of every request of a key with a tpm limit that way).
_TRANSCRIPTION_IGNORED = frozenset({"file", "user", "max_tokens"})
_AUDIO_CONTENT_TYPES = {
    "audio/flac": "flac",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/ogg": "ogg",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
}


@dataclass(frozen=True, slots=True)
class AudioSource:
    """Audio as a buffer Rust can hold without copying, plus LiteLLM's view of its format."""

    data: bytes | bytearray | memoryview
    filename: str
    audio_format: str


@dataclass(frozen=True, slots=True)
class TranscriptionRoute(Route):
    """An admitted transcription: a route plus the audio to send."""

    audio: AudioSource

    @property
    def error_model(self) -> str:
        # LiteLLM maps its transcription faults with the model's full name.
        return f"{self.provider}/{self.model}"


def _file_like_content(file: Any) -> bytes | bytearray | memoryview:
    if isinstance(file, io.BytesIO) and file.tell() == 0:
        # The proxy wraps the upload in a BytesIO: getvalue() returns the bytes it was built
        # from, without a copy.
        return file.getvalue()
    content = file.read()
    if hasattr(file, "seek"):
        file.seek(0)
    return content


def audio_source(file: Any) -> AudioSource | Decline:
    """The upload as LiteLLM's `process_audio_file` sees it, without its copies."""
    filename = "audio.wav"
    if isinstance(file, (bytes, bytearray, memoryview)):
        data: Any = file
    elif isinstance(file, tuple) and len(file) >= 2 and not isinstance(file[1], str):
        filename = file[0] or filename
        content = file[1]
        if isinstance(content, (bytes, bytearray, memoryview)):
            data = content
        elif isinstance(content, os.PathLike):
            return Decline("audio_source", "audio given as a path")
        elif hasattr(content, "read"):
            data = _file_like_content(content)
        else:
            return Decline("audio_source", f"audio content of type {type(content).__name__}")
    elif hasattr(file, "read") and not isinstance(file, (str, os.PathLike, tuple)):
        filename = getattr(file, "name", filename)
        data = _file_like_content(file)
    else:
        # Paths and bare strings: LiteLLM's own rules (and refusals) apply.
        return Decline("audio_source", f"audio of type {type(file).__name__}")
    if not isinstance(filename, str):
        return Decline("audio_source", "audio file name is not a string")
    return AudioSource(data=data, filename=filename, audio_format=_audio_format(filename))


def _audio_format(filename: str) -> str:
    """LiteLLM's rule: MIME type from the extension, mapped; else the bare extension."""
    extension = filename.split(".")[-1].lower() if "." in filename else "wav"
    try:
        content_type = compat.get_file_mime_type_from_extension(extension)
    except ValueError:
        content_type = "audio/wav"
    return _AUDIO_CONTENT_TYPES.get(content_type) or (
        filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    )


# The providers each route serves besides chat, from the provider table.
_TRANSCRIBING = [name for name, entry in PROVIDERS.items() if entry.transcription]
_EMBEDDING = [name for name, entry in PROVIDERS.items() if entry.embeddings]


def _served_call(
    kwargs: Mapping[str, Any], route: str, served: list[str], ignored: frozenset[str]
) -> tuple[str, str, dict[str, Any]] | Decline:
    """(provider, upstream model, params) of a call to a route that the providers `served`
    serve, or why it stays on LiteLLM's path."""
    split = provider_and_model(
        kwargs, served, f"{route} in Rust for {', '.join(served)} models only"
    )
    if isinstance(split, Decline):
        return split
    params = request_params(kwargs, ignored=ignored)
    if isinstance(params, Decline):
        return params
    return (*split, params)


def route_transcription(kwargs: Mapping[str, Any]) -> TranscriptionRoute | Decline:
    """Decides whether a `litellm.atranscription` call can take the fast path."""
    call = _served_call(kwargs, "transcription", _TRANSCRIBING, _TRANSCRIPTION_IGNORED)
    if isinstance(call, Decline):
        return call
    provider, upstream_model, params = call
    unsupported = next((name for name in params if name not in TRANSCRIPTION_PARAMS), None)
    if unsupported is not None:
        return Decline("unsupported_param", f"param {unsupported!r}")
    response_format = params.get("response_format")
    if response_format is not None and response_format not in _TRANSCRIPTION_RESPONSE_FORMATS:
        return Decline("response_format", f"response_format {response_format!r}")
    for name in ("language", "prompt"):
        if name in params and not isinstance(params[name], str):
            return Decline("unsupported_param", f"{name} is not a string")
    temperature = params.get("temperature")
    # Through the proxy form values arrive as strings; LiteLLM forwards them as given.
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float, str))
        or (isinstance(temperature, float) and not math.isfinite(temperature))
    ):
        return Decline("unsupported_param", "temperature is not a number or a string")
    audio = audio_source(kwargs.get("file"))
    if isinstance(audio, Decline):
        return audio
    served = PROVIDERS[provider].transcription
    return _route(TranscriptionRoute, provider, upstream_model, kwargs, served, params, audio=audio)


# `input` is the payload itself; `aembedding` is LiteLLM's own async marker.
_EMBEDDING_IGNORED = frozenset({"input", "aembedding"})


@dataclass(frozen=True, slots=True)
class EmbeddingRoute(Route):
    """An admitted embeddings call: a route plus the input to embed."""

    input: Any


def route_embedding(kwargs: Mapping[str, Any]) -> EmbeddingRoute | Decline:
    """Decides whether a `litellm.aembedding` call can take the fast path (the input and
    params are checked in Rust)."""
    call = _served_call(kwargs, "embeddings", _EMBEDDING, _EMBEDDING_IGNORED)
    if isinstance(call, Decline):
        return call
    provider, upstream_model, params = call
    if "encoding_format" not in params and os.environ.get(
        "LITELLM_DEFAULT_EMBEDDING_ENCODING_FORMAT"
    ):
        return Decline("litellm_option", "LITELLM_DEFAULT_EMBEDDING_ENCODING_FORMAT")
    served = PROVIDERS[provider].embeddings
    return _route(
        EmbeddingRoute, provider, upstream_model, kwargs, served, params, input=kwargs.get("input")
    )
