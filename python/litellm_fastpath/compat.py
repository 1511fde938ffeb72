"""Every private LiteLLM name the fast path uses, in one place, behind one version guard.

A Rust-served call must look exactly like a Python-served one, so the fast path reuses LiteLLM's
internals: its exception mapping, logging object, response metadata and provider rules. Those
change between LiteLLM releases, so they are listed here and used elsewhere only as
`compat.<name>`. `usable()` lets `install()` patch LiteLLM only when the installed release is one
we test and every name resolves; otherwise `install()` warns once and patches nothing, so every
call stays on LiteLLM's Python path (fail safe, never half patched).

Names are imported on first use: importing LiteLLM's submodules takes seconds (see __init__.py).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import re
import warnings
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger("litellm_fastpath")

# The LiteLLM releases CI tests; keep in step with `dependencies` in pyproject.toml.
TESTED_LITELLM = ">=1.106.12,<1.107"
_TESTED_FROM = (1, 106, 12)
_TESTED_BELOW = (1, 107, 0)
# Final releases, optionally post-releases or local builds of one; pre-releases never count.
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:\.post\d+)?(?:\+[0-9A-Za-z.]+)?")

# Our name -> (LiteLLM module, its name there). The modules are LiteLLM's internals.
_PRIVATE: dict[str, tuple[str, str]] = {
    # Response headers, metadata and logging, as LiteLLM's own `client` wrapper does them.
    "process_response_headers": (
        "litellm.litellm_core_utils.core_helpers",
        "process_response_headers",
    ),
    "update_response_metadata": (
        "litellm.litellm_core_utils.llm_response_utils.response_metadata",
        "update_response_metadata",
    ),
    "set_duration_in_model_call_details": (
        "litellm.litellm_core_utils.logging_utils",
        "_set_duration_in_model_call_details",
    ),
    "function_setup": ("litellm.utils", "function_setup"),
    # The proxy's budget reservation: LiteLLM's wrapper hands it to the success callbacks (the
    # cost callback settles it) and back on failure; unbound, the proxy releases it unspent.
    "bind_budget_reservation_to_callbacks": (
        "litellm.litellm_core_utils.core_helpers",
        "bind_budget_reservation_to_callbacks",
    ),
    "unbind_budget_reservation_from_callbacks": (
        "litellm.litellm_core_utils.core_helpers",
        "unbind_budget_reservation_from_callbacks",
    ),
    "is_internal_call": ("litellm._internal_context", "is_internal_call"),
    # Set on a logging object whose request never reached a provider (`pre_call` then stamps no
    # handoff time).
    "LITELLM_LOGGING_NO_UPSTREAM_LLM_CALL": (
        "litellm.constants",
        "LITELLM_LOGGING_NO_UPSTREAM_LLM_CALL",
    ),
    # The realtime pool: LiteLLM's OpenAI realtime handler (its dial is gated), and how
    # `litellm._arealtime` resolves a deployment's URL and key before it dials.
    "openai_realtime": ("litellm.realtime_api.main", "openai_realtime"),
    "REALTIME_WEBSOCKET_MAX_MESSAGE_SIZE_BYTES": (
        "litellm.constants",
        "REALTIME_WEBSOCKET_MAX_MESSAGE_SIZE_BYTES",
    ),
    # The Rust relay's replay of a session, and the close it tells the client.
    "proxy_realtime_endpoint": ("litellm.proxy.proxy_server", "realtime_websocket_endpoint"),
    "user_api_key_auth_websocket": (
        "litellm.proxy.auth.user_api_key_auth",
        "user_api_key_auth_websocket",
    ),
    "DefaultLoggedRealTimeEventTypes": (
        "litellm.litellm_core_utils.realtime_streaming",
        "DefaultLoggedRealTimeEventTypes",
    ),
    "backend_close_from": ("litellm.litellm_core_utils.realtime_streaming", "backend_close_from"),
    "client_close_code": ("litellm.litellm_core_utils.realtime_errors", "client_close_code"),
    "websocket_close_reason": (
        "litellm.litellm_core_utils.realtime_errors",
        "websocket_close_reason",
    ),
    "realtime_error_event": ("litellm.litellm_core_utils.realtime_errors", "realtime_error_event"),
    "redact_internal_details_from_client_message": (
        "litellm._logging",
        "redact_internal_details_from_client_message",
    ),
    "get_llm_provider": (
        "litellm.litellm_core_utils.get_llm_provider_logic",
        "get_llm_provider",
    ),
    "get_secret_str": ("litellm.secret_managers.main", "get_secret_str"),
    # The fast lane: what the proxy answers with, and how it judges keys.
    "STATIC_SECURITY_HEADERS": (
        "litellm.proxy.middleware.security_headers_middleware",
        "STATIC_SECURITY_HEADERS",
    ),
    # `Strict-Transport-Security`, which the proxy adds when `LITELLM_ENABLE_HSTS=true`.
    "HSTS_HEADER": ("litellm.proxy.middleware.security_headers_middleware", "HSTS_HEADER"),
    "hsts_enabled": ("litellm.proxy.middleware.security_headers_middleware", "_hsts_enabled"),
    "OPENAI_RESPONSE_HEADERS": ("litellm.types.utils", "OPENAI_RESPONSE_HEADERS"),
    # The per-worker in-flight counter behind `/health/backlog` and graceful shutdown.
    "BillableRequestMetricsMiddleware": (
        "litellm.proxy.middleware.billable_request_metrics_middleware",
        "BillableRequestMetricsMiddleware",
    ),
    "classify_billable_request": (
        "litellm.proxy.middleware.billable_request_metrics_middleware",
        "classify_billable_request",
    ),
    "InFlightRequestsMiddleware": (
        "litellm.proxy.middleware.in_flight_requests_middleware",
        "InFlightRequestsMiddleware",
    ),
    "LITELLM_PROXY_MASTER_KEY_ALIAS": ("litellm.constants", "LITELLM_PROXY_MASTER_KEY_ALIAS"),
    # The lane's accounting without replays (`lane/accounting.py`): whether the router tracks a
    # deployment's usage, the limiter's default per-key limits of a group, and the router's
    # success count a cooldown weighs failures by.
    # How the router picks among a group's deployments: the lowest `order` while healthy, and a
    # deployment's slots for calls in flight (`max_parallel_requests`, or derived from rpm/tpm).
    "deployment_order": ("litellm.utils", "get_deployment_order"),
    "calculate_max_parallel_requests": ("litellm.utils", "calculate_max_parallel_requests"),
    "MaxParallelRequestsLimit": (
        "litellm.router_utils.client_initalization_utils",
        "MaxParallelRequestsLimit",
    ),
    "deployment_has_io_token_limits": (
        "litellm.router_utils.pre_call_checks.io_token_rate_limit_check",
        "deployment_has_io_token_limits",
    ),
    "deployment_default_rpm_limit": (
        "litellm.proxy.auth.auth_utils",
        "_get_deployment_default_rpm_limit",
    ),
    "deployment_default_tpm_limit": (
        "litellm.proxy.auth.auth_utils",
        "_get_deployment_default_tpm_limit",
    ),
    "increment_deployment_successes_for_current_minute": (
        "litellm.router_utils.router_callbacks.track_deployment_metrics",
        "increment_deployment_successes_for_current_minute",
    ),
    "can_key_call_model": ("litellm.proxy.auth.auth_checks", "can_key_call_model"),
    "common_checks": ("litellm.proxy.auth.auth_checks", "common_checks"),
    "LiteLLM_TeamTableCachedObj": ("litellm.proxy._types", "LiteLLM_TeamTableCachedObj"),
    "LiteLLM_UserTable": ("litellm.proxy._types", "LiteLLM_UserTable"),
    "user_api_key_auth": ("litellm.proxy.auth.user_api_key_auth", "user_api_key_auth"),
    # A replay's authentication without the checks (`lane.reauth`): the steps of LiteLLM's
    # auth with an effect, in its order, from its own module.
    "read_request_body_deferring_parse_failure": (
        "litellm.proxy.auth.user_api_key_auth",
        "_read_request_body_deferring_parse_failure",
    ),
    "get_request_route": ("litellm.proxy.auth.user_api_key_auth", "get_request_route"),
    "normalize_request_route": ("litellm.proxy.auth.user_api_key_auth", "normalize_request_route"),
    "safe_get_request_headers": (
        "litellm.proxy.auth.user_api_key_auth",
        "safe_get_request_headers",
    ),
    "get_end_user_id_from_request_body": (
        "litellm.proxy.auth.user_api_key_auth",
        "get_end_user_id_from_request_body",
    ),
    "get_api_key": ("litellm.proxy.auth.user_api_key_auth", "get_api_key"),
    "hash_token": ("litellm.proxy.auth.user_api_key_auth", "hash_token"),
    "IdentityStore": ("litellm.proxy.auth.user_api_key_auth", "IdentityStore"),
    "get_team_object": ("litellm.proxy.auth.user_api_key_auth", "get_team_object"),
    "get_user_object": ("litellm.proxy.auth.user_api_key_auth", "get_user_object"),
    "update_key_budget_with_temp_budget_increase": (
        "litellm.proxy.auth.user_api_key_auth",
        "_update_key_budget_with_temp_budget_increase",
    ),
    "return_user_api_key_auth_obj": (
        "litellm.proxy.auth.user_api_key_auth",
        "_return_user_api_key_auth_obj",
    ),
    "LitellmUserRoles": ("litellm.proxy._types", "LitellmUserRoles"),
    "cache_key_object": ("litellm.proxy.auth.user_api_key_auth", "cache_key_object"),
    "update_valid_token_with_end_user_params": (
        "litellm.proxy.auth.user_api_key_auth",
        "update_valid_token_with_end_user_params",
    ),
    "agent_caller_from_headers": (
        "litellm.proxy.auth.user_api_key_auth",
        "agent_caller_from_headers",
    ),
    "normalize_claude_model": ("litellm.proxy.auth.user_api_key_auth", "_normalize_claude_model"),
    "resolve_router_settings_model_group_alias": (
        "litellm.proxy.auth.user_api_key_auth",
        "_resolve_router_settings_model_group_alias",
    ),
    "carry_team_and_user_budget_state": (
        "litellm.proxy.auth.user_api_key_auth",
        "carry_team_and_user_budget_state",
    ),
    "inherit_org_identity": ("litellm.proxy.auth.user_api_key_auth", "_inherit_org_identity"),
    "should_skip_budget_checks": (
        "litellm.proxy.auth.user_api_key_auth",
        "_should_skip_budget_checks",
    ),
    "LiteLLMProxyRequestSetup": (
        "litellm.proxy.auth.user_api_key_auth",
        "LiteLLMProxyRequestSetup",
    ),
    "bind_admission_counter_keys": (
        "litellm.proxy.auth.user_api_key_auth",
        "bind_admission_counter_keys",
    ),
    "spend_counter_batch_scope": (
        "litellm.proxy.auth.user_api_key_auth",
        "spend_counter_batch_scope",
    ),
    "release_spend_counter_batch": (
        "litellm.proxy.auth.user_api_key_auth",
        "release_spend_counter_batch",
    ),
    "spend_counter_redis_cache": (
        "litellm.proxy.auth.user_api_key_auth",
        "_spend_counter_redis_cache",
    ),
    "reserve_budget_after_common_checks": (
        "litellm.proxy.auth.user_api_key_auth",
        "_reserve_budget_after_common_checks",
    ),
    "seed_request_identity": ("litellm.proxy.auth.user_api_key_auth", "seed_request_identity"),
    "resolve_request_principal": (
        "litellm.proxy.auth.user_api_key_auth",
        "_resolve_request_principal",
    ),
    "get_model_from_request": ("litellm.proxy.auth.user_api_key_auth", "get_model_from_request"),
    "safe_get_request_query_params": (
        "litellm.proxy.auth.auth_checks",
        "safe_get_request_query_params",
    ),
    "route_skips_budget_checks": ("litellm.proxy.auth.auth_checks", "route_skips_budget_checks"),
    "get_team_membership": ("litellm.proxy.auth.auth_checks", "get_team_membership"),
    "stamp_matched_model_access_groups": (
        "litellm.proxy.auth.auth_checks",
        "stamp_matched_model_access_groups",
    ),
    "UI_TEAM_ID": ("litellm.proxy.auth.user_api_key_auth", "UI_TEAM_ID"),
    # Budgets on the lane: the counters LiteLLM's reservation charges and the prices it reads,
    # their current values, and the module whose budget-check skip a replay may take.
    "get_budget_counters": (
        "litellm.proxy.spend_tracking.budget_reservation",
        "_get_budget_counters",
    ),
    "get_model_cost_infos": (
        "litellm.proxy.spend_tracking.budget_reservation",
        "_get_model_cost_infos",
    ),
    "DEFAULT_MAX_OUTPUT_TOKENS_FALLBACK": (
        "litellm.proxy.spend_tracking.budget_reservation",
        "DEFAULT_MAX_OUTPUT_TOKENS_FALLBACK",
    ),
    "get_current_spend": ("litellm.proxy.proxy_server", "get_current_spend"),
    "release_unbound_budget_reservation": (
        "litellm.proxy.spend_tracking.budget_reservation",
        "release_unbound_budget_reservation",
    ),
    "team_membership_reservation_cache_key": (
        "litellm.proxy.common_utils.user_api_key_cache",
        "team_membership_reservation_cache_key",
    ),
    "LiteLLM_TeamMembership": ("litellm.proxy._types", "LiteLLM_TeamMembership"),
    # Rate limits on the lane: the v3 limiter, its window script and its per-request stash.
    "RateLimiterV3": (
        "litellm.proxy.hooks.parallel_request_limiter_v3",
        "_PROXY_MaxParallelRequestsHandler_v3",
    ),
    "BATCH_RATE_LIMITER_SCRIPT": (
        "litellm.proxy.hooks.parallel_request_limiter_v3",
        "BATCH_RATE_LIMITER_SCRIPT",
    ),
    # Its token windows: the reservation's check-and-increment script and the refund's.
    "CHECK_AND_INCREMENT_BY_N_SCRIPT": (
        "litellm.proxy.hooks.parallel_request_limiter_v3",
        "CHECK_AND_INCREMENT_BY_N_SCRIPT",
    ),
    "WINDOW_GUARDED_TOKEN_INCREMENT_SCRIPT": (
        "litellm.proxy.hooks.parallel_request_limiter_v3",
        "WINDOW_GUARDED_TOKEN_INCREMENT_SCRIPT",
    ),
    # Its parallel-request gauge: the scripts that take and give back a slot, and a slot's TTL.
    "PARALLEL_ACQUIRE_SCRIPT": (
        "litellm.proxy.hooks.parallel_request_limiter_v3",
        "PARALLEL_ACQUIRE_SCRIPT",
    ),
    "PARALLEL_RELEASE_SCRIPT": (
        "litellm.proxy.hooks.parallel_request_limiter_v3",
        "PARALLEL_RELEASE_SCRIPT",
    ),
    "PARALLEL_REQUEST_SLOT_TTL_SECONDS": (
        "litellm.proxy.hooks.parallel_request_limiter_v3",
        "PARALLEL_REQUEST_SLOT_TTL_SECONDS",
    ),
    "claim_request_stash_for_data": (
        "litellm.proxy.hooks.parallel_request_limiter_v3",
        "claim_request_stash_for_data",
    ),
    "proxy_chat_completion": ("litellm.proxy.proxy_server", "chat_completion"),
    "proxy_stream_frames": ("litellm.proxy.proxy_server", "async_data_generator"),
    "ProxyBaseLLMRequestProcessing": (
        "litellm.proxy.common_request_processing",
        "ProxyBaseLLMRequestProcessing",
    ),
    "should_return_raw_model_name": (
        "litellm.proxy.common_request_processing",
        "should_return_raw_model_name",
    ),
    "proxy_anthropic_response": (
        "litellm.proxy.anthropic_endpoints.endpoints",
        "anthropic_response",
    ),
    "get_token_type_cost_breakdown": (
        "litellm.litellm_core_utils.llm_cost_calc.utils",
        "get_token_type_cost_breakdown",
    ),
    "add_provider_specific_headers_to_request": (
        "litellm.proxy.litellm_pre_call_utils",
        "add_provider_specific_headers_to_request",
    ),
    "model_deployments_support_stream_options": (
        "litellm.proxy.common_request_processing",
        "_model_deployments_support_stream_options",
    ),
    "Rules": ("litellm.utils", "Rules"),
    "dispatch_success_logging": ("litellm.utils", "_dispatch_success_logging"),
    # What the router and the proxy do to an answer before their logging reads it.
    "add_retry_headers_to_response": (
        "litellm.router_utils.add_retry_fallback_headers",
        "add_retry_headers_to_response",
    ),
    "add_fallback_headers_to_response": (
        "litellm.router_utils.add_retry_fallback_headers",
        "add_fallback_headers_to_response",
    ),
    "find_deployment_metadata": (
        "litellm.router_utils.router_callbacks.track_deployment_metrics",
        "find_deployment_metadata",
    ),
    "response_total_token_count": (
        "litellm.router_utils.add_retry_fallback_headers",
        "response_total_token_count",
    ),
    "ROUTER_USAGE_COUNTED_TOKENS_METADATA_KEY": (
        "litellm.constants",
        "ROUTER_USAGE_COUNTED_TOKENS_METADATA_KEY",
    ),
    "override_openai_response_model": (
        "litellm.proxy.common_request_processing",
        "_override_openai_response_model",
    ),
    "record_served_output_texts": (
        "litellm.litellm_core_utils.served_output_texts",
        "record_served_output_texts",
    ),
    "served_output_texts": (
        "litellm.litellm_core_utils.served_output_texts",
        "served_output_texts",
    ),
    # Embeddings: the OpenAI answer -> EmbeddingResponse step, and Cohere's token count.
    "convert_to_model_response_object": (
        "litellm.litellm_core_utils.llm_response_utils.convert_dict_to_response",
        "convert_to_model_response_object",
    ),
    "get_encoding": ("litellm.main", "_get_encoding"),
    "Embedding": ("litellm.types.utils", "Embedding"),
    # Errors: each provider's exception, mapped to LiteLLM's classes by `exception_type`.
    "exception_type": (
        "litellm.litellm_core_utils.exception_mapping_utils",
        "exception_type",
    ),
    "AnthropicError": ("litellm.llms.anthropic.common_utils", "AnthropicError"),
    "BedrockError": ("litellm.llms.bedrock.common_utils", "BedrockError"),
    "OpenAIError": ("litellm.llms.openai.common_utils", "OpenAIError"),
    # Routing: LiteLLM's per-provider rules the Rust path must follow.
    "AnthropicConfig": ("litellm.llms.anthropic.chat.transformation", "AnthropicConfig"),
    "AmazonConverseConfig": (
        "litellm.llms.bedrock.chat.converse_transformation",
        "AmazonConverseConfig",
    ),
    "BedrockModelInfo": ("litellm.llms.bedrock.common_utils", "BedrockModelInfo"),
    "get_file_mime_type_from_extension": (
        "litellm.types.files",
        "get_file_mime_type_from_extension",
    ),
    # Streams: LiteLLM's wrapper (the router and the proxy need that class) and its helpers.
    "CustomStreamWrapper": (
        "litellm.litellm_core_utils.streaming_handler",
        "CustomStreamWrapper",
    ),
    "stamp_served_service_tier": (
        "litellm.litellm_core_utils.streaming_handler",
        "_stamp_served_service_tier",
    ),
    "StreamingChoices": ("litellm.types.utils", "StreamingChoices"),
    "Delta": ("litellm.types.utils", "Delta"),
    # /v1/messages: LiteLLM's own rules for the small params and headers, its block rules for
    # the logged copy, and its stream logging.
    "ProviderConfigManager": ("litellm.utils", "ProviderConfigManager"),
    "AnthropicMessagesRequestUtils": (
        "litellm.llms.anthropic.pass_through.messages.utils",
        "AnthropicMessagesRequestUtils",
    ),
    "ProviderSpecificHeaderUtils": (
        "litellm.litellm_core_utils.get_provider_specific_headers",
        "ProviderSpecificHeaderUtils",
    ),
    "update_headers_with_filtered_beta": (
        "litellm.anthropic_beta_headers_manager",
        "update_headers_with_filtered_beta",
    ),
    "GenericLiteLLMParams": ("litellm.types.router", "GenericLiteLLMParams"),
    "merge_anthropic_beta_headers": (
        "litellm.llms.anthropic.common_utils",
        "merge_anthropic_beta_headers",
    ),
    "strip_empty_content_blocks_from_anthropic_messages": (
        "litellm.llms.anthropic.common_utils",
        "strip_empty_content_blocks_from_anthropic_messages",
    ),
    "strip_provider_specific_fields_from_anthropic_messages": (
        "litellm.llms.anthropic.common_utils",
        "strip_provider_specific_fields_from_anthropic_messages",
    ),
    "PassThroughStreamingHandler": (
        "litellm.proxy.pass_through_endpoints.streaming_handler",
        "PassThroughStreamingHandler",
    ),
    "PassThroughStreamContext": (
        "litellm.proxy.pass_through_endpoints.streaming_handler",
        "PassThroughStreamContext",
    ),
    "GLOBAL_PASS_THROUGH_SUCCESS_HANDLER_OBJ": (
        "litellm.llms.anthropic.pass_through.messages.streaming_iterator",
        "GLOBAL_PASS_THROUGH_SUCCESS_HANDLER_OBJ",
    ),
    "GLOBAL_LOGGING_WORKER": (
        "litellm.litellm_core_utils.logging_worker",
        "GLOBAL_LOGGING_WORKER",
    ),
    "EndpointType": ("litellm.types.passthrough_endpoints.pass_through_endpoints", "EndpointType"),
    # The proxy hook's base class.
    "CustomLogger": ("litellm.integrations.custom_logger", "CustomLogger"),
    "CustomGuardrail": ("litellm.integrations.custom_guardrail", "CustomGuardrail"),
    # Usage-based routing's strategy (its pick reads, its callback counts, the lane's batch too).
    "LowestTPMLoggingHandler_v2": (
        "litellm.router_strategy.lowest_tpm_rpm_v2",
        "LowestTPMLoggingHandler_v2",
    ),
}

# Private attributes of the `litellm` module, read at call time (LiteLLM may rebind them).
_PRIVATE_ATTRIBUTES = ("_async_success_callback", "_async_failure_callback")

_loaded: dict[str, Any] = {}
_warned = False


class UntestedLiteLLMWarning(RuntimeWarning):
    """The installed LiteLLM is not a release the fast path is tested with: it stays off."""


def _private(name: str) -> Any:
    try:
        return _loaded[name]
    except KeyError:
        module, attribute = _PRIVATE[name]
        value = _loaded[name] = getattr(importlib.import_module(module), attribute)
        return value


def __getattr__(name: str) -> Any:
    if name not in _PRIVATE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = _private(name)
    # Later lookups find the plain module attribute and skip this function.
    globals()[name] = value
    return value


def callbacks_configured() -> bool:
    """Whether any LiteLLM callback is set (else nobody reads a logging object)."""
    import litellm

    return bool(
        litellm.callbacks
        or litellm.success_callback
        or litellm._async_success_callback
        or litellm.failure_callback
        or litellm._async_failure_callback
    )


def callback_lists() -> tuple[list[Any], ...]:
    """Every list of callbacks LiteLLM calls per request (read now: LiteLLM may rebind them)."""
    import litellm

    return (
        litellm.callbacks,
        litellm.input_callback,
        litellm.success_callback,
        litellm.failure_callback,
        litellm._async_success_callback,
        litellm._async_failure_callback,
        litellm.service_callback,
    )


def proxy_callback_capabilities() -> Any:
    """The proxy's view of its callbacks (guardrails, chunk hooks, stream iterator hooks), or
    None outside a running proxy. Never imports the proxy."""
    import sys

    utils = sys.modules.get("litellm.proxy.utils")
    proxy_logging = getattr(utils, "ProxyLogging", None)
    if proxy_logging is None:
        return None
    try:
        return proxy_logging.callback_capabilities()
    except Exception:  # a LiteLLM change: then chunk objects, which always work
        return None


def router_timeout(router: Any, litellm_params: dict[str, Any], *, stream: bool) -> Any:
    """The timeout LiteLLM's router gives a call to this deployment (`Router._get_timeout`:
    `stream_timeout` for streams, the deployment's, the router's, then LiteLLM's default)."""
    return router._get_timeout(kwargs={"stream": stream}, data=litellm_params)


