"""A replay's authentication, without LiteLLM's checks.

The lane served the request on a verdict about its key: LiteLLM's own checks, passed once and
re-applied in Rust per request (model access, expiry, budgets, rpm limits). LiteLLM's auth in the
replay would run every check again (about two fifths of a replay's CPU on a key with a user, a
team and a budget), and a check that failed now could only lose the accounting of a request
already answered. So a replay of such a key gets the auth object LiteLLM's auth returns when
every check passes: built by LiteLLM's own functions, in its auth's order, from the same cached
objects, with every effect auth has on the request (the budget reservation, what it writes into
the body's metadata, the request's state) and without the checks.

Only for the shapes this mirrors: the master key, or a virtual key with a verdict in this worker
found in LiteLLM's key cache; no end user named; a proxy without alerting (its budget checks
queue alerts), OpenTelemetry (auth anchors spans), a proxy-wide budget or custom auth. Anything
else, or any error before the reservation, takes LiteLLM's auth. `tests/test_reauth.py` compares
both ways of authenticating the same requests.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import functools
import importlib.util
import logging
import secrets
from collections.abc import Callable
from typing import Any

import litellm

from litellm_fastpath import compat

logger = logging.getLogger("litellm_fastpath")

# Replays given LiteLLM's full auth in this worker, by why (see `authenticate`).
fallbacks: collections.Counter[str] = collections.Counter()

# The proxy admin's role: the master key's (an admin user's virtual key takes LiteLLM's auth).
_ADMIN_ROLE = "proxy_admin"


async def authenticate(request: Any, judged: Callable[[str], bool]) -> Any | None:
    """The auth object for a replay of a key the lane judged (`judged(key_hash)`: whether this
    worker holds its verdict), or None where LiteLLM's auth must run."""
    proxy = compat.proxy_server()
    if not _mirrored_proxy(proxy):
        return _fallback("proxy")
    request_data, parse_error = await compat.read_request_body_deferring_parse_failure(
        request=request
    )
    if parse_error is not None or not isinstance(request_data, dict):
        return _fallback("body")
    headers = compat.safe_get_request_headers(request)
    if compat.get_end_user_id_from_request_body(request_data, headers) is not None:
        return _fallback("end_user")
    route = compat.get_request_route(request=request)
    presented, _ = compat.get_api_key(
        custom_litellm_key_header=None,
        api_key=request.headers.get("authorization"),
        azure_api_key_header=None,
        # The lane takes `x-api-key` on `/v1/messages` only (as the key, sent alone).
        anthropic_api_key_header=request.headers.get("x-api-key"),
        google_ai_studio_api_key_header=None,
        azure_apim_header=None,
        pass_through_endpoints=None,
        route=route,
        request=request,
    )
    if not isinstance(presented, str) or not presented:
        return _fallback("key")
    token = compat.hash_token(presented)
    master = proxy.master_key
    is_master = isinstance(master, str) and secrets.compare_digest(presented, master)
    if not (is_master or (presented.startswith("sk-") and judged(token))):
        return _fallback("key")
    if not is_master and proxy.prisma_client is None:
        return _fallback("database")  # LiteLLM refuses virtual keys without one
    start_time = getattr(request.state, "litellm_received_at", None) or datetime.datetime.now(
        datetime.UTC
    )
    request.state.litellm_received_at = start_time
    with compat.spend_counter_batch_scope(compat.spend_counter_redis_cache()):
        try:
            key = await _key_object(proxy, token, route, start_time, is_master)
            if key is None:
                return _fallback("key_object")
            key.budget_reservation = None
            key.agent_caller = compat.agent_caller_from_headers(headers, key)
            skip_budget_checks, team, user = await _authorize(
                proxy, key, request, request_data, route
            )
        except Exception as err:  # nothing reserved yet: LiteLLM's auth decides
            compat.release_spend_counter_batch()
            logger.debug("fastpath_lane: replay auth falls back: %s", type(err).__name__)
            return _fallback("error")
        try:
            await compat.reserve_budget_after_common_checks(
                user_api_key_auth_obj=key,
                request=request,
                request_data=request_data,
                route=route,
                llm_router=proxy.llm_router,
                team_object=team,
                user_object=user,
                end_user_id=None,
                end_user_object=None,
                prisma_client=proxy.prisma_client,
                user_api_key_cache=proxy.user_api_key_cache,
                proxy_logging_obj=proxy.proxy_logging_obj,
                skip_budget_checks=skip_budget_checks,
                general_settings=proxy.general_settings,
            )
        finally:
            compat.release_spend_counter_batch()
    compat.seed_request_identity(key, model=request_data.get("model"))
    key.request_route = compat.normalize_request_route(route)
    try:
        request.state.principal = compat.resolve_request_principal(request, key)
    except Exception as err:  # as LiteLLM's auth: never fatal
        logger.debug("fastpath_lane: principal projection failed: %s", type(err).__name__)
    return key


def _fallback(why: str) -> Any:
    """Counts a replay left to LiteLLM's auth, and says so (None)."""
    fallbacks[why] += 1
    return None


