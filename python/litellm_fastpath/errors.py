"""Native errors -> the LiteLLM exceptions LiteLLM's own Python path raises for the same fault.

Upstream faults are rebuilt as the provider exception LiteLLM's handler would raise and then
passed through LiteLLM's `exception_type`, so class, status code and message shape match and the
router's retries, fallbacks and cooldowns behave the same.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import litellm

from litellm_fastpath import _native, compat
from litellm_fastpath.routing import EmbeddingRoute, MessagesRoute, Route, TranscriptionRoute


class _ProviderErrors:
    """How LiteLLM's handler for one provider reports each kind of fault (one subclass each)."""

    prefix = ""

    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        raise NotImplementedError

    def upstream_status(
        self, status: int, body: str, headers: dict[str, str], route: Route
    ) -> Exception:
        """What a provider's error status becomes, once LiteLLM's mapping saw it."""
        return _mapped(self.status_error(status, body, headers), route)

    def transport_error(self, message: str) -> Exception:
        """What LiteLLM's HTTP handler raises for a transport failure (no HTTP status)."""
        error = self.status_error(500, message, {})
        error.status_code_is_synthesized = True  # type: ignore[attr-defined]
        return error

    def timeout(self, route: Route, elapsed: float) -> Exception:
        return _mapped(
            self.status_error(408, str(_httpx_timeout(route.timeout, elapsed)), {}), route
        )

    def invalid_response(self, message: str, kind: str, route: Route) -> Exception:
        """A 2xx answer LiteLLM cannot use: it fails while reading it, which its exception
        mapping reports as an APIConnectionError (500)."""
        return litellm.APIConnectionError(
            message=f"{self.prefix} - {message}", llm_provider=route.provider, model=route.model
        )


def _httpx_timeout(passed: Any, elapsed: float) -> Exception:
    return litellm.Timeout(
        message=f"Connection timed out. Timeout passed={passed}, "
        f"time taken={round(elapsed, 3)} seconds",
        model="default-model-name",
        llm_provider="litellm-httpx-handler",
    )


def _sdk_status_message(status: int, body: str) -> tuple[str, Any]:
    """The openai SDK's `_make_status_error_from_response`: its message, and the parsed body."""
    text = body.strip()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        return text or f"Error code: {status}", text
    return f"Error code: {status} - {parsed}", parsed


class _OpenAIErrors(_ProviderErrors):
    prefix = "OpenAIException"

    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        # LiteLLM's OpenAI chat handler: the SDK's message, and `body` its "error" object (what
        # LiteLLM's mapping reads).
        message, parsed = _sdk_status_message(status, body)
        data = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        return compat.OpenAIError(
            status_code=status, message=message, headers=httpx.Headers(headers), body=data
        )

    def transport_error(self, message: str) -> Exception:
        return compat.OpenAIError(status_code=500, message="Connection error.")

    def timeout(self, route: Route, elapsed: float) -> Exception:
        return _mapped(
            compat.OpenAIError(
                status_code=500,
                message=f"Request timed out. - timeout value={route.timeout}, "
                f"time taken={round(elapsed, 2)} seconds",
            ),
            route,
        )

    def invalid_response(self, message: str, kind: str, route: Route) -> Exception:
        # LiteLLM's OpenAI handler: "Invalid response object" as a 500 from the provider.
        return _mapped(self.status_error(500, message, {}), route)


class _AnthropicErrors(_ProviderErrors):
    prefix = "AnthropicException"

    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        return compat.AnthropicError(
            status_code=status, message=body, headers=httpx.Headers(headers)
        )


class _BedrockErrors(_ProviderErrors):
    prefix = "BedrockException"

    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        return compat.BedrockError(status_code=status, message=body, headers=httpx.Headers(headers))

    def transport_error(self, message: str) -> Exception:
        # The converse handler lets transport errors through unwrapped.
        return httpx.ConnectError(message, request=httpx.Request("POST", "http://bedrock.invalid"))

    def timeout(self, route: Route, elapsed: float) -> Exception:
        # Raised by LiteLLM's HTTP handler itself, not mapped.
        return _httpx_timeout(httpx.Timeout(route.timeout), elapsed)

    def invalid_response(self, message: str, kind: str, route: Route) -> Exception:
        if kind == "unparsable":
            # LiteLLM's Converse handler: a BedrockError 422 "Error converting to valid response".
            block = f"Error converting to valid response block={message}"
            return _mapped(self.status_error(422, block, {}), route)
        return super().invalid_response(message, kind, route)


