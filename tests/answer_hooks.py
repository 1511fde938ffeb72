"""Proxy callbacks that change answers after the provider call, as an operator's guardrail or
post-processor does: `callbacks: ["tests.answer_hooks.deployment_stamp"]` (LiteLLM's
per-deployment success hook, on answers) or `["tests.answer_hooks.stream_stamp"]` (the
proxy's streaming iterator hook, on streams). Each appends `STAMP` to what the client gets."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from litellm.types.utils import ModelResponse, ModelResponseStream

STAMP = " [stamped]"


class DeploymentStamp(CustomLogger):
    async def async_post_call_success_deployment_hook(
        self, request_data: dict, response: Any, call_type: Any
    ) -> Any:
        if isinstance(response, ModelResponse):
            message = response.choices[0].message  # type: ignore[union-attr]
            message.content = (message.content or "") + STAMP
        return response


class StreamStamp(CustomLogger):
    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict
    ) -> AsyncGenerator[Any, None]:
        async for chunk in response:
            if isinstance(chunk, ModelResponseStream) and chunk.choices:
                delta = chunk.choices[0].delta
                if delta.content:
                    delta.content += STAMP
            yield chunk


deployment_stamp = DeploymentStamp()
stream_stamp = StreamStamp()
