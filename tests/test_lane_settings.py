"""The lane's settings gate (`litellm_fastpath.lane.settings`): every `general_settings` key
LiteLLM reads has a verdict, and the gate judges each configured key by its value. The
database keys are judged here directly: LiteLLM's database cannot run on this machine (no
Prisma engines); `test_lane_settings_proxy.py` runs the rest through the real proxy."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest

from litellm_fastpath import compat
from litellm_fastpath.lane import groups
from litellm_fastpath.lane.settings import GENERAL_SETTINGS, Context, Verdict, why_off

LITELLM = Path(litellm.__file__).parent
FREE = Context(premium=False)
PREMIUM = Context(premium=True)


# -- the table is complete ---------------------------------------------------------------


# Functions and attributes through which LiteLLM hands its general settings around.
_SETTINGS_HELPERS = frozenset(
    {
        "_general_settings",
        "_proxy_general_settings",
        "_get_proxy_general_settings",
        "general_settings_view",
        "_current_general_settings",
        "_read_general_settings",
        "_get_general_settings",
        "typed_general_settings",
    }
)


def _is_settings(node: ast.AST, aliases: set[str]) -> bool:
    """Whether `node` evaluates to LiteLLM's general settings (as far as one function shows)."""
    match node:
        case ast.Name(id=name):
            return "general_settings" in name or name in aliases
        case ast.Attribute(attr=attr):
            return "general_settings" in attr
        case ast.Call(func=ast.Name(id=name) | ast.Attribute(attr=name)) if (
            name in _SETTINGS_HELPERS
        ):
            return True
        case ast.Call(func=ast.Attribute(attr="get"), args=[ast.Constant(value=key), *_]):
            return key == "general_settings"
        case ast.Subscript(slice=ast.Constant(value="general_settings")):
            return True
        case ast.Call(
            func=ast.Name(id="dict" | "cast" | "deepcopy" | "MappingProxyType"), args=args
        ):
            return any(_is_settings(arg, aliases) for arg in args)
        case ast.Await(value=value):
            return _is_settings(value, aliases)
        case ast.BoolOp(values=values):
            return any(_is_settings(value, aliases) for value in values)
    return False


def _key(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _keys_read(tree: ast.Module, constants: dict[str, str]) -> set[str]:
    found: set[str] = set()
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in [tree, *scopes]:
        aliases: set[str] = set()
        for node in ast.walk(scope):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if _is_settings(node.value, aliases):
                    aliases.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(scope):
            key = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop", "setdefault")
                and node.args
                and _is_settings(node.func.value, aliases)
            ):
                key = _key(node.args[0], constants)
            elif isinstance(node, ast.Subscript) and _is_settings(node.value, aliases):
                key = _key(node.slice, constants)
            elif (
                isinstance(node, ast.Compare)
                and isinstance(node.ops[0], (ast.In, ast.NotIn))
                and _is_settings(node.comparators[0], aliases)
            ):
                key = _key(node.left, constants)
            if key is not None and key != "general_settings":
                found.add(key)
    return found


# `NAME = "value"` (or `NAME: Final = "value"`) at a module's top level: keys LiteLLM names once.
_CONSTANT = re.compile(r"^([A-Z][A-Z0-9_]*)\s*(?::[^=\n]+)?=\s*\"([a-z0-9_]+)\"\s*$", re.M)