def router_messages_timeout(router: Any, litellm_params: dict[str, Any], *, stream: bool) -> Any:
    """The timeout LiteLLM's router gives a `/v1/messages` call to this deployment (its generic
    calls resolve it as SDK passthroughs do: `resolve_llm_passthrough_timeout`)."""
    from litellm.passthrough.timeout_utils import resolve_llm_passthrough_timeout

    explicit = router._explicit_timeout
    router_timeout = (
        router.request_timeout
        if router.request_timeout is not None
        else float(explicit)
        if isinstance(explicit, (int, float))
        else None
    )
    router_stream_timeout = (
        router.stream_timeout
        if router.stream_timeout is not None
        else router.request_timeout
        if router.request_timeout is not None
        else router.default_litellm_params.get("stream_timeout")
    )
    return resolve_llm_passthrough_timeout(
        kwargs={"stream": stream},
        litellm_params=litellm_params,
        router_timeout=router_timeout,
        router_stream_timeout=router_stream_timeout,
    )


def router_holds_messages_streams(router: Any, model_group: str, model_info: Any) -> bool | None:
    """How LiteLLM's router passes a `/v1/messages` stream to this deployment on
    (`Router._aanthropic_messages_streaming_iterator`): False when it passes every frame on as
    it arrives, True when it holds them until the first content because a retry could still take
    the stream over, None when a fallback could (or LiteLLM changed)."""
    kwargs = {
        "model": model_group,
        "stream": True,
        "model_info": dict(model_info or {}),
        "metadata": {},
        "litellm_metadata": {},
    }
    try:
        if router._anthropic_messages_stream_can_fall_back(model_group, kwargs):
            return None
        return bool(router._anthropic_messages_stream_can_retry(kwargs))
    except Exception:  # a LiteLLM change: its streams stay with the proxy
        return None


