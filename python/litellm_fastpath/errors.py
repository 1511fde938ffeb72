"""Native errors -> the LiteLLM exceptions LiteLLM's own Python path raises for the same fault.

Upstream faults are rebuilt as the provider exception LiteLLM's handler would raise and then
passed through LiteLLM's `exception_type`, so class, status code and message shape match and the
router's retries, fallbacks and cooldowns behave the same.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import litellm
from litellm.litellm_core_utils.exception_mapping_utils import exception_type

from litellm_fastpath import _native

if TYPE_CHECKING:
    from litellm_fastpath.routing import Route


def _provider_error(provider: str, status: int, body: str, headers: dict[str, str]) -> Exception:
    if provider == "anthropic":
        from litellm.llms.anthropic.common_utils import AnthropicError

        return AnthropicError(status_code=status, message=body, headers=httpx.Headers(headers))
    if provider == "bedrock":
        from litellm.llms.bedrock.common_utils import BedrockError

        return BedrockError(status_code=status, message=body, headers=httpx.Headers(headers))
    from litellm.llms.openai.common_utils import OpenAIError

    # The openai SDK's `_make_status_error_from_response` + LiteLLM's OpenAI handler: the message
    # quotes the parsed body, `body` is its "error" object (what exception mapping reads).
    text = body.strip()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
        message = text or f"Error code: {status}"
    else:
        message = f"Error code: {status} - {parsed}"
    data = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    return OpenAIError(
        status_code=status, message=message, headers=httpx.Headers(headers), body=data
    )


def _synthesized(provider: str, message: str) -> Exception:
    """What LiteLLM's HTTP handler raises for a transport failure (no HTTP status)."""
    if provider == "openai":
        from litellm.llms.openai.common_utils import OpenAIError

        return OpenAIError(status_code=500, message="Connection error.")
    if provider == "bedrock":
        # The converse handler lets transport errors through unwrapped.
        return httpx.ConnectError(message, request=httpx.Request("POST", "http://bedrock.invalid"))
    error = _provider_error(provider, 500, message, {})
    error.status_code_is_synthesized = True  # type: ignore[attr-defined]
    return error


def _timeout(route: Route, elapsed: float) -> Exception:
    if route.provider == "openai":
        from litellm.llms.openai.common_utils import OpenAIError

        return _mapped(
            OpenAIError(
                status_code=500,
                message=f"Request timed out. - timeout value={route.timeout}, "
                f"time taken={round(elapsed, 2)} seconds",
            ),
            route,
        )
    passed: Any = route.timeout if route.provider == "anthropic" else httpx.Timeout(route.timeout)
    timeout = litellm.Timeout(
        message=f"Connection timed out. Timeout passed={passed}, "
        f"time taken={round(elapsed, 3)} seconds",
        model="default-model-name",
        llm_provider="litellm-httpx-handler",
    )
    if route.provider == "bedrock":
        return timeout
    return _mapped(_provider_error(route.provider, 408, str(timeout), {}), route)


def _mapped(original: Exception, route: Route) -> Exception:
    try:
        mapped: Any = exception_type(
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
    if isinstance(err, _native.UpstreamStatusError):
        _message, status, body, headers = err.args
        if 300 <= status < 400:
            # LiteLLM follows redirects (sending the credentials along); we never do.
            body = (
                f"the provider answered with a redirect (HTTP {status}); litellm_fastpath does "
                "not follow redirects, so credentials never reach another URL"
            )
        return _mapped(_provider_error(route.provider, status, body, headers), route)
    if isinstance(err, _native.UpstreamTimeoutError):
        return _timeout(route, elapsed)
    if isinstance(err, _native.UpstreamConnectionError):
        return _mapped(_synthesized(route.provider, str(err)), route)
    if isinstance(err, _native.InvalidRequestError):
        return bad_request(err, route)
    if isinstance(err, _native.InvalidResponseError):
        return _invalid_response(err, route)
    return _mapped(_provider_error(route.provider, 500, str(err), {}), route)


def _invalid_response(err: _native.InvalidResponseError, route: Route) -> Exception:
    """A 2xx answer LiteLLM cannot use either: the exception its response handling raises."""
    message, kind = err.args
    if route.provider == "openai":
        # LiteLLM's OpenAI handler: "Invalid response object" as a 500 from the provider.
        return _mapped(_provider_error("openai", 500, message, {}), route)
    if route.provider == "bedrock" and kind == "unparsable":
        # LiteLLM's Converse handler: a BedrockError 422 "Error converting to valid response".
        return _mapped(
            _provider_error(
                "bedrock", 422, f"Error converting to valid response block={message}", {}
            ),
            route,
        )
    # Anthropic's unparsable bodies and every missing field: LiteLLM fails while reading the
    # answer, which its exception mapping reports as an APIConnectionError (500).
    return litellm.APIConnectionError(
        message=f"{_PROVIDER_PREFIX[route.provider]} - {message}",
        llm_provider=route.provider,
        model=route.model,
    )


_PROVIDER_PREFIX = {
    "anthropic": "AnthropicException",
    "bedrock": "BedrockException",
    "openai": "OpenAIException",
}