def _mirrored_proxy(proxy: Any) -> bool:
    """Whether the proxy's auth, for the master key or a cached virtual key, does only what
    this module mirrors."""
    settings = proxy.general_settings or {}
    alerting = getattr(proxy.proxy_logging_obj, "alerting", None)
    return (
        proxy.open_telemetry_logger is None
        and not _otel_v2_importable()
        and proxy.user_custom_auth is None
        and getattr(proxy, "enterprise_custom_auth", None) is None
        and not alerting
        and not (litellm.max_budget > 0)
        and settings.get("litellm_key_header_name") is None
        and not settings.get("enable_jwt_auth")
        and not settings.get("enable_oauth2_auth")
        and not settings.get("enable_oauth2_proxy_auth")
    )


@functools.cache
def _otel_v2_importable() -> bool:
    """LiteLLM's auth anchors OpenTelemetry destinations per request when its OTel logger
    imports (it needs the SDK); without it that step does nothing."""
    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except (ImportError, ValueError):
        return False


async def _key_object(
    proxy: Any, token: str, route: str, start_time: Any, is_master: bool
) -> Any | None:
    """What LiteLLM's auth builder returns for the master key or a cached virtual key whose
    checks pass (None: a key it builds otherwise)."""
    cache, prisma, logging_obj = (
        proxy.user_api_key_cache,
        proxy.prisma_client,
        proxy.proxy_logging_obj,
    )
    store = compat.IdentityStore(
        prisma,
        cache,
        parent_otel_span=None,
        proxy_logging_obj=logging_obj,
        check_cache_only=True,
    )
    try:
        valid = compat.IdentityStore.key_from_principal(await store.resolve(hashed_token=token))
    except Exception:  # as the builder: a failed cache read is no cached key
        valid = None
    if valid is None and is_master:
        return await _master_key_object(proxy, token, route, start_time)
    if valid is None or valid.token is None:
        return None
    valid.via_virtual_key = True
    role = getattr(valid.user_role, "value", valid.user_role)
    if is_master != (role == _ADMIN_ROLE):
        return None  # an admin's virtual key, or a master key cached as something else
    if is_master:
        # The builder returns the master key's cached admin object as it is.
        valid = compat.update_valid_token_with_end_user_params(
            valid_token=valid, end_user_params={}
        )
        valid.parent_otel_span = None
        return valid
    if valid.team_id == compat.UI_TEAM_ID or valid.is_session_token:
        return None
    if valid.agent_id is not None or valid.managed_agent_policy is not None:
        return None
    if valid.project_id is not None:
        return None
    if valid.team_id is not None:
        # The builder's refresh of team values from a newer cached team object.
        team = await compat.get_team_object(
            team_id=valid.team_id,
            prisma_client=prisma,
            user_api_key_cache=cache,
            parent_otel_span=None,
            proxy_logging_obj=logging_obj,
            check_cache_only=True,
        )
        if (
            team.last_refreshed_at is not None
            and valid.last_refreshed_at is not None
            and team.last_refreshed_at > valid.last_refreshed_at
        ):
            for name, value in team.__dict__.items():
                if f"team_{name}" in valid.__fields__:
                    setattr(valid, f"team_{name}", value)
    valid = compat.update_key_budget_with_temp_budget_increase(valid)
    user = await _user_object(proxy, valid.user_id)
    if user is not None:
        valid.user_model_max_budget = user.model_max_budget
    if valid.team_id is not None:
        team = await _team_object(proxy, valid.team_id)
        valid.team_object_permission = team.object_permission
        valid.team_metadata = team.metadata
    else:
        valid.team_object_permission = None
    fields = valid.model_dump(exclude_none=True)
    fields.pop("token", None)
    if valid.budget_throttle_pct is not None:
        fields["budget_throttle_pct"] = valid.budget_throttle_pct
    key = await compat.return_user_api_key_auth_obj(
        user_obj=user,
        api_key=valid.token,
        parent_otel_span=None,
        valid_token_dict=fields,
        route=route,
        start_time=start_time,
    )
    key.via_virtual_key = True
    return key


async def _master_key_object(proxy: Any, token: str, route: str, start_time: Any) -> Any:
    """The builder's object for the master key when none is cached (always, without a
    database): the admin under LiteLLM's alias for the key, cached for the next request."""
    key = await compat.return_user_api_key_auth_obj(
        user_obj=None,
        user_role=compat.LitellmUserRoles.PROXY_ADMIN,
        api_key=compat.LITELLM_PROXY_MASTER_KEY_ALIAS,
        parent_otel_span=None,
        valid_token_dict={"user_id": proxy.litellm_proxy_admin_name},
        route=route,
        start_time=start_time,
    )
    _background.add(
        task := asyncio.get_running_loop().create_task(
            compat.cache_key_object(
                hashed_token=token,
                user_api_key_obj=key,
                user_api_key_cache=proxy.user_api_key_cache,
                proxy_logging_obj=proxy.proxy_logging_obj,
            )
        )
    )
    task.add_done_callback(_background.discard)
    key = compat.update_valid_token_with_end_user_params(valid_token=key, end_user_params={})
    key.via_virtual_key = True
    return key


