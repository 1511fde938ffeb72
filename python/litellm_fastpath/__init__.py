"""litellm-fastpath: LiteLLM calls for `rust: true` models served end to end in Rust.

Proxy: add `callbacks: ["litellm_fastpath.proxy.accelerator"]` and `rust: true` to a model's
`litellm_params`. SDK: `litellm_fastpath.install()`, then `litellm.acompletion(..., rust=True)`.
"""

from litellm_fastpath._native import __version__
from litellm_fastpath.integration import install, is_installed, uninstall
from litellm_fastpath.routing import decline_counts, reset_decline_counts

__all__ = [
    "__version__",
    "decline_counts",
    "install",
    "is_installed",
    "reset_decline_counts",
    "uninstall",
]
