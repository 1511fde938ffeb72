"""litellm-fastpath: LiteLLM calls for `rust: true` models served end to end in Rust.

Proxy: add `callbacks: ["litellm_fastpath.proxy.accelerator"]` and `rust: true` to a model's
`litellm_params`. SDK: `litellm_fastpath.install()`, then `litellm.acompletion(..., rust=True)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litellm_fastpath._native import __version__

if TYPE_CHECKING:
    from litellm_fastpath.compat import UntestedLiteLLMWarning
    from litellm_fastpath.declines import decline_counts, reset_decline_counts
    from litellm_fastpath.integration import install, is_installed, uninstall
    from litellm_fastpath.realtime import realtime_pool_counts
    from litellm_fastpath.warm import warm_counts

__all__ = [
    "UntestedLiteLLMWarning",
    "__version__",
    "decline_counts",
    "install",
    "is_installed",
    "realtime_pool_counts",
    "reset_decline_counts",
    "uninstall",
    "warm_counts",
]

# Importing LiteLLM takes seconds; load it when the API is first used, not on import.
_LAZY = {
    "install": "integration",
    "is_installed": "integration",
    "uninstall": "integration",
    "decline_counts": "declines",
    "reset_decline_counts": "declines",
    "UntestedLiteLLMWarning": "compat",
    "realtime_pool_counts": "realtime",
    "warm_counts": "warm",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'litellm_fastpath' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"litellm_fastpath.{module}"), name)
