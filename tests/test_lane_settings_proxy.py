"""The lane's settings gate through the real proxy: a production deployment's settings (without
the database, which cannot run here: see `test_lane_settings.py`) leave the lane serving as
the proxy answers, settings it does not reproduce turn it off with the setting in the lane's
counts, and what the bypassed middleware shows an operator (in-flight requests, HSTS) counts
lane requests too."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.deployments import deployment_kwargs, twin_models
from devtools.polling import wait_until
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.proxy_logger import lane_counts, logged_proxy, wait_for_count
from devtools.upstream import RecordingUpstream, Reply
from tests.conftest import VOLATILE_HEADERS, stable_headers

pytestmark = pytest.mark.proxy

HI = [{"role": "user", "content": "hi"}]

# LiteLLM's production guide without the database: the lane stays on at these values.
PRODUCTION = {
    "master_key": MASTER_KEY,
    "alerting": ["slack"],
    "alerting_threshold": 300,
    "proxy_batch_write_at": 60,
    "disable_spend_logs": True,
    "disable_error_logs": True,
    "store_prompts_in_spend_logs": True,
    "proxy_budget_rescheduler_min_time": 597,
    "proxy_budget_rescheduler_max_time": 605,
    "user_api_key_cache_ttl": 60,
    # Values without effect (premium-only settings would stop a proxy without a license).
    "allowed_ips": None,
    "enforced_params": None,
    "pass_through_endpoints": [],
    "forward_client_headers_to_llm_api": False,
}


def _proxy(upstream: RecordingUpstream, log: Path, general: dict[str, Any]) -> ProxyProcess:
    models = twin_models("openai", deployment_kwargs("openai", upstream.url))
    env = {
        "LITELLM_ENABLE_HSTS": "true",
        # Slack alerts go to the recording upstream (none is expected).
        "SLACK_WEBHOOK_URL": f"{upstream.url}/slack",
    }
    proxy = logged_proxy(models, log, env=env, fastpath_lane=True)
    proxy.general_settings = general
    return proxy


@pytest.fixture(scope="module")
def production(upstream_server: RecordingUpstream, log: Path) -> Iterator[ProxyProcess]:
    with _proxy(upstream_server, log, PRODUCTION) as proxy:
        # The first request of a key goes through the proxy, which hands the lane its verdict.
        assert proxy.post("/chat/completions", json={"model": "plain-openai", "messages": HI})
        yield proxy


def test_production_settings_leave_the_lane_serving_as_the_proxy_answers(
    production: ProxyProcess, upstream: RecordingUpstream, log: Path
) -> None:
    served = lane_counts(log).get("served", 0)
    answers = {}
    for model in ("plain-openai", "rust-openai"):
        before = len(upstream.requests)
        answers[model] = production.post("/chat/completions", json={"model": model, "messages": HI})
        assert answers[model].status_code == 200
        assert len(upstream.requests) == before + 1
    plain, rust = answers["plain-openai"], answers["rust-openai"]
    assert rust.headers["x-litellm-rust"] == "true"
    volatile = {"model": None, "id": None, "created": None}
    assert {**plain.json(), **volatile} == {**rust.json(), **volatile}
    # LiteLLM's security headers, HSTS included, on the lane's answer as on the proxy's.
    volatile_headers = VOLATILE_HEADERS | {
        "x-litellm-model-id",
        "x-litellm-model-group",
        "x-litellm-key-spend",
    }
    assert stable_headers(plain, volatile_headers) == stable_headers(rust, volatile_headers)
    assert rust.headers["strict-transport-security"] == plain.headers["strict-transport-security"]
    counts = wait_for_count(log, "served", served + 1)
    assert not any(name.startswith("lane_off") for name in counts)


def _in_flight(proxy: ProxyProcess) -> int:
    response = proxy.get("/health/backlog")
    assert response.status_code == 200
    return int(response.json()["in_flight_requests"])


@pytest.mark.parametrize("model", ["plain-openai", "rust-openai"])
def test_a_request_in_flight_counts_in_the_backlog_on_the_lane_as_on_the_proxy(
    production: ProxyProcess, upstream: RecordingUpstream, model: str
) -> None:
    """`/health/backlog` (and LiteLLM's graceful shutdown) counts requests in flight in the
    worker; the lane's count in it (the backlog request itself is one)."""
    assert wait_until(lambda: _in_flight(production) == 1, lambda: _in_flight(production))
    upstream.enqueue(Reply(delay_s=3.0))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        call = pool.submit(
            production.post, "/chat/completions", json={"model": model, "messages": HI}
        )
        wait_until(lambda: _in_flight(production) == 2, lambda: _in_flight(production))
        assert call.result().status_code == 200
    assert wait_until(lambda: _in_flight(production) == 1, lambda: _in_flight(production))


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ({"custom_auth": "tests.lane_keys.custom_auth"}, "sk-custom-ok"),
        ({"forward_client_headers_to_llm_api": True}, MASTER_KEY),
    ],
    ids=["custom_auth", "forward_client_headers_to_llm_api"],
)
def test_a_setting_the_lane_does_not_reproduce_turns_it_off_named_in_its_counts(
    upstream: RecordingUpstream, tmp_path: Path, setting: dict[str, Any], key: str
) -> None:
    log = tmp_path / "events.jsonl"
    log.touch()
    (name,) = setting
    with _proxy(upstream, log, {**PRODUCTION, **setting}) as proxy:
        for _ in range(2):
            response = proxy.post(
                "/chat/completions",
                json={"model": "rust-openai", "messages": HI},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert response.status_code == 200
        # The total last: the lane counts a request's reason, then the total (a request's
        # event can be logged while the next one is between the two).
        counts = wait_for_count(log, "lane_off", 2)
        assert counts[f"lane_off:general_settings.{name}"] >= 2
        assert counts.get("served", 0) == 0
        assert f"fastpath_lane: off (general_settings.{name})" in proxy.log_text()
