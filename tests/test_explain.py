"""`python -m litellm_fastpath explain`: what it says of a config is what the running proxy
does with it (the path of each model's chat requests on `/metrics`, the decline reason, the
`x-litellm-rust` header), and proxy-wide settings that keep the lane off are named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.demo import model_list as demo_model_list
from devtools.deployments import deployment_kwargs
from devtools.polling import wait_until
from devtools.processes import ProxyProcess
from devtools.upstream import RecordingUpstream
from tests.test_metrics_proxy import Series, requests, scrape

HI = [{"role": "user", "content": "hi"}]
ACCELERATOR = "litellm_fastpath.proxy.accelerator"
SECRET = "sk-ant-do-not-print-me"
ENV = {"ANTHROPIC_API_KEY": SECRET, "LITELLM_MASTER_KEY": "sk-master-do-not-print"}


def explain(config: dict[str, Any], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "litellm_fastpath", "explain", str(path), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        timeout=120,
    )


def explained(config: dict[str, Any], tmp_path: Path) -> tuple[dict[str, Any], int]:
    done = explain(config, tmp_path, "--json")
    assert SECRET not in done.stdout + done.stderr
    return json.loads(done.stdout), done.returncode


def routes(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per model name, its routes by name."""
    return {m["model_name"]: {r["route"]: r for r in m["routes"]} for m in document["models"]}


def mixed_models(url: str) -> list[dict[str, Any]]:
    """The README's pair (its key by reference), a group with fallbacks, tiered prices, prices
    of its own, and a provider the fast path does not serve."""
    claude = {**deployment_kwargs("anthropic", url), "api_key": "os.environ/ANTHROPIC_API_KEY"}
    openai = deployment_kwargs("openai", url)
    return [
        {"model_name": "claude", "litellm_params": {**claude, "rust": True}},
        {"model_name": "claude-python", "litellm_params": claude},
        {"model_name": "with-fallbacks", "litellm_params": {**openai, "rust": True}},
        {
            "model_name": "tiered",
            "litellm_params": {**openai, "model": "openai/gpt-5.6-cyber", "rust": True},
        },
        {
            "model_name": "own-prices",
            "litellm_params": {**openai, "rust": True},
            "model_info": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
        },
        {
            "model_name": "unsupported",
            "litellm_params": {
                "model": "gemini/gemini-2.0-flash",
                "api_key": "g-key",
                "api_base": url,
                "rust": True,
            },
        },
    ]


def mixed_config(url: str) -> dict[str, Any]:
    return {
        "model_list": mixed_models(url),
        "litellm_settings": {"callbacks": [ACCELERATOR, "prometheus"], "fastpath_lane": True},
        "router_settings": {"num_retries": 0, "fallbacks": [{"with-fallbacks": ["claude"]}]},
        "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
    }


@pytest.fixture(scope="module")
def ran(upstream_server: RecordingUpstream) -> Iterator[tuple[Series, dict[str, bool]]]:
    """The mixed config through the real proxy: two chats per model after the key's first
    request; the scrape, and per model whether its answers carried `x-litellm-rust`."""
    config = mixed_config(upstream_server.url)
    proxy = ProxyProcess(
        config["model_list"],
        config["litellm_settings"],
        router_settings=config["router_settings"],
        extra_env={"ANTHROPIC_API_KEY": SECRET},
    )
    with proxy:
        proxy.post("/chat/completions", json={"model": "claude-python", "messages": HI})
        rust_header = {}
        for model in [m["model_name"] for m in config["model_list"]]:
            answers = [
                proxy.post("/chat/completions", json={"model": model, "messages": HI})
                for _ in range(2)
            ]
            rust_header[model] = all(a.headers.get("x-litellm-rust") == "true" for a in answers)
        for model in ("claude", "claude-python"):
            body = {"model": model, "messages": HI, "max_tokens": 16}
            for _ in range(2):
                assert proxy.post("/v1/messages", json=body).status_code == 200

        def landed() -> Series | None:
            series = scrape(proxy)
            lane = requests(series, "claude", "lane") + requests(
                series, "claude", "lane", route="messages"
            )
            return series if lane == 4 else None

        yield wait_until(landed, lambda: scrape(proxy), timeout=20), rust_header


def test_explain_agrees_with_the_running_proxy(
    ran: tuple[Series, dict[str, bool]], upstream_server: RecordingUpstream, tmp_path: Path
) -> None:
    series, rust_header = ran
    document, code = explained(mixed_config(upstream_server.url), tmp_path)
    assert document["lane"] is True
    by_model = routes(document)
    for model, chat in ((m, r["chat"]) for m, r in by_model.items()):
        taken = {path for path in ("lane", "rust", "python") if requests(series, model, path)}
        assert taken == {chat["path"]}, (model, chat, taken)
        assert rust_header[model] == (chat["path"] != "python"), model
        if chat["path"] == "python" and model != "claude-python":
            code_name = chat["reasons"][0].split(":")[0]
            declines = {
                dict(labels)["reason"]: n
                for (name, labels), n in series.items()
                if name == "litellm_fastpath_declines_total"
            }
            assert declines.get(code_name, 0) >= 1, (model, chat, declines)
    for model in ("claude", "claude-python"):
        messages = by_model[model]["messages"]
        taken = {p for p in ("lane", "rust", "python") if requests(series, model, p, "messages")}
        assert taken == {messages["path"]}, (model, messages, taken)
    assert by_model["claude"]["chat"]["path"] == "lane"
    assert by_model["claude"]["messages"]["path"] == "lane"
    assert by_model["claude-python"]["chat"]["reasons"] == ["rust: true is not set"]
    assert any("fallbacks" in r for r in by_model["with-fallbacks"]["chat"]["reasons"])
    assert by_model["unsupported"]["chat"]["path"] == "python"
    # A `rust: true` model that can never take the fast path fails the command, for CI.
    assert "unsupported" in document["failing"]
    assert code == 1


