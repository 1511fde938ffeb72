"""Native errors -> the LiteLLM exceptions LiteLLM's own Python path raises for the same fault.

Upstream faults are rebuilt as the provider exception LiteLLM's handler would raise and then
passed through LiteLLM's `exception_type`, so class, status code and message shape match and the
router's retries, fallbacks and cooldowns behave the same. How each of LiteLLM's handlers
reports a fault is a `ProviderErrors` here; the provider table (`providers.py`) says which one
serves each provider and route, and an admitted call carries it (`Call.errors`).

LiteLLM is imported where an exception is built, not with this module: routing imports it
through the provider table, and must not load LiteLLM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from litellm_fastpath import _native, compat


@dataclass(frozen=True, slots=True)
class Call:
    """An admitted call as mapping its faults reads it (`routing.Route` is one): LiteLLM's names
    for its provider and model, its timeout, and how LiteLLM's handler for its provider and
    route reports faults (from the provider table)."""

    provider: str
    model: str
    timeout: float
    errors: ProviderErrors

    @property
    def error_model(self) -> str:
        """LiteLLM's name for the model in this route's errors."""
        return self.model


class ProviderErrors:
    """How LiteLLM's handler for one provider and route reports each kind of fault (a subclass
    per handler that reports some fault its own way)."""

    prefix = ""

    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        raise NotImplementedError

    def upstream_status(
        self, status: int, body: str, headers: dict[str, str], call: Call
    ) -> Exception:
        """What a provider's error status becomes, once LiteLLM's mapping saw it."""
        return mapped(self.status_error(status, body, headers), call)

    def transport_error(self, message: str) -> Exception:
        """What LiteLLM's HTTP handler raises for a transport failure (no HTTP status)."""
        error = self.status_error(500, message, {})
        error.status_code_is_synthesized = True  # type: ignore[attr-defined]
        return error

    def timeout(self, call: Call, elapsed: float) -> Exception:
        return mapped(self.status_error(408, str(httpx_timeout(call.timeout, elapsed)), {}), call)

    def invalid_response(self, message: str, kind: str, call: Call) -> Exception:
        """A 2xx answer LiteLLM cannot use: it fails while reading it, which its exception
        mapping reports as an APIConnectionError (500)."""
        import litellm

        return litellm.APIConnectionError(
            message=f"{self.prefix} - {message}",
            llm_provider=call.provider,
            model=call.error_model,
        )

    def stream_event(self, error: Any) -> BaseException:
        """What reading the provider's stream raises for an error event in it. LiteLLM's
        OpenAI-compatible streams: the openai SDK raises `APIError` for an `error` object."""
        text = error.get("message") if isinstance(error, dict) else None
        if not isinstance(text, str) or not text:
            text = "An error occurred during streaming"
        import openai

        return openai.APIError(message=text, request=_STREAM_REQUEST, body=error)


_STREAM_REQUEST = httpx.Request("POST", "http://upstream.invalid")


def httpx_timeout(passed: Any, elapsed: float) -> Exception:
    """LiteLLM's HTTP handler's timeout."""
    import litellm

    return litellm.Timeout(
        message=f"Connection timed out. Timeout passed={passed}, "
        f"time taken={round(elapsed, 3)} seconds",
        model="default-model-name",
        llm_provider="litellm-httpx-handler",
    )


def mapped(original: Exception, call: Call) -> Exception:
    """`original` as LiteLLM's `exception_type` maps it for this call."""
    try:
        result: Any = compat.exception_type(
            model=call.error_model,
            original_exception=original,
            custom_llm_provider=call.provider,
        )
    except Exception as raised:  # exception_type raises the mapped exception
        return raised
    return result if isinstance(result, Exception) else original


def _sdk_status_message(status: int, body: str) -> tuple[str, Any]:
    """The openai SDK's `_make_status_error_from_response`: its message, and the parsed body."""
    text = body.strip()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        return text or f"Error code: {status}", text
    return f"Error code: {status} - {parsed}", parsed