def config_litellm_settings() -> Mapping[str, Any] | None:
    """The proxy's config file's `litellm_settings`, read from the file (the proxy applies them
    in file order, possibly after importing our callback); None without a file or settings."""
    import yaml  # type: ignore[import-untyped,unused-ignore]  # LiteLLM's dependency

    path = getattr(proxy_server(), "user_config_file_path", None)
    if not path:
        return None
    try:
        with open(path) as file:
            config = yaml.safe_load(file) or {}
    except (OSError, yaml.YAMLError):
        return None
    settings = config.get("litellm_settings") if isinstance(config, Mapping) else None
    return settings if isinstance(settings, Mapping) else None


def proxy_server() -> Any:
    """The proxy's module: its globals (router, settings, key cache, master key, app)."""
    return importlib.import_module(_PROXY_SERVER)


def load_callback(name: str, config_path: str) -> Any:
    """A custom callback (`module.instance`) loaded as the proxy loads one from its config."""
    from litellm.proxy.types_utils.utils import get_instance_fn

    return get_instance_fn(value=name, config_file_path=config_path)


def prometheus_configured(litellm_settings: Mapping[str, Any] | None) -> bool:
    """Whether `litellm_settings` turn LiteLLM's prometheus callback on (LiteLLM's own reading)."""
    from litellm.proxy.proxy_cli import ProxyInitializationHelpers

    return bool(ProxyInitializationHelpers._prometheus_callback_configured(litellm_settings))


