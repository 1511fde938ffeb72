"""Native errors -> the LiteLLM exceptions LiteLLM's own Python path raises for the same fault.

Upstream faults are rebuilt as the provider exception LiteLLM's handler would raise and then
passed through LiteLLM's `exception_type`, so class, status code and message shape match and the
router's retries, fallbacks and cooldowns behave the same.
"""

from __future__ import annotations

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

    return OpenAIError(status_code=status, message=body, headers=httpx.Headers(headers))


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


def to_litellm(err: _native.FastpathError, route: Route) -> Exception:
    if isinstance(err, _native.UpstreamStatusError):
        _message, status, body, headers = err.args
        return _mapped(_provider_error(route.provider, status, body, headers), route)
    if isinstance(err, _native.UpstreamTimeoutError):
        return _mapped(httpx.ReadTimeout(str(err)), route)
    if isinstance(err, _native.UpstreamConnectionError):
        return _mapped(httpx.ConnectError(str(err)), route)
    if isinstance(err, _native.InvalidRequestError):
        return bad_request(err, route)
    return _mapped(_provider_error(route.provider, 500, str(err), {}), route)