class OpenAIErrors(ProviderErrors):
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

    def timeout(self, call: Call, elapsed: float) -> Exception:
        return mapped(
            compat.OpenAIError(
                status_code=500,
                message=f"Request timed out. - timeout value={call.timeout}, "
                f"time taken={round(elapsed, 2)} seconds",
            ),
            call,
        )

    def invalid_response(self, message: str, kind: str, call: Call) -> Exception:
        # LiteLLM's OpenAI handler: "Invalid response object" as a 500 from the provider.
        return mapped(self.status_error(500, message, {}), call)


class OpenAIEmbeddingErrors(OpenAIErrors):
    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        # LiteLLM's embedding handler re-raises the SDK's error by its message alone.
        message, _parsed = _sdk_status_message(status, body)
        return compat.OpenAIError(
            status_code=status, message=message, headers=httpx.Headers(headers)
        )

    def timeout(self, call: Call, elapsed: float) -> Exception:
        return mapped(compat.OpenAIError(status_code=500, message="Request timed out."), call)


class AnthropicErrors(ProviderErrors):
    prefix = "AnthropicException"

    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        return compat.AnthropicError(
            status_code=status, message=body, headers=httpx.Headers(headers)
        )

    def stream_event(self, error: Any) -> BaseException:
        # LiteLLM's Anthropic parser: the error's message, else the whole event.
        detail = error.get("error") if isinstance(error, dict) else None
        text = detail.get("message") if isinstance(detail, dict) else None
        return compat.AnthropicError(status_code=500, message=text or str(error))


# botocore's Bedrock model: the HTTP status of each stream exception (others: 400).
_BEDROCK_STREAM_STATUS = {
    "internalServerException": 500,
    "modelStreamErrorException": 424,
    "validationException": 400,
    "throttlingException": 429,
    "serviceUnavailableException": 503,
    "modelTimeoutException": 408,
}


class BedrockErrors(ProviderErrors):
    prefix = "BedrockException"

    def status_error(self, status: int, body: str, headers: dict[str, str]) -> Exception:
        return compat.BedrockError(status_code=status, message=body, headers=httpx.Headers(headers))

    def transport_error(self, message: str) -> Exception:
        # The converse handler lets transport errors through unwrapped.
        return httpx.ConnectError(message, request=httpx.Request("POST", "http://bedrock.invalid"))

    def timeout(self, call: Call, elapsed: float) -> Exception:
        # Raised by LiteLLM's HTTP handler itself, not mapped.
        return httpx_timeout(httpx.Timeout(call.timeout), elapsed)

    def invalid_response(self, message: str, kind: str, call: Call) -> Exception:
        if kind == "unparsable":
            # LiteLLM's Converse handler: a BedrockError 422 "Error converting to valid response".
            block = f"Error converting to valid response block={message}"
            return mapped(self.status_error(422, block, {}), call)
        return super().invalid_response(message, kind, call)

    def stream_event(self, error: Any) -> BaseException:
        if not isinstance(error, dict):
            return super().stream_event(error)
        # LiteLLM's event-stream decoder: the status botocore models for the exception.
        kind = error.get("exception_type", "")
        status = _BEDROCK_STREAM_STATUS.get(kind, 400)
        return compat.BedrockError(status_code=status, message=f"{kind} {error.get('payload')}")


class BedrockEmbeddingErrors(BedrockErrors):
    def timeout(self, call: Call, elapsed: float) -> Exception:
        # LiteLLM's HTTP handler raises it; Titan's caller passed an `httpx.Timeout`, Cohere's
        # the number.
        passed = call.timeout if "cohere" in call.model else httpx.Timeout(call.timeout)
        return httpx_timeout(passed, elapsed)

    def invalid_response(self, message: str, kind: str, call: Call) -> Exception:
        # The embedding handler has no Converse-style 422: reading fails as a connection error.
        return ProviderErrors.invalid_response(self, message, kind, call)


class BedrockMessagesErrors(BedrockErrors):
    """LiteLLM's `/v1/messages` handler maps every fault through `exception_type`, unlike its
    Converse handler."""

    def transport_error(self, message: str) -> Exception:
        return ProviderErrors.transport_error(self, message)

    def timeout(self, call: Call, elapsed: float) -> Exception:
        return ProviderErrors.timeout(self, call, elapsed)

    def invalid_response(self, message: str, kind: str, call: Call) -> Exception:
        return ProviderErrors.invalid_response(self, message, kind, call)