def logging_executor() -> Any:
    """The thread pool LiteLLM's synchronous wrapper runs success logging on."""
    import litellm.utils

    return litellm.utils.executor


def logging_queue_length() -> int:
    """Logging tasks waiting in LiteLLM's logging worker's queue (0 where it has none)."""
    queue = getattr(_private("GLOBAL_LOGGING_WORKER"), "_queue", None)
    return queue.qsize() if queue is not None else 0


def logging_running() -> int:
    """Logging tasks LiteLLM's logging worker has started and not finished (its shutdown
    cancels them)."""
    return len(getattr(_private("GLOBAL_LOGGING_WORKER"), "_running_tasks", ()) or ())


def now() -> Any:
    import datetime

    return datetime.datetime.now()


def litellm_version() -> str | None:
    try:
        return importlib.metadata.version("litellm")
    except importlib.metadata.PackageNotFoundError:
        return None


def is_tested_version(version: str) -> bool:
    match = _RELEASE.fullmatch(version)
    if match is None:
        return False
    release = tuple(int(part) for part in match.groups())
    return _TESTED_FROM <= release < _TESTED_BELOW


# Importing the proxy's module registers its hooks (the model max-budget limiter) as LiteLLM
# callbacks: in an SDK process every call, on either path, would then run LiteLLM's logging and
# cost for nobody. Names from it are checked only where the proxy is already loaded.
_PROXY_SERVER = "litellm.proxy.proxy_server"