def test_the_readme_and_demo_configs(tmp_path: Path) -> None:
    readme = {
        "model_list": [
            {
                "model_name": "claude",
                "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5",
                    "api_key": "os.environ/ANTHROPIC_API_KEY",
                    "rust": True,
                },
            },
            {
                "model_name": "claude-python",
                "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5",
                    "api_key": "os.environ/ANTHROPIC_API_KEY",
                },
            },
        ],
        "litellm_settings": {"callbacks": [ACCELERATOR]},
    }
    document, code = explained(readme, tmp_path)
    assert code == 0
    assert document["lane"] is False
    assert document["lane_off"] == ["litellm_settings.fastpath_lane is not true", "no_master_key"]
    by_model = routes(document)
    assert by_model["claude"]["chat"]["path"] == "rust"
    assert by_model["claude"]["messages"]["path"] == "rust"
    assert by_model["claude-python"]["chat"]["path"] == "python"
    text = explain(readme, tmp_path).stdout
    assert "claude (anthropic, rust: true)" in text
    assert SECRET not in text

    demo = {
        "model_list": demo_model_list("http://127.0.0.1:9"),
        "litellm_settings": {"callbacks": [ACCELERATOR], "fastpath_lane": True},
        "general_settings": {"master_key": "sk-1234"},
    }
    document, code = explained(demo, tmp_path)
    assert code == 0
    by_model = routes(document)
    assert by_model["fast"]["chat"]["path"] == "lane"
    assert by_model["fast"]["chat stream"]["path"] == "lane"
    assert by_model["fast-embed"]["embeddings"]["path"] == "rust"
    assert by_model["fast-claude"]["messages"]["path"] == "lane"
    assert by_model["plain"]["chat"]["path"] == "python"


def one_model_config(
    general: dict[str, Any], router_settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The README's `rust: true` model alone, with the lane on and these settings."""
    config = {
        "model_list": mixed_models("http://127.0.0.1:9")[:1],
        "litellm_settings": {"callbacks": [ACCELERATOR], "fastpath_lane": True},
        "general_settings": general,
    }
    if router_settings is not None:
        config["router_settings"] = router_settings
    return config


@pytest.mark.parametrize(
    ("general", "reason"),
    [
        ({"master_key": "sk-1", "custom_auth": "tests.lane_keys.custom_auth"}, "custom_auth"),
        ({}, "no_master_key"),
    ],
)
def test_settings_that_keep_the_lane_off_are_named(
    tmp_path: Path, general: dict[str, Any], reason: str
) -> None:
    document, _code = explained(one_model_config(general), tmp_path)
    assert document["lane"] is False
    assert any(reason in r for r in document["lane_off"])
    chat = routes(document)["claude"]["chat"]
    assert chat["path"] == "rust"
    assert any(reason in r for r in chat["reasons"])


@pytest.mark.parametrize(
    ("router_settings", "reason"),
    [
        ({"default_litellm_params": {"temperature": 0.25}}, "router.default_litellm_params"),
        ({"routing_strategy": "latency-based-routing"}, "router.routing_strategy"),
        ({"enable_pre_call_checks": True}, "router.pre_call_checks"),
    ],
    ids=["default_litellm_params", "routing_strategy", "pre_call_checks"],
)
def test_router_settings_that_keep_the_lane_off_are_named(
    tmp_path: Path, router_settings: dict[str, Any], reason: str
) -> None:
    document, _code = explained(one_model_config({"master_key": "sk-1"}, router_settings), tmp_path)
    assert document["lane"] is False
    assert any(reason in r for r in document["lane_off"]), document["lane_off"]


def test_usage_based_routing_leaves_the_lane_on(tmp_path: Path) -> None:
    """The lane picks as `usage-based-routing-v2` picks (docs/lane.md), and its strategy's
    callback is the router's own: explain, like the lane's gate, keeps the lane on for it."""
    router_settings = {"routing_strategy": "usage-based-routing-v2"}
    document, _code = explained(one_model_config({"master_key": "sk-1"}, router_settings), tmp_path)
    assert document["lane"] is True, document["lane_off"]
    assert {route["path"] for route in routes(document)["claude"].values()} == {"lane"}


def test_a_database_leaves_the_lane_on(tmp_path: Path) -> None:
    """`database_url` acts at startup and after the answer (docs/settings.md): explain, like the
    lane's gate, keeps the lane on for it."""
    general = {"master_key": "sk-1", "database_url": "os.environ/DATABASE_URL"}
    document, _code = explained(one_model_config(general), tmp_path)
    assert document["lane"] is True, document["lane_off"]
    assert document["lane_off"] == []


def test_a_group_with_tpm_or_rpm_limits_takes_the_lane(tmp_path: Path) -> None:
    """Its answers and streams carry the router's usage headers from the lane (an itpm or otpm
    limit keeps the group with the proxy, named)."""
    config = one_model_config({"master_key": "sk-1"})
    config["model_list"][0]["litellm_params"] |= {"rpm": 100, "tpm": 10_000}
    document, _code = explained(config, tmp_path)
    found = routes(document)["claude"]
    assert {route["path"] for route in found.values()} == {"lane"}, found
    config["model_list"][0]["litellm_params"] |= {"itpm": 10_000}
    document, _code = explained(config, tmp_path)
    found = routes(document)["claude"]
    assert "lane" not in {route["path"] for route in found.values()}, found
    assert any("itpm" in r for r in found["chat"]["reasons"]), found