class BedrockTranscriptionErrors(ProviderErrors):
    """LiteLLM serves Bedrock transcriptions on its own Rust route (`litellm.rust_bridge`): a
    provider status becomes an `APIError` of that status, whatever it is; any other fault a
    `RuntimeError`, which its mapping (given the full model name) reports as an
    `APIConnectionError`."""

    def upstream_status(
        self, status: int, body: str, headers: dict[str, str], call: Call
    ) -> Exception:
        import litellm

        return litellm.APIError(
            status_code=status or 500,
            message=f"litellm rust transcription: {body}",
            llm_provider=call.provider,
            # Its route names the model without the provider (its mapping's name has it).
            model=call.model,
        )

    def transport_error(self, message: str) -> Exception:
        return RuntimeError(f"upstream network error: {message}")

    def timeout(self, call: Call, elapsed: float) -> Exception:
        # Its HTTP client reports a request left unanswered as it reports a lost connection
        # (worded so that LiteLLM's mapping does not read a timeout into it either).
        message = f"error sending request: no answer after {round(elapsed, 3)} seconds"
        return mapped(self.transport_error(message), call)

    def invalid_response(self, message: str, kind: str, call: Call) -> Exception:
        return mapped(RuntimeError(f"invalid response: {message}"), call)


def _bad_request(message: str, provider: str, model: str) -> Exception:
    import litellm

    return litellm.BadRequestError(
        message=f"litellm_fastpath: invalid request: {message}", model=model, llm_provider=provider
    )


def bad_request(err: _native.FastpathError, call: Call) -> Exception:
    """A request Rust refused before any I/O."""
    return _bad_request(str(err), call.provider, call.model)


def invalid_param(name: str, why: str, call: Call) -> Exception:
    return _bad_request(f"{name} {why}", call.provider, call.model)


def to_litellm(err: _native.FastpathError, call: Call, elapsed: float = 0.0) -> Exception:
    errors = call.errors
    if isinstance(err, _native.UpstreamStatusError):
        _message, answer = err.args
        status, body, headers = answer.status, answer.body, answer.headers
        if 300 <= status < 400:
            # LiteLLM follows redirects (sending the credentials along); we never do.
            body = (
                f"the provider answered with a redirect (HTTP {status}); litellm_fastpath does "
                "not follow redirects, so credentials never reach another URL"
            )
        return errors.upstream_status(status, body, headers, call)
    if isinstance(err, _native.UpstreamTimeoutError):
        return errors.timeout(call, elapsed)
    if isinstance(err, _native.UpstreamConnectionError):
        return mapped(errors.transport_error(str(err)), call)
    if isinstance(err, _native.InvalidRequestError):
        return _bad_request(str(err), call.provider, call.error_model)
    if isinstance(err, _native.InvalidResponseError):
        message, kind = err.args
        return errors.invalid_response(message, kind, call)
    return errors.upstream_status(500, str(err), {}, call)


def stream_failure(err: BaseException, call: Call) -> BaseException:
    """A failure inside a stream, as the exception LiteLLM's stream would meet there (before its
    stream wrapper maps it: the wrapper's own handling then applies)."""
    if isinstance(err, _native.UpstreamStreamError):
        message, error = err.args
        if isinstance(error, dict) and error.get("type") == "repetition":
            import litellm

            return litellm.InternalServerError(message=message, model="", llm_provider="")
        return call.errors.stream_event(error)
    if isinstance(err, _native.UpstreamTimeoutError):
        return httpx.ReadTimeout("Timeout on reading data from socket", request=_STREAM_REQUEST)
    if isinstance(err, _native.UpstreamConnectionError):
        return httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body",
            request=_STREAM_REQUEST,
        )
    if isinstance(err, _native.InvalidResponseError):
        message, kind = err.args
        if kind == "truncated":
            # LiteLLM's event-stream decoder reports a cut-off message as a 502.
            return compat.BedrockError(status_code=502, message=message)
        return ValueError(message)
    return err