def _checked_names() -> list[str]:
    import sys

    in_proxy = _PROXY_SERVER in sys.modules
    return [name for name, (module, _) in _PRIVATE.items() if in_proxy or module != _PROXY_SERVER]


def unusable_reason() -> str | None:
    """Why `install()` must leave LiteLLM alone, or None when it may patch it."""
    version = litellm_version()
    if version is None or not is_tested_version(version):
        return f"LiteLLM {version or '(not found)'} is not a tested release ({TESTED_LITELLM})"
    try:
        import litellm

        for name in _checked_names():
            _private(name)
        for attribute in _PRIVATE_ATTRIBUTES:
            getattr(litellm, attribute)
    except (ImportError, AttributeError) as err:
        return f"LiteLLM {version} lacks a name the fast path uses ({err})"
    return None


def usable() -> bool:
    """Whether `install()` may patch LiteLLM. When not, says why once per process: an
    `UntestedLiteLLMWarning` and a warning on the `litellm_fastpath` logger."""
    reason = unusable_reason()
    if reason is None:
        return True
    global _warned
    if not _warned:
        _warned = True
        message = f"litellm_fastpath is off: {reason}; every call runs on LiteLLM's Python path"
        logger.warning(message)
        # stacklevel 3: the caller of install().
        warnings.warn(message, UntestedLiteLLMWarning, stacklevel=3)
    return False
