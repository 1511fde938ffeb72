"""The CustomLogger hooks LiteLLM runs inside the functions the fast path takes over, and when a
configured callback's override of one leaves a call alone. The fast path runs none of them: a
call that meets a hook which may act goes to LiteLLM's Python path (declined before any I/O).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import litellm

from litellm_fastpath import compat
from litellm_fastpath.declines import Decline

# What LiteLLM's `client` wrapper of `acompletion`, `aembedding` and `atranscription` runs per
# deployment: before the provider call, on its answer, on each failed attempt.
CLIENT_HOOKS = (
    "async_pre_call_deployment_hook",
    "async_post_call_success_deployment_hook",
    "async_post_call_failure_deployment_hook",
)

# When a callback's hooks leave a call alone, given the call's kwargs.
Idle = Callable[[Mapping[str, Any]], bool]


def overrides(callback: Any, name: str) -> bool:
    """Whether `callback` replaces CustomLogger's `name` (on its class, or on itself)."""
    if name in getattr(callback, "__dict__", {}):
        return True
    base = getattr(compat.CustomLogger, name, None)
    own = getattr(type(callback), name, base)
    return getattr(own, "__func__", own) is not getattr(base, "__func__", base)


def acting(
    kwargs: Mapping[str, Any],
    names: tuple[str, ...],
    idle: Callable[[Any], Idle | None],
) -> str | None:
    """The class name of the first configured callback replacing one of `names` that may act
    on this call (None: none may). `idle(callback)`: when that callback leaves a call alone
    (None: never known to)."""
    for callback in litellm.callbacks:
        if not isinstance(callback, compat.CustomLogger):
            continue
        if not any(overrides(callback, name) for name in names):
            continue
        leaves_alone = idle(callback)
        if leaves_alone is None or not leaves_alone(kwargs):
            return type(callback).__name__
    return None


def skills_hook_idle(kwargs: Mapping[str, Any]) -> bool:
    """The proxy's `SkillsInjectionHook` acts after the call only when its pre-call hook
    switched code execution on (requests with `container.skills`, which decline)."""
    return not any(
        (kwargs.get(name) or {}).get("_litellm_code_execution_enabled")
        for name in ("litellm_metadata", "metadata")
    )


def _without_guardrails(kwargs: Mapping[str, Any]) -> bool:
    return not isinstance(kwargs.get("guardrails"), list)


# LiteLLM's own callbacks with client hooks, by class name, and when those leave a call alone.
_CLIENT_IDLE: dict[str, Idle] = {
    "SkillsInjectionHook": skills_hook_idle,
    # Registered with a database: acts only on `/v1/messages` calls (by their call type).
    "AutoRouterBaselineCache": lambda kwargs: True,
}


def _client_idle(callback: Any) -> Idle | None:
    found = _CLIENT_IDLE.get(type(callback).__name__)
    if found is not None:
        return found
    # A guardrail whose client hooks are CustomGuardrail's own: they return at once for a call
    # without a `guardrails` list (a deployment's, which the fast path declines anyway).
    guardrail = compat.CustomGuardrail
    if isinstance(callback, guardrail) and all(
        name not in getattr(callback, "__dict__", {})
        and getattr(type(callback), name) is getattr(guardrail, name)
        for name in CLIENT_HOOKS
    ):
        return _without_guardrails
    return None


def client_hook_decline(kwargs: Mapping[str, Any]) -> Decline | None:
    """The decline of a chat, embeddings or transcription call that a configured callback's
    per-deployment hook may act on (LiteLLM runs it; the fast path would not)."""
    name = acting(kwargs, CLIENT_HOOKS, _client_idle)
    return None if name is None else Decline("deployment_hook", f"{name} hook")


def client_checks_decline(kwargs: Mapping[str, Any], *, answer_checked: bool) -> Decline | None:
    """The decline of a call LiteLLM's `client` wrapper checks in Python: its global budget
    and pre-call rules (chat and `/v1/messages`) and, where `answer_checked` (chat), its
    post-call rules and JSON schema validation of the answer."""
    if litellm.max_budget:
        return Decline("client_checks", "max_budget")
    if litellm.pre_call_rules:
        return Decline("client_checks", "pre_call_rules")
    if not answer_checked:
        return None
    if litellm.post_call_rules:
        return Decline("client_checks", "post_call_rules")
    validates = kwargs.get("enable_json_schema_validation")
    if validates is None:
        validates = litellm.enable_json_schema_validation
    if validates is True and kwargs.get("response_format") is not None:
        return Decline("client_checks", "enable_json_schema_validation")
    return None