class _OpenAIEmbeddingErrors(_OpenAIErrors):
    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        # LiteLLM's embedding handler re-raises the SDK's error by its message alone.
        message, _parsed = _sdk_status_message(status, body)
        return compat.OpenAIError(
            status_code=status, message=message, headers=httpx.Headers(headers)
        )

    def timeout(self, route: Route, elapsed: float) -> Exception:
        return _mapped(compat.OpenAIError(status_code=500, message="Request timed out."), route)


class _BedrockEmbeddingErrors(_BedrockErrors):
    def timeout(self, route: Route, elapsed: float) -> Exception:
        # LiteLLM's HTTP handler raises it; Titan's caller passed an `httpx.Timeout`, Cohere's
        # the number.
        passed = route.timeout if "cohere" in route.model else httpx.Timeout(route.timeout)
        return _httpx_timeout(passed, elapsed)

    def invalid_response(self, message: str, kind: str, route: Route) -> Exception:
        # The embedding handler has no Converse-style 422: reading fails as a connection error.
        return _ProviderErrors.invalid_response(self, message, kind, route)


class _BedrockMessagesErrors(_BedrockErrors):
    """LiteLLM's `/v1/messages` handler maps every fault through `exception_type`, unlike its
    Converse handler."""

    def transport_error(self, message: str) -> Exception:
        return _ProviderErrors.transport_error(self, message)

    def timeout(self, route: Route, elapsed: float) -> Exception:
        return _ProviderErrors.timeout(self, route, elapsed)

    def invalid_response(self, message: str, kind: str, route: Route) -> Exception:
        return _ProviderErrors.invalid_response(self, message, kind, route)


class _BedrockTranscriptionErrors(_ProviderErrors):
    """LiteLLM serves Bedrock transcriptions on its own Rust route (`litellm.rust_bridge`): a
    provider status becomes an `APIError` of that status, whatever it is; any other fault a
    `RuntimeError`, which its mapping (given the full model name) reports as an
    `APIConnectionError`."""

    def upstream_status(
        self, status: int, body: str, headers: dict[str, str], route: Route
    ) -> Exception:
        return litellm.APIError(
            status_code=status or 500,
            message=f"litellm rust transcription: {body}",
            llm_provider=route.provider,
            # Its route names the model without the provider (`to_litellm` added it).
            model=route.model.removeprefix(f"{route.provider}/"),
        )

    def transport_error(self, message: str) -> Exception:
        return RuntimeError(f"upstream network error: {message}")

    def timeout(self, route: Route, elapsed: float) -> Exception:
        # Its HTTP client reports a request left unanswered as it reports a lost connection
        # (worded so that LiteLLM's mapping does not read a timeout into it either).
        message = f"error sending request: no answer after {round(elapsed, 3)} seconds"
        return _mapped(self.transport_error(message), route)

    def invalid_response(self, message: str, kind: str, route: Route) -> Exception:
        return _mapped(RuntimeError(f"invalid response: {message}"), route)


# One entry per provider the fast path serves (the Rust side has one folder each).
_ERRORS: dict[str, _ProviderErrors] = {
    "openai": _OpenAIErrors(),
    "anthropic": _AnthropicErrors(),
    "bedrock": _BedrockErrors(),
}
# `/v1/messages` handlers.
_MESSAGES_ERRORS: dict[str, _ProviderErrors] = {
    "anthropic": _AnthropicErrors(),
    "bedrock": _BedrockMessagesErrors(),
}
_TRANSCRIPTION_ERRORS: dict[str, _ProviderErrors] = {"bedrock": _BedrockTranscriptionErrors()}
# Embedding handlers that report faults in their own way.
_EMBEDDING_ERRORS: dict[str, _ProviderErrors] = {
    "openai": _OpenAIEmbeddingErrors(),
    "bedrock": _BedrockEmbeddingErrors(),
}


def _mapped(original: Exception, route: Route) -> Exception:
    try:
        mapped: Any = compat.exception_type(
            model=route.model,
            original_exception=original,
            custom_llm_provider=route.provider,
        )
    except Exception as raised:  # exception_type raises the mapped exception
        return raised
    return mapped if isinstance(mapped, Exception) else original


