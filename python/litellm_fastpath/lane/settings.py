"""The lane's verdict on each `general_settings` key LiteLLM 1.106.12 reads: whether the key
leaves the lane on (it acts at startup, in background jobs, on routes the lane never serves or
after the answer, which the replay runs), turns it off while it holds a value that changes
requests the lane would serve, or is reproduced by the lane. The gate judges each configured
key's value by this table; a key the table does not hold turns the lane off (it may be one a
later LiteLLM reads). `docs/settings.md` lists the table, and a test keeps it equal to the keys
LiteLLM's source reads.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# The routes the lane serves (`src/lane/gate.rs`).
LANE_PATHS = ("/chat/completions", "/v1/chat/completions", "/v1/messages")


class Verdict(enum.Enum):
    ON = "leaves the lane on"
    OFF = "turns the lane off"
    REPRODUCED = "reproduced"


@dataclass(frozen=True)
class Context:
    """What besides a value decides whether it acts: LiteLLM's premium-only settings act only
    with a license, and some only with its legacy limiter
    (`LEGACY_MULTI_INSTANCE_RATE_LIMITING=true`)."""

    premium: bool
    legacy_limiter: bool = False


# Values under which a key the lane does not reproduce has no effect.
Inert = Callable[[Any, Context], bool]


def UNSET(value: Any, context: Context) -> bool:
    """unset or null"""
    return value is None


def FALSY(value: Any, context: Context) -> bool:
    """unset, null or false"""
    return value is None or value is False


def EMPTY(value: Any, context: Context) -> bool:
    """unset, null or empty"""
    return value is None or (isinstance(value, (str, list, tuple, dict)) and not value)


def PREMIUM_UNSET(value: Any, context: Context) -> bool:
    """unset or null, or no LiteLLM license"""
    return value is None or not context.premium


def SESSION_ID(value: Any, context: Context) -> bool:
    """unset, null, `generate` or `omit`"""
    # `generate` and `omit` only stamp logging metadata, which the replay writes.
    return value in (None, "generate", "omit")


def REQUEST_SIZE(value: Any, context: Context) -> bool:
    """unset or null, 1 or more, or no LiteLLM license"""
    # The lane reads bodies of at most 1 MiB: a limit of 1 MB (LiteLLM's MB are MiB) or more
    # never turns one away.
    if value is None or not context.premium:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1


def NO_LEGACY_LIMITER(value: Any, context: Context) -> bool:
    """unset or null, or no legacy limiter"""
    return value is None or not context.legacy_limiter


def _covers(pattern: str, path: str) -> bool:
    """Whether a listed route may match a lane path: LiteLLM's wildcard (`/v1/*`: a prefix), or
    the route or one under it (pass-through endpoints may take subpaths)."""
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    stem = pattern.rstrip("/")
    return path in (pattern, stem) or path.startswith(stem + "/")


def _routes_miss_lane(routes: Any) -> bool:
    """No listed route covers a lane path."""
    if not isinstance(routes, (list, tuple)):
        return False
    return all(
        isinstance(route, str) and not any(_covers(route, path) for path in LANE_PATHS)
        for route in routes
    )


def ADMIN_ONLY(value: Any, context: Context) -> bool:
    """unset, null or empty, no lane route listed, or no LiteLLM license"""
    return EMPTY(value, context) or not context.premium or _routes_miss_lane(value)


def PUBLIC_ROUTES(value: Any, context: Context) -> bool:
    """unset, null or empty, no lane route listed, or no LiteLLM license"""
    return EMPTY(value, context) or not context.premium or _routes_miss_lane(value)


def ALLOWED_ROUTES(value: Any, context: Context) -> bool:
    """unset or null"""
    return value is None


def PASS_THROUGH(value: Any, context: Context) -> bool:
    """unset, null or empty, or no entry at a lane route"""
    # LiteLLM writes `[]` itself whenever its database holds no pass-through endpoints.
    if EMPTY(value, context):
        return True
    if not isinstance(value, (list, tuple)):
        return False
    paths = [entry.get("path") if isinstance(entry, Mapping) else None for entry in value]
    return _routes_miss_lane(paths)


@dataclass(frozen=True)
class Setting:
    verdict: Verdict
    reason: str
    # For OFF: the values under which the key has no effect (the lane stays on).
    inert: Inert | None = None

    def turns_off(self, value: Any, context: Context) -> bool:
        return self.verdict is Verdict.OFF and not (self.inert and self.inert(value, context))


def _on(reason: str) -> Setting:
    return Setting(Verdict.ON, reason)


def _off(inert: Inert, reason: str) -> Setting:
    return Setting(Verdict.OFF, reason, inert)


def _reproduced(reason: str) -> Setting:
    return Setting(Verdict.REPRODUCED, reason)


# Every `general_settings` key LiteLLM 1.106.12 (and litellm_enterprise) reads, and the keys its
# `ConfigGeneralSettings` declares without reading.
GENERAL_SETTINGS: dict[str, Setting] = {
    "admin_only_routes": _off(ADMIN_ONLY, "Non-admin callers get 403 on listed routes."),
    "admission_queue_timeout_seconds": _on(
        "Read only with max_in_flight_requests_per_worker, which turns the lane off."
    ),
    "alert_to_webhook_url": _on("Read at startup only."),
    "alert_type_config": _on("Read at startup only."),
    "alert_types": _on("Read at startup only."),
    "alerting": _on(
        "Alerting callbacks log after the answer; budget/hanging/slow alerts observe the replay. "
        "Sub-values read: slack, ms_teams, email (key/user emails)."
    ),
    "alerting_args": _on("Read at startup only."),
    "alerting_threshold": _on("Read at startup only."),
    "allow_agents_for_team_admins": _on(
        "Agent and vector-store management permissions, on routes the lane never serves. UI "
        "runtime flag."
    ),
    "allow_cli_sso_verification_uri_complete": _on(
        "Acts only on routes the lane never serves (CLI SSO)."
    ),
    "allow_client_side_credentials": _on(
        "Only permits banned body params (api_key, api_base, …) and advisor-tool credentials; the "
        "lane takes neither."
    ),
    "allow_public_health_readiness_details": _on(
        "Acts only on routes the lane never serves (/health/readiness). UI runtime flag."
    ),
    "allow_requests_on_db_unavailable": _on(
        "On a DB outage auth returns a fallback token with user_id set: such tokens never get a "
        "lane verdict."
    ),
    "allow_unmanaged_response_ids": _on(
        "Acts only on routes the lane never serves (Responses API)."
    ),
    "allow_user_auth": _on("Only the /user/auth route."),
    "allow_vector_stores_for_team_admins": _on(
        "Agent and vector-store management permissions, on routes the lane never serves. UI "
        "runtime flag."
    ),
    "allowed_file_extensions": _on("Acts only on routes the lane never serves (/files)."),
    "allowed_ips": _off(UNSET, "403 unless the client IP is in the list. Premium-only."),
    "allowed_routes": _off(
        ALLOWED_ROUTES, "403 for routes not listed, enforced even without premium."
    ),
    "always_include_stream_usage": _off(
        UNSET,
        "true: every stream asks for usage and the client gets the usage chunk; false: usage is "
        "never asked for. The lane does only the unset behaviour.",
    ),
    "apply_user_budget_to_team_keys": _on(
        "Team keys are also held to their user's budget; the lane's headroom reads the same "
        "counters (LiteLLM's `_get_budget_counters` with this setting)."
    ),
    "auto_redirect_ui_login_to_sso": _on("Acts only on routes the lane never serves (UI config)."),
    "background_health_check_model_groups": _on(
        "Which groups are probed, and with enable_health_check_routing which groups the health "
        "filter touches."
    ),
    "background_health_checks": _on("Background job only."),
    "block_robots": _on("Acts only on routes the lane never serves (/robots.txt)."),
    "blocked_file_extensions": _on("Acts only on routes the lane never serves (/files)."),
    "cancel_on_disconnect": _off(
        FALSY,
        "A client that leaves cancels the provider call and the proxy answers/logs 499; the lane "
        "does not cancel, and its replay never sees the disconnect.",
    ),
    "claude_code_gateway_managed_settings": _on(
        "Acts only on routes the lane never serves (/managed/settings)."
    ),
    "completion_model": _off(
        EMPTY,
        "Overrides the body's model for every chat and /v1/messages request; the CLI's --model "
        "(proxy_server.user_model) does the same right after it.",
    ),
    "context_management_summary_max_tokens": _on(
        "Anthropic context-management compaction; context_management is not in the lane's body "
        "subset."
    ),
    "context_management_summary_model": _on(
        "Anthropic context-management compaction; context_management is not in the lane's body "
        "subset."
    ),
    "control_plane_url": _on(
        "Acts only on routes the lane never serves (/v3/login, SSO return_to)."
    ),
    "coordination_redis": _on(
        "Builds the Redis LiteLLM's limiter, budgets and auth-cache invalidation share; the lane "
        "reads budget counters there as LiteLLM does; keys with limits get no lane verdict (#26 "
        "point 3)."
    ),
    "custom_auth": _off(
        UNSET,
        "Replaces key auth with user code; the lane cannot re-apply an arbitrary function's "
        "verdict.",
    ),
    "custom_auth_run_common_checks": _on(
        "Acts only when custom_auth is set, which keeps the lane off."
    ),
    "custom_auth_settings": _on(
        "litellm_enterprise: mode of custom_auth; inert without custom_auth. With mode: off, "
        "custom_auth itself is inert."
    ),
    "custom_key_generate": _on("Read at startup only."),
    "custom_key_policy": _on("Read at startup only."),
    "custom_key_update": _on("Read at startup only."),
    "custom_sso": _on("Read at startup only."),
    "custom_team_metadata_validate": _on("Read at startup only."),
    "custom_ui_sso_sign_in_handler": _on("Read at startup only."),
    "dangerously_allow_mock_testing_request_params": _on(
        "Only gates bodies carrying mock-testing params; not in the lane's body subset."
    ),
    "dangerously_permit_weak_or_unset_master_key": _on("Boot check of the master key."),
    "database_connect_timeout": _on("Builds the DB URL/pool at startup."),
    "database_connection_pool_limit": _on("Builds the DB URL/pool at startup."),
    "database_connection_pool_timeout": _on("Builds the DB URL/pool at startup."),
    "database_connection_timeout": _on("Builds the DB URL/pool at startup."),
    "database_disable_prepared_statements": _on("Builds the DB URL/pool at startup."),
    "database_extra_connection_params": _on("Builds the DB URL/pool at startup."),
    "database_idle_in_transaction_session_timeout": _on("Builds the DB URL/pool at startup."),
    "database_lock_timeout": _on("Builds the DB URL/pool at startup."),
    "database_max_idle_connection_lifetime": _on("Builds the DB URL/pool at startup."),
    "database_socket_timeout": _on("Builds the DB URL/pool at startup."),
    "database_statement_timeout": _on("Builds the DB URL/pool at startup."),
    "database_url": _on(
        "Builds the database URL and pool at startup. A database also registers callbacks, judged "
        "as any other (see docs/settings.md)."
    ),
    "default_team_disabled": _on("Acts only on routes the lane never serves (UI settings)."),
    "disable_agents_for_internal_users": _on(
        "Agent and vector-store management permissions, on routes the lane never serves. UI "
        "runtime flag."
    ),
    "disable_auto_add_proxy_admin_to_teams": _on(
        "Acts only on routes the lane never serves (/team/new)."
    ),
    "disable_batch_input_file_rate_limiting": _on(
        "Acts only on routes the lane never serves (batches)."
    ),
    "disable_bedrock_agent_runtime_passthrough": _on(
        "Acts only on routes the lane never serves (pass-through)."
    ),
    "disable_budget_reservation": _on(
        "Skips LiteLLM's budget reservation (its replays reserve nothing either); LiteLLM then "
        "admits while a counter is below its cap, and the lane, which keeps a margin below it, "
        "admits no more than that."
    ),
    "disable_custom_api_keys": _on(
        "Acts only on routes the lane never serves (/key/generate). UI runtime flag synced from "
        "the DB."
    ),
    "disable_env_credential_login": _on("Acts only on routes the lane never serves (login)."),
    "disable_error_logs": _on("After the answer (the replay runs it)."),
    "disable_key_generate_for_org_admin": _on(
        "Acts only on routes the lane never serves (/key/generate). UI runtime flag."
    ),
    "disable_master_key_return": _on("Acts only on routes the lane never serves (/user/info)."),
    "disable_model_add_for_internal_users": _on(
        "Acts only on routes the lane never serves (/model/new). UI runtime flag."
    ),
    "disable_model_info_refresh": _on("Read at startup only."),
    "disable_password_login_when_sso_enabled": _on(
        "Acts only on routes the lane never serves (login)."
    ),
    "disable_prisma_schema_update": _on("Schema migration at boot."),
    "disable_reset_budget": _on("Background job only (budget resets)."),
    "disable_responses_id_security": _on(
        "Acts only on routes the lane never serves (Responses API)."
    ),
    "disable_retry_on_max_parallel_request_limit_error": _on(
        "Read only by giveup, which nothing calls in 1.106.12 (dead)."
    ),
    "disable_spend_logs": _on("Spend-log rows and their queue monitor."),
    "disable_spend_updates": _on(
        "After the answer (the replay runs it). Under #26 point 2: with it on no spend reaches the"
        " counters, so the lane's reconcile must add nothing either."
    ),
    "disable_vector_stores_for_internal_users": _on(
        "Agent and vector-store management permissions, on routes the lane never serves. UI "
        "runtime flag."
    ),
    "drain_endpoint_token": _on("Acts only on routes the lane never serves (/health/drain)."),
    "email_settings": _on("Acts only on routes the lane never serves (email events)."),
    "enable_claude_code_gateway": _on(
        "Acts only on routes the lane never serves (Claude Code gateway: /oauth/, "
        "/managed/settings)."
    ),
    "enable_drain_endpoint": _on(
        "Acts only on routes the lane never serves (/health/drain); its drain waits on LiteLLM's "
        "in-flight count, which counts lane requests too."
    ),
    "enable_health_check_routing": _off(
        FALSY,
        "The router drops deployments its background health checks marked unhealthy; the lane does"
        " not see that health state.",
    ),
    "enable_jwt_auth": _off(
        FALSY,
        "Bearer tokens with exactly three dot-separated parts go the JWT path; others stay virtual"
        " keys.",
    ),
    "enable_mcp_registry": _on("Acts only on routes the lane never serves (MCP)."),
    "enable_oauth2_auth": _off(
        FALSY,
        "On LLM routes every non-JWT bearer token is checked by OAuth2 introspection, not as a "
        "virtual key.",
    ),
    "enable_oauth2_proxy_auth": _off(
        FALSY, "Identity comes from trusted-proxy headers for every request."
    ),
    "enable_openai_websocket_passthrough": _on(
        "Acts only on routes the lane never serves (realtime pass-through)."
    ),
    "encryption_algorithm": _on("Cipher for values stored in the DB."),
    "enforce_fallback_budget": _on(
        "Budget check on fallback targets; lane groups have no fallbacks."
    ),
    "enforce_fallback_model_access": _on(
        "Model-access check on fallback targets; lane groups have no fallbacks."
    ),
    "enforce_project_model_quota": _on("Acts only on routes the lane never serves (projects)."),
    "enforce_rbac": _on(
        "Read only inside JWT authorisation; JWTs go to the proxy (see enable_jwt_auth)."
    ),
    "enforce_rpm_tpm_on_model_add": _on("Acts only on routes the lane never serves (/model/new)."),
    "enforce_user_param": _off(
        FALSY,
        "Rejects LLM-route POSTs without user; no lane-shaped body carries user, so every request "
        "the lane would take is one LiteLLM rejects.",
    ),
    "enforced_params": _off(
        EMPTY,
        "Per request, required body params checked on the request after LiteLLM added its own "
        "fields; reproducible only by modelling that post-processed body. Premium-only.",
    ),
    "expose_fallback_errors_to_caller": _on(
        "Keeps or pops a body include_fallback_errors; not in the lane's body subset, and lane "
        "groups have no fallbacks."
    ),
    "fail_closed_budget_enforcement": _on(
        "503 when a budget counter cannot be verified; with it `true`, keys with budgets get no "
        "lane verdict (a replay could not be refused after the answer)."
    ),
    "fail_closed_rate_limit_enforcement": _on(
        "503 when the v3 limiter cannot verify its Redis counters; keys with limits get no lane "
        "verdict (#26 points 3 and 5 revisit it)."
    ),
    "failed_login_block_seconds": _on("Login throttle."),
    "failed_login_window_seconds": _on("Login throttle."),
    "forward_client_headers_to_llm_api": _off(
        FALSY,
        "Every x- header except x-stainless, plus anthropic-beta, goes to the provider. Also a UI "
        "runtime flag synced from the DB.",
    ),
    "forward_llm_provider_auth_headers": _on(
        "Forwards a provider key header (x-api-key, api-key, …) that was not the LiteLLM key; the "
        "lane takes one key header and no other. UI runtime flag synced from the DB."
    ),
    "forward_openai_org_id": _off(
        FALSY, "An openai-organization request header becomes the provider call's organization."
    ),
    "global_max_parallel_requests": _off(
        NO_LEGACY_LIMITER,
        "Caps every request, but only in the legacy limiter "
        "(LEGACY_MULTI_INSTANCE_RATE_LIMITING=true), which lane requests do not pass; otherwise "
        "only copied into metadata.",
    ),
    "health_check_concurrency": _on("Background job only."),
    "health_check_details": _on("Acts only on routes the lane never serves (/health)."),
    "health_check_ignore_transient_errors": _on(
        "Parameter of enable_health_check_routing (which turns the lane off); inert without it."
    ),
    "health_check_interval": _on("Background job only."),
    "health_check_skip_disabled_background_models": _on("Background job only."),
    "health_check_staleness_threshold": _on(
        "Parameter of enable_health_check_routing (which turns the lane off); inert without it."
    ),
    "hide_default_credentials_hint": _on("Acts only on routes the lane never serves (UI)."),
    "image_generation_model": _on("Acts only on routes the lane never serves (images)."),
    "include_call_id_in_error_body": _on(
        "Adds the call id to error bodies; every error of a lane request is written by the proxy "
        "(ticket or forward)."
    ),
    "infer_model_from_keys": _on("Model listing."),
    "key_management_settings": _on("Secret manager settings at boot."),
    "key_management_system": _on("Secret manager at boot."),
    "litellm_jwtauth": _on(
        "Configures the JWT handler at startup and MCP issuers; acts only on JWT-shaped tokens "
        "(see enable_jwt_auth)."
    ),
    "litellm_key_header_name": _off(
        EMPTY,
        "The key is read from this header only; Authorization is no longer the key and is dropped "
        "from forwarded headers.",
    ),
    "litellm_license": _on(
        "Sets premium_user, which gates several per-request settings above (judged there)."
    ),
    "master_key": _reproduced(
        "The lane takes the master key's verdict from the configuration (it needs a master key)."
    ),
    "max_batch_file_records": _on("Acts only on routes the lane never serves (/files, batches)."),
    "max_batch_file_size_mb": _on("Acts only on routes the lane never serves (/files batch)."),
    "max_batch_file_uploads_per_day": _on(
        "Acts only on routes the lane never serves (/files, batches)."
    ),
    "max_failed_login_attempts_per_source": _on("Login throttle."),
    "max_failed_login_attempts_per_source_overrides": _on("Login throttle."),
    "max_file_downloads_per_minute": _on(
        "Acts only on routes the lane never serves (/files, batches)."
    ),
    "max_file_size_mb": _on("Acts only on routes the lane never serves (/files)."),
    "max_in_flight_requests_per_worker": _off(
        UNSET,
        "Per-worker admission: past it requests queue, then get 503 overloaded_error with "
        "retry-after: 1; lane requests do not take its slots.",
    ),
    "max_queued_requests_per_worker": _on(
        "Read only with max_in_flight_requests_per_worker, which turns the lane off."
    ),
    "max_request_size_mb": _off(
        REQUEST_SIZE,
        "413 from RequestSizeLimitMiddleware and 400 from check_if_request_size_is_safe, premium "
        "only.",
    ),
    "max_response_size_mb": _off(
        PREMIUM_UNSET,
        "Compares sys.getsizeof(response) — the shallow size of the response object, not its "
        "content — with the limit.",
    ),
    "maximum_autorouter_session_retention_period": _on("Background job only."),
    "maximum_daily_tag_spend_retention_period": _on("Background job only."),
    "maximum_health_check_retention_period": _on("Background job only."),
    "maximum_spend_logs_cleanup_batch_size": _on("Background job only."),
    "maximum_spend_logs_cleanup_batch_timeout": _on("Background job only."),
    "maximum_spend_logs_cleanup_cron": _on("Background job only."),
    "maximum_spend_logs_cleanup_max_batches": _on("Background job only."),
    "maximum_spend_logs_cleanup_run_budget": _on("Background job only."),
    "maximum_spend_logs_retention_interval": _on("Background job only."),
    "maximum_spend_logs_retention_period": _on("Background job only."),
    "mcp_advertised_versions": _on("Acts only on routes the lane never serves (MCP)."),
    "mcp_allow_all_keys_respects_mcp_scope": _on(
        "Acts only on routes the lane never serves (MCP)."
    ),
    "mcp_allowed_clients": _on("Acts only on routes the lane never serves (MCP)."),
    "mcp_client_id_header": _on("Acts only on routes the lane never serves (MCP)."),
    "mcp_client_side_auth_header_name": _on("Acts only on routes the lane never serves (MCP)."),
    "mcp_internal_ip_ranges": _on("Acts only on routes the lane never serves (MCP)."),
    "mcp_prefer_client_id_metadata_document": _on(
        "Acts only on routes the lane never serves (MCP)."
    ),
    "mcp_required_fields": _on("Acts only on routes the lane never serves (MCP)."),
    "mcp_session_token_signing": _on("Acts only on routes the lane never serves (MCP)."),
    "mcp_trusted_proxy_ranges": _on("Acts only on routes the lane never serves (MCP)."),
    "mcp_xff_num_trusted_hops": _on("Acts only on routes the lane never serves (MCP)."),
    "missing_session_id": _off(
        SESSION_ID,
        "reject turns away every request without a session id, i.e. every lane-shaped request; "
        "generate/omit only stamp logging metadata (replayed).",
    ),
    "model_list_healthy_only": _on("Listing filter."),
    "moderation_model": _on("Acts only on routes the lane never serves (/moderations)."),
    "oauth2_config_mappings": _on(
        "Read only by the OAuth2-proxy auth path and the admin MCP; inert unless "
        "enable_oauth2_proxy_auth."
    ),
    "pass_through_endpoints": _off(
        PASS_THROUGH,
        "A pass-through at a lane path changes which credential header is the key and skips common"
        " checks. Also set from the DB at runtime.",
    ),
    "pass_through_request_timeout": _on(
        "Acts only on routes the lane never serves (pass-through endpoints)."
    ),
    "passthrough_managed_object_ids": _on(
        "Acts only on routes the lane never serves (pass-through)."
    ),
    "password_policy_check_breached_passwords": _on(
        "Acts only on routes the lane never serves (password set/login)."
    ),
    "password_policy_min_length": _on(
        "Acts only on routes the lane never serves (password set/login)."
    ),
    "password_policy_require_lowercase": _on(
        "Acts only on routes the lane never serves (password set/login)."
    ),
    "password_policy_require_numbers": _on(
        "Acts only on routes the lane never serves (password set/login)."
    ),
    "password_policy_require_special_characters": _on(
        "Acts only on routes the lane never serves (password set/login)."
    ),
    "password_policy_require_uppercase": _on(
        "Acts only on routes the lane never serves (password set/login)."
    ),
    "plugins": _on("Plugin registry."),
    "provider_url_destination_allowed_hosts": _on(
        "Checked only for URL-valued model names, file ids and fallback targets; a lane group name"
        " is not a URL."
    ),
    "proxy_batch_polling_interval": _on("Background job only."),
    "proxy_batch_write_at": _on("Background job only."),
    "proxy_budget_rescheduler_max_time": _on("Background job only."),
    "proxy_budget_rescheduler_min_time": _on("Background job only."),
    "proxy_config_reload_interval_seconds": _on(
        "Interval of the DB reconcile / periodic reload jobs."
    ),
    "public_routes": _off(
        PUBLIC_ROUTES,
        "Matching routes (exact or wildcard) skip auth: any caller is an anonymous "
        "INTERNAL_USER_VIEW_ONLY.",
    ),
    "reject_clientside_metadata_tags": _off(
        FALSY,
        "400 on LLM routes whose body metadata has tags. The lane's /v1/messages takes metadata "
        "objects with other keys: those with tags must go to the proxy.",
    ),
    "require_end_user_mcp_access_defined": _on("Acts only on routes the lane never serves (MCP)."),
    "require_key_mcp_access_defined": _on("Acts only on routes the lane never serves (MCP)."),
    "responses_websocket_session_limit_seconds": _on(
        "Acts only on routes the lane never serves (Responses WebSocket)."
    ),
    "role_permissions": _on("Role→models/routes for JWT roles only."),
    "scheduled_job_stagger": _on("Offsets of scheduled jobs."),
    "search_tool_deny_by_default": _on("Search-tool grants; never on lane-shaped requests."),
    "search_tools": _on("Search tools from config."),
    "service_account_settings": _on(
        "Adds enforced params only for keys whose metadata has service_account_id; keys with "
        "metadata get no lane verdict (and keep going to the proxy under #26)."
    ),
    "skip_batch_input_file_rate_limiting_for_models": _on(
        "Acts only on routes the lane never serves (batches; warning only)."
    ),
    "skip_batch_input_file_rate_limiting_for_providers": _on(
        "Acts only on routes the lane never serves (batches)."
    ),
    "spend_capture_rate_check": _on("Background job only."),
    "spend_logs_metadata_fields": _on(
        "After the answer (the replay runs it); validated at startup."
    ),
    "spend_report_frequency": _on("Background job only."),
    "store_model_in_db": _on(
        "Reconciles deployments and settings from the database every "
        "proxy_config_reload_interval_seconds; the lane's refresh notices changed settings and "
        "deployments by content, under the same id too."
    ),
    "store_prompts_in_spend_logs": _on("After the answer (the replay runs it)."),
    "supported_db_objects": _on("Which DB objects are loaded."),
    "team_admin_editable_team_fields": _on(
        "Acts only on routes the lane never serves (team/key management). UI runtime flag."
    ),
    "team_metadata_schema": _on("Read at startup only."),
    "team_metadata_validation_error_message": _on(
        "Acts only on routes the lane never serves (team management)."
    ),
    "team_metadata_validation_timeout": _on(
        "Acts only on routes the lane never serves (team management)."
    ),
    "token_rate_limit_type": _on(
        "Which tokens the v3 limiter adds to tpm windows after the answer (the replay's "
        "callbacks do it; the lane's reservation before the call is the limiter's estimate, "
        "which does not read it)."
    ),
    "tracing": _on(
        "Lens tracing: registers a logging callback (LensExporter) at startup, judged by the "
        "lane's callback check."
    ),
    "track_unmanaged_batch_cost": _on("Background job only."),
    "transcribe_media_buckets": _on(
        "Acts only on routes the lane never serves (AWS Transcribe pass-through)."
    ),
    "trusted_proxy_ranges": _on(
        "Login throttling and trusted-proxy checks for custom UI SSO / OAuth2-proxy auth."
    ),
    "ui_access_mode": _on(
        "Acts only on routes the lane never serves (UI / SSO). Sub-keys read: sso_group_jwt_field,"
        " type, restricted_sso_group."
    ),
    "use_azure_key_vault": _on("Deprecated secret manager at boot."),
    "use_google_kms": _on("Deprecated secret manager at boot."),
    "use_redis_transaction_buffer": _on("After the answer (the replay runs it)."),
    "use_shared_health_check": _on("Background job only."),
    "use_spend_logs_partitioning": _on("Background job only."),
    "use_team_public_model_name": _on("Model listing only."),
    "use_x_forwarded_for": _on(
        "Chooses the client IP for allowed_ips (which turns the lane off) and for the logged "
        "requester_ip_address, which the replay computes from the same headers."
    ),
    "user_api_key_cache_max_size": _on(
        "Size of LiteLLM's in-memory auth cache. An LRU eviction makes LiteLLM re-read a key "
        "sooner than the lane's TTL; not an invalidation, so the lane keeps its verdict."
    ),
    "user_api_key_cache_ttl": _reproduced(
        "The lane holds a key's verdict for this TTL, as LiteLLM caches the key."
    ),
    "user_header_mappings": _off(
        EMPTY,
        "A mapped header sets the end user (budgets, spend) and can replace the key's user_id.",
    ),
    "user_header_name": _off(EMPTY, "The named header becomes the end user and the body's user."),
    "user_mcp_management_mode": _on("Acts only on routes the lane never serves (MCP)."),
    "user_url_allowed_hosts": _on(
        "SSRF allowlist for user-supplied URLs (images, files, guardrail code); the lane takes "
        "text only."
    ),
    "user_url_validation": _on("SSRF switch for user-supplied URLs; the lane takes text only."),
    "vector_store_deny_by_default": _on(
        "Acts only on requests naming vector stores; chat tools must be plain function tools and "
        "/v1/messages server tools are declined."
    ),
    # Declared in `ConfigGeneralSettings`, read nowhere.
    "database_type": _on("Declared by LiteLLM's config model, never read."),
    "database_args": _on("Declared by LiteLLM's config model, never read."),
    "otel": _on("Declared by LiteLLM's config model, never read."),
    "max_parallel_requests": _on("Declared by LiteLLM's config model, never read."),
    "enable_public_model_hub": _on("Declared by LiteLLM's config model, never read."),
}


def why_off(general_settings: Mapping[str, Any], context: Context) -> list[str]:
    """Every configured key (by name) that turns the lane off, as `general_settings.<key>`;
    empty when every key leaves it on. Never the value: it may be a secret."""
    return [
        f"general_settings.{key}"
        for key in sorted(general_settings, key=str)
        if (setting := GENERAL_SETTINGS.get(key)) is None
        or setting.turns_off(general_settings[key], context)
    ]
