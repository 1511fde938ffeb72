"""The LiteLLM proxy hook: `callbacks: ["litellm_fastpath.proxy.accelerator"]`.

Importing this module installs the fast path. The `accelerator` callback makes sure a caller
cannot choose the path: a `rust` field in a request body is removed before routing, so only the
deployment's configured `rust: true` counts.
"""

from __future__ import annotations

from typing import Any

from litellm_fastpath import compat, lane, metrics, realtime, warm
from litellm_fastpath.integration import install


class FastpathAccelerator(compat.CustomLogger):
    """Proxy callback that keeps the fast path switch in the operator's hands."""

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        await lane.note_request(user_api_key_dict, data, call_type)
        data.pop("rust", None)
        for nested in ("litellm_params", "metadata", "litellm_metadata"):
            inner = data.get(nested)
            if isinstance(inner, dict):
                inner.pop("rust", None)
        return data


install()
if compat.usable():
    realtime.install()
    warm.install()
accelerator = FastpathAccelerator()
# With LiteLLM's prometheus callback on, our metrics join its /metrics.
metrics.enable(compat.config_litellm_settings())
# With `fastpath_lane: true`, the lane takes the proxy's socket now, before uvicorn binds it.
lane.take_over()