def bad_request(err: _native.FastpathError, route: Route) -> Exception:
    return litellm.BadRequestError(
        message=f"litellm_fastpath: invalid request: {err}",
        model=route.model,
        llm_provider=route.provider,
    )


def invalid_param(name: str, why: str, route: Route) -> Exception:
    return litellm.BadRequestError(
        message=f"litellm_fastpath: invalid request: {name} {why}",
        model=route.model,
        llm_provider=route.provider,
    )


def to_litellm(err: _native.FastpathError, route: Route, elapsed: float = 0.0) -> Exception:
    registry = _EMBEDDING_ERRORS if isinstance(route, EmbeddingRoute) else _ERRORS
    if isinstance(route, TranscriptionRoute):
        registry = _TRANSCRIPTION_ERRORS
        # LiteLLM maps its transcription faults with the model's full name.
        route = dataclasses.replace(route, model=f"{route.provider}/{route.model}")
    elif isinstance(route, MessagesRoute):
        registry = _MESSAGES_ERRORS
        # LiteLLM's messages handler names the caller's model in its errors.
        route = dataclasses.replace(route, model=route.requested_model)
    errors = registry[route.provider]
    if isinstance(err, _native.UpstreamStatusError):
        _message, answer = err.args
        status, body, headers = answer.status, answer.body, answer.headers
        if 300 <= status < 400:
            # LiteLLM follows redirects (sending the credentials along); we never do.
            body = (
                f"the provider answered with a redirect (HTTP {status}); litellm_fastpath does "
                "not follow redirects, so credentials never reach another URL"
            )
        return errors.upstream_status(status, body, headers, route)
    if isinstance(err, _native.UpstreamTimeoutError):
        return errors.timeout(route, elapsed)
    if isinstance(err, _native.UpstreamConnectionError):
        return _mapped(errors.transport_error(str(err)), route)
    if isinstance(err, _native.InvalidRequestError):
        return bad_request(err, route)
    if isinstance(err, _native.InvalidResponseError):
        message, kind = err.args
        return errors.invalid_response(message, kind, route)
    return errors.upstream_status(500, str(err), {}, route)


# botocore's Bedrock model: the HTTP status of each stream exception (others: 400).
_BEDROCK_STREAM_STATUS = {
    "internalServerException": 500,
    "modelStreamErrorException": 424,
    "validationException": 400,
    "throttlingException": 429,
    "serviceUnavailableException": 503,
    "modelTimeoutException": 408,
}


def stream_failure(err: BaseException, route: Route) -> BaseException:
    """A failure inside a stream, as the exception LiteLLM's OpenAI stream would meet there
    (before its stream wrapper maps it: the wrapper's own handling then applies)."""
    request = httpx.Request("POST", "http://upstream.invalid")
    if isinstance(err, _native.UpstreamStreamError):
        message, error = err.args
        if isinstance(error, dict) and error.get("type") == "repetition":
            return litellm.InternalServerError(message=message, model="", llm_provider="")
        if route.provider == "bedrock" and isinstance(error, dict):
            # LiteLLM's event-stream decoder: the status botocore models for the exception.
            kind = error.get("exception_type", "")
            status = _BEDROCK_STREAM_STATUS.get(kind, 400)
            return compat.BedrockError(status_code=status, message=f"{kind} {error.get('payload')}")
        if route.provider == "anthropic":
            # LiteLLM's Anthropic parser: the error's message, else the whole event.
            detail = error.get("error") if isinstance(error, dict) else None
            text = detail.get("message") if isinstance(detail, dict) else None
            return compat.AnthropicError(status_code=500, message=text or str(error))
        # The openai SDK raises APIError for an event with an `error` object.
        text = error.get("message") if isinstance(error, dict) else None
        if not isinstance(text, str) or not text:
            text = "An error occurred during streaming"
        import openai

        return openai.APIError(message=text, request=request, body=error)
    if isinstance(err, _native.UpstreamTimeoutError):
        return httpx.ReadTimeout("Timeout on reading data from socket", request=request)
    if isinstance(err, _native.UpstreamConnectionError):
        return httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body", request=request
        )
    if isinstance(err, _native.InvalidResponseError):
        message, kind = err.args
        if kind == "truncated":
            # LiteLLM's event-stream decoder reports a cut-off message as a 502.
            return compat.BedrockError(status_code=502, message=message)
        return ValueError(message)
    return err