# The master key's cache writes in flight (held so that they are not collected mid-way).
_background: set[asyncio.Task[Any]] = set()


async def _team_object(proxy: Any, team_id: str) -> Any:
    return await compat.get_team_object(
        team_id=team_id,
        prisma_client=proxy.prisma_client,
        user_api_key_cache=proxy.user_api_key_cache,
        parent_otel_span=None,
        proxy_logging_obj=proxy.proxy_logging_obj,
    )


async def _user_object(proxy: Any, user_id: str | None) -> Any | None:
    """The user as auth reads it (a failed read is no user, as there)."""
    if user_id is None:
        return None
    try:
        return await compat.get_user_object(
            user_id=user_id,
            prisma_client=proxy.prisma_client,
            user_api_key_cache=proxy.user_api_key_cache,
            user_id_upsert=False,
            parent_otel_span=None,
            proxy_logging_obj=proxy.proxy_logging_obj,
        )
    except Exception:
        return None


async def _authorize(
    proxy: Any, key: Any, request: Any, request_data: dict[str, Any], route: str
) -> tuple[bool, Any, Any]:
    """LiteLLM's authorization of an authenticated request up to its budget reservation, without
    its checks: its rewrites of the body and the objects it carries onto the key. Returns
    whether LiteLLM skips budgets for the request, and the team and user objects its
    reservation is given."""
    await compat.normalize_claude_model(request_data, key, request, route)
    await compat.resolve_router_settings_model_group_alias(request_data, key, request, route)
    team = None if key.team_id is None else await _team_object(proxy, key.team_id)
    user = await _user_object(proxy, key.user_id)
    compat.carry_team_and_user_budget_state(valid_token=key, team_object=team, user_object=user)
    await compat.inherit_org_identity(
        user_api_key_auth_obj=key,
        team_object=team,
        prisma_client=proxy.prisma_client,
        user_api_key_cache=proxy.user_api_key_cache,
        parent_otel_span=None,
        proxy_logging_obj=proxy.proxy_logging_obj,
    )
    if getattr(key.user_role, "value", key.user_role) == _ADMIN_ROLE:
        # The token is the admin's, whatever a user row says (as LiteLLM's authorization).
        user = compat.LiteLLM_UserTable(
            user_id=key.user_id or proxy.litellm_proxy_admin_name,
            user_role=compat.LitellmUserRoles.PROXY_ADMIN,
            spend=user.spend if user is not None else 0.0,
            object_permission_id=user.object_permission_id if user is not None else None,
        )
    skip_budget_checks = bool(
        compat.should_skip_budget_checks(
            request_data=request_data,
            route=route,
            request=request,
            llm_router=proxy.llm_router,
            team_id=key.team_id,
        )
    )
    setup = compat.LiteLLMProxyRequestSetup
    setup.pre_seed_litellm_metadata_for_route(request_data=request_data, route=route)
    setup.apply_client_tag_policy_pre_auth(
        request=request, request_data=request_data, user_api_key_dict=key
    )
    compat.bind_admission_counter_keys(key, end_user_id=None)
    await _common_effects(proxy, key, request, request_data, route, team, skip_budget_checks)
    return skip_budget_checks, team, user


async def _common_effects(
    proxy: Any,
    key: Any,
    request: Any,
    request_data: dict[str, Any],
    route: str,
    team: Any,
    skip_budget_checks: bool,
) -> None:
    """What LiteLLM's `common_checks` does besides checking: it stamps the model access groups
    that authorized the request and, with budget checks on, seeds the body's metadata and the
    key's tags."""
    cache, prisma, logging_obj, router = (
        proxy.user_api_key_cache,
        proxy.prisma_client,
        proxy.proxy_logging_obj,
        proxy.llm_router,
    )
    model = compat.get_model_from_request(
        request_data=request_data,
        route=route,
        request_headers=compat.safe_get_request_headers(request=request),
        request_query_params=compat.safe_get_request_query_params(request=request),
        llm_router=router,
        request=request,
        team_id=key.team_id,
    )
    skip_all = skip_budget_checks or compat.route_skips_budget_checks(route=route)
    member = key.user_id if (bool(model) or not skip_all) else None
    loaded = team is not None and member is not None
    membership = (
        await compat.get_team_membership(
            user_id=member,
            team_id=team.team_id,
            prisma_client=prisma,
            user_api_key_cache=cache,
            proxy_logging_obj=logging_obj,
        )
        if loaded
        else None
    )
    await compat.stamp_matched_model_access_groups(
        model=model,
        valid_token=key,
        team_object=team,
        project_object=None,
        llm_router=router,
        prisma_client=prisma,
        user_api_key_cache=cache,
        proxy_logging_obj=logging_obj,
        team_membership=membership,
        team_membership_loaded=loaded,
    )
    if not skip_all:
        setup = compat.LiteLLMProxyRequestSetup
        setup.pre_seed_litellm_metadata_for_route(request_data=request_data, route=route)
        setup.apply_key_tags_pre_auth(request_data=request_data, user_api_key_dict=key)