def keys_litellm_reads() -> set[str]:
    """`general_settings` keys read in LiteLLM's (and litellm_enterprise's) source, by the
    patterns its code uses: `.get("k")`, `["k"]`, `.pop("k")`, `"k" in ...` on the settings,
    their local aliases and the helpers that return them, keys as literals or module constants."""
    roots = [LITELLM, LITELLM.parent / "litellm_enterprise"]
    sources = {}
    constants: dict[str, str] = {}
    for path in (path for root in roots if root.exists() for path in root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        constants.update(_CONSTANT.findall(text))
        if "general_settings" in text or any(helper in text for helper in _SETTINGS_HELPERS):
            sources[path] = text
    found: set[str] = set()
    for text in sources.values():
        found |= _keys_read(ast.parse(text), constants)
    return found


def test_every_key_litellm_reads_has_a_verdict() -> None:
    read = keys_litellm_reads()
    # The scan sees most of what a whole-program analysis found (215 keys); far fewer would
    # mean it stopped seeing LiteLLM's patterns.
    assert len(read) > 150, sorted(read)
    missing = sorted(read - set(GENERAL_SETTINGS))
    assert not missing, f"general_settings keys LiteLLM reads without a lane verdict: {missing}"


def test_every_verdict_has_a_reason() -> None:
    for key, setting in GENERAL_SETTINGS.items():
        assert setting.reason.strip(), key
        assert (setting.inert is not None) == (setting.verdict is Verdict.OFF), key


# -- the gate judges values ----------------------------------------------------------------

# A production deployment's settings (LiteLLM's production guide and what its database adds at
# runtime): startup, background jobs, after the answer, routes the lane never serves.
PRODUCTION = {
    "master_key": "sk-master",
    "database_url": "postgresql://u:secret@db:5432/litellm",
    "database_connection_pool_limit": 10,
    "database_connection_timeout": 60,
    "database_connect_timeout": 20,
    "database_connection_pool_timeout": 30,
    "database_socket_timeout": 30,
    "database_statement_timeout": 30000,
    "database_lock_timeout": 5000,
    "database_idle_in_transaction_session_timeout": 60000,
    "database_max_idle_connection_lifetime": 300,
    "database_disable_prepared_statements": True,
    "database_extra_connection_params": {"sslmode": "require"},
    "disable_prisma_schema_update": True,
    "proxy_batch_write_at": 60,
    "proxy_batch_polling_interval": 3600,
    "alerting": ["slack"],
    "alerting_threshold": 300,
    "alert_types": ["llm_exceptions", "budget_alerts"],
    "alert_to_webhook_url": {"budget_alerts": "https://hooks.example/x"},
    "alerting_args": {"daily_report_frequency": 43200},
    "disable_spend_logs": True,
    "disable_error_logs": True,
    "store_prompts_in_spend_logs": True,
    "spend_logs_metadata_fields": ["user_api_key_alias"],
    "maximum_spend_logs_retention_period": "7d",
    "proxy_budget_rescheduler_min_time": 597,
    "proxy_budget_rescheduler_max_time": 605,
    "store_model_in_db": True,
    "proxy_config_reload_interval_seconds": 30,
    "coordination_redis": {"host": "redis", "port": 6379},
    "use_redis_transaction_buffer": True,
    "background_health_checks": True,
    "health_check_interval": 300,
    "user_api_key_cache_ttl": 60,
    "user_api_key_cache_max_size": 10_000,
    "ui_access_mode": "all",
    "key_management_system": "aws_kms",
    "allow_requests_on_db_unavailable": True,
    "disable_reset_budget": True,
    "supported_db_objects": ["models", "mcp"],
}


@pytest.mark.parametrize("premium", [FREE, PREMIUM], ids=["free", "premium"])
def test_a_production_deployment_with_a_database_leaves_the_lane_on(premium: Context) -> None:
    assert why_off(PRODUCTION, premium) == []


@pytest.mark.parametrize("key", sorted(PRODUCTION))
def test_each_database_startup_and_background_key_alone_leaves_the_lane_on(key: str) -> None:
    assert GENERAL_SETTINGS[key].verdict is not Verdict.OFF
    assert why_off({key: PRODUCTION[key]}, FREE) == []


# Values LiteLLM itself writes, or a settings form leaves behind: inert.
INERT = [
    {"alerting": []},
    {"allowed_ips": None},
    {"enforced_params": None},
    {"enforced_params": []},
    {"pass_through_endpoints": []},
    {"pass_through_endpoints": [{"path": "/v1/rerank", "target": "https://x"}]},
    {"forward_client_headers_to_llm_api": False},
    {"custom_auth": None},
    {"enable_jwt_auth": False},
    {"missing_session_id": "generate"},
    {"max_request_size_mb": 5},
    {"public_routes": ["/v1/models"]},
    {"admin_only_routes": ["/chat/completions"]},  # premium-only: inert without a license
    {"global_max_parallel_requests": 100},  # enforced by the legacy limiter only
]


@pytest.mark.parametrize("general", INERT, ids=lambda g: f"{next(iter(g))}={g[next(iter(g))]}")
def test_values_without_effect_leave_the_lane_on(general: dict[str, Any]) -> None:
    assert why_off(general, FREE) == []


OFF = [
    ({"custom_auth": "my_module.auth"}, FREE),
    ({"allowed_ips": ["10.0.0.1"]}, PREMIUM),
    ({"enforced_params": ["user"]}, PREMIUM),
    ({"pass_through_endpoints": [{"path": "/v1/messages", "target": "https://x"}]}, FREE),
    ({"pass_through_endpoints": [{"path": "/", "target": "https://x"}]}, FREE),
    ({"forward_client_headers_to_llm_api": True}, FREE),
    ({"litellm_key_header_name": "x-my-key"}, FREE),
    ({"enable_jwt_auth": True}, FREE),
    ({"enable_oauth2_auth": True}, FREE),
    ({"missing_session_id": "reject"}, FREE),
    ({"max_request_size_mb": 0.5}, PREMIUM),
    ({"public_routes": ["/v1/*"]}, PREMIUM),
    ({"public_routes": ["/ch*"]}, PREMIUM),
    ({"admin_only_routes": ["/chat/completions"]}, PREMIUM),
    ({"allowed_routes": ["/chat/completions"]}, FREE),
    ({"max_in_flight_requests_per_worker": 8}, FREE),
    ({"completion_model": "gpt-4o"}, FREE),
    ({"cancel_on_disconnect": True}, FREE),
    ({"global_max_parallel_requests": 100}, Context(premium=False, legacy_limiter=True)),
]


@pytest.mark.parametrize(
    ("general", "context"), [pytest.param(g, c, id=next(iter(g))) for g, c in OFF]
)
def test_values_the_lane_does_not_reproduce_turn_it_off_named_by_key(
    general: dict[str, Any], context: Context
) -> None:
    (key,) = general
    assert why_off({**PRODUCTION, **general}, context) == [f"general_settings.{key}"]


def test_an_unknown_key_turns_the_lane_off_by_its_name_never_its_value() -> None:
    why = why_off({**PRODUCTION, "some_future_setting": "sk-do-not-log"}, FREE)
    assert why == ["general_settings.some_future_setting"]


# -- what a database registers, and changes in place ---------------------------------------


def test_the_auto_router_cache_a_database_registers_is_idle_for_the_lane() -> None:
    from litellm.proxy.hooks.autorouter_baseline_cache import AutoRouterBaselineCache

    assert groups._idle_hook(AutoRouterBaselineCache(prisma_client=None))


@pytest.fixture
def settings_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """LiteLLM's own settings store as the proxy's `general_settings`, holding a master key."""
    from litellm.proxy.config_resolvers.settings_store import SettingsStore

    proxy_server = compat.proxy_server()
    store = SettingsStore("general_settings")
    store.load_yaml({"master_key": "sk-master"})
    monkeypatch.setattr(proxy_server, "general_settings", store)
    monkeypatch.setattr(proxy_server, "master_key", "sk-master")
    yield store


def test_settings_changed_in_place_are_noticed(settings_store: Any) -> None:
    """LiteLLM's `/config/update`, its database rows and UI flags change the settings store in
    place (the same object): the lane's refresh compares content."""
    router = litellm.Router(
        model_list=[{"model_name": "m", "litellm_params": {"model": "openai/gpt-4o"}}]
    )
    before = groups._router_state(router)
    assert groups._why_off(router, frozenset()) is None
    settings_store["forward_client_headers_to_llm_api"] = False  # a UI form's default
    inert = groups._router_state(router)
    assert inert != before
    assert groups._why_off(router, frozenset()) is None
    settings_store["forward_client_headers_to_llm_api"] = True
    assert groups._router_state(router) != inert
    assert groups._why_off(router, frozenset()) == (
        "general_settings.forward_client_headers_to_llm_api"
    )


def test_a_deployment_updated_under_the_same_id_is_noticed(settings_store: Any) -> None:
    """`store_model_in_db` reconciles and `/model/update` upsert a deployment under its id."""
    from litellm.types.router import Deployment

    deployment = {
        "model_name": "m",
        "litellm_params": {"model": "openai/gpt-4o", "api_base": "http://a", "rust": True},
        "model_info": {"id": "d-1"},
    }
    router = litellm.Router(model_list=[deployment])
    before = groups._router_state(router)
    changed = {
        **deployment,
        "litellm_params": {**deployment["litellm_params"], "api_base": "http://b"},
    }
    assert router.upsert_deployment(Deployment(**changed)) is not None
    assert [d["model_info"]["id"] for d in router.model_list] == ["d-1"]
    assert groups._router_state(router) != before


def test_the_docs_list_the_whole_table() -> None:
    from devtools.settings_doc import render

    docs = (Path(__file__).resolve().parents[1] / "docs" / "settings.md").read_text()
    assert render() in docs, "docs/settings.md: paste `python -m devtools.settings_doc`"
