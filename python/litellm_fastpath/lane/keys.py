"""Key verdicts: in the proxy, once LiteLLM has judged a request's key (its budgets, limits
and model access), the lane takes the verdict for keys whose judgement it can re-apply per
request, so their next requests can take the lane.
"""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

from litellm_fastpath import _native, claims, compat
from litellm_fastpath.lane import groups, replay

# UserAPIKeyAuth fields that may differ from their defaults on a key the lane serves: identity,
# spend, model access and expiry, re-applied per request in Rust. A key with anything else
# (budgets, which LiteLLM reserves per request, limits, teams, users, metadata, aliases,
# guardrails...) stays on the normal path.
_KEY_FIELDS_REAPPLIED = frozenset(
    {
        "api_key",
        "token",
        "key_name",
        "key_alias",
        "user_id",
        "user_role",
        "spend",
        "models",
        "expires",
        "created_at",
        "updated_at",
        "last_refreshed_at",
        "parent_otel_span",
        "request_route",
        "via_virtual_key",
        "created_by",
        "updated_by",
        "litellm_budget_table",
    }
)


async def note_request(user_api_key_dict: Any, data: dict[str, Any], call_type: Any) -> None:
    """The accelerator's pre-call hook: LiteLLM has judged this request's key (and its
    budgets, limits and model access); hand the verdict to the lane, and take a lane ticket."""
    if not claims.lane_running():
        return
    replay.take_ticket(data)
    if str(getattr(call_type, "value", call_type)) not in _JUDGED_CALL_TYPES:
        return
    verdict = _verdict(user_api_key_dict)
    if verdict is not None:
        key_hash, valid_for = verdict
        _native.lane_set_key(
            key_hash,
            await _allowed_groups(user_api_key_dict),
            _expiry(user_api_key_dict.expires),
            valid_for,
            float(user_api_key_dict.spend or 0.0),
        )


# Calls whose key verdicts the lane takes (those of the routes it serves).
_JUDGED_CALL_TYPES = frozenset({"completion", "acompletion", "anthropic_messages"})
# A key with every field at its default, per class (built once: `_verdict` runs per request).
_DEFAULT_KEYS: dict[type, Any] = {}


def _verdict(key: Any) -> tuple[str, float] | None:
    """(key hash, how long the verdict holds), for keys whose verdict the lane can re-apply."""
    proxy_server = compat.proxy_server()

    defaults = _DEFAULT_KEYS.get(type(key))
    if defaults is None:
        defaults = _DEFAULT_KEYS.setdefault(type(key), type(key)())
    for field in type(key).model_fields:
        if field in _KEY_FIELDS_REAPPLIED:
            continue
        if getattr(key, field) != getattr(defaults, field):
            return None
    if key.api_key == compat.LITELLM_PROXY_MASTER_KEY_ALIAS:
        master = proxy_server.master_key
        if not isinstance(master, str):
            return None
        # The master key is judged by configuration, once.
        return hashlib.sha256(master.encode()).hexdigest(), 1e9
    # LiteLLM gives keys without a user the internal-user role, which may call chat routes.
    role = getattr(key.user_role, "value", key.user_role)
    if (
        key.user_id is not None
        or not isinstance(key.token, str)
        or role not in (None, "internal_user")
    ):
        return None
    ttl = (proxy_server.general_settings or {}).get("user_api_key_cache_ttl")
    default_ttl = proxy_server.UserAPIKeyCacheTTLEnum.in_memory_cache_ttl.value
    return key.token, float(ttl if isinstance(ttl, (int, float)) else default_ttl)


async def _allowed_groups(key: Any) -> list[str] | None:
    if not key.models:
        return None
    proxy_server = compat.proxy_server()

    router = proxy_server.llm_router
    allowed = []
    for group in groups.served_groups():
        try:
            await compat.can_key_call_model(
                model=group,
                llm_model_list=router.model_list if router else None,
                valid_token=key,
                llm_router=router,
            )
        except Exception:  # LiteLLM's "not allowed"
            continue
        allowed.append(group)
    return allowed


def _expiry(expires: Any) -> float | None:
    if expires is None:
        return None
    if isinstance(expires, str):
        expires = datetime.datetime.fromisoformat(expires)
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=datetime.UTC)
    return float(expires.timestamp())
