"""The fast path's metrics on the proxy's `/metrics` (LiteLLM's prometheus callback on), with one
worker and with two (prometheus_client's multiprocess mode): after a known mix of requests, the
scraped series, read with prometheus_client's own parser, equal the mix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.deployments import deployment_kwargs, twin_models
from devtools.polling import wait_until
from devtools.processes import ProxyProcess
from devtools.proxy_logger import events_for, logged_proxy
from devtools.upstream import RecordingUpstream

pytestmark = pytest.mark.proxy

HI = [{"role": "user", "content": "hi"}]
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(proxy: ProxyProcess) -> Series:
    """Every sample of our metrics on `/metrics`, by name and labels."""
    response = proxy.get("/metrics/")  # the mounted app; `/metrics` redirects here
    assert response.status_code == 200, response.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name.startswith("litellm_fastpath_")
    }


def value(series: Series, name: str, **labels: str) -> float:
    return series.get((name, frozenset(labels.items())), 0.0)


def requests(series: Series, group: str, path: str, route: str = "chat") -> float:
    return value(
        series, "litellm_fastpath_requests_total", route=route, model_group=group, path=path
    )


def proxy_with(
    upstream: RecordingUpstream, log: Path, workers: int, **settings: Any
) -> ProxyProcess:
    models = twin_models("openai", deployment_kwargs("openai", upstream.url))
    return logged_proxy(models, log, workers=workers, **settings)


@pytest.fixture(scope="module", params=[1, 2], ids=["one-worker", "two-workers"])
def mixed(
    request: pytest.FixtureRequest, upstream_server: RecordingUpstream, tmp_path_factory: Any
) -> Iterator[tuple[ProxyProcess, int, Series]]:
    """A proxy with the lane and the prometheus callback, after the mix: 3 chats to the plain
    model, 6 to the `rust: true` one, 2 of them with `n` (which the fast path declines) and 2
    with an `origin` header (which the lane leaves to the proxy). Yields the proxy, its
    workers and the scrape once every count has landed."""
    workers = request.param
    log = tmp_path_factory.mktemp("metrics") / "events.jsonl"
    log.touch()
    # Several workers share their samples through files there (LiteLLM would pick a fixed
    # directory under /tmp); one worker keeps them in memory.
    env = {"PROMETHEUS_MULTIPROC_DIR": str(log.parent)} if workers > 1 else {}
    upstream_server.reset()
    proxy = proxy_with(
        upstream_server, log, workers, env=env, callbacks=("prometheus",), fastpath_lane=True
    )
    # uvicorn kills a worker that misses its 5 s health check; a worker importing LiteLLM's
    # prometheus logger on a loaded machine can.
    proxy.extra_args += ["--timeout_worker_healthcheck", "60"]
    with proxy:
        answers = [proxy.post("/chat/completions", json={"model": "plain-openai", "messages": HI})]
        answers += [
            proxy.post("/chat/completions", json={"model": "plain-openai", "messages": HI})
            for _ in range(2)
        ]
        rust = [
            proxy.post("/chat/completions", json={"model": "rust-openai", "messages": HI})
            for _ in range(6)
        ]
        declined = [
            proxy.post("/chat/completions", json={"model": "rust-openai", "messages": HI, "n": 2})
            for _ in range(2)
        ]
        with_origin = [
            proxy.post(
                "/chat/completions",
                json={"model": "rust-openai", "messages": HI},
                headers={"origin": "http://localhost"},
            )
            for _ in range(2)
        ]
        assert all(a.status_code == 200 for a in answers + rust + declined + with_origin)
        assert all(a.headers.get("x-litellm-rust") == "true" for a in rust + with_origin)
        assert not any("x-litellm-rust" in a.headers for a in answers + declined)
        events_for(log, "rust-openai", 10, timeout=30)

        def landed() -> Series | None:
            # The proxy counts its own calls at once; each worker folds its lane's counts every
            # second, so the lane's reasons can land after the requests they sent on.
            series = scrape(proxy)
            fast = requests(series, "rust-openai", "lane") + requests(series, "rust-openai", "rust")
            sent_on = value(series, "litellm_fastpath_lane_to_proxy_total", reason="lane_header")
            sent_on += value(series, "litellm_fastpath_lane_to_proxy_total", reason="lane_model")
            return series if fast >= 8 and sent_on >= 5 else None

        yield proxy, workers, wait_until(landed, lambda: scrape(proxy), timeout=20)


def test_requests_by_path_equal_the_mix(mixed: tuple[ProxyProcess, int, Series]) -> None:
    _proxy, workers, series = mixed
    assert requests(series, "plain-openai", "python") == 3
    assert requests(series, "rust-openai", "python") == 2  # the ones with `n`
    lane = requests(series, "rust-openai", "lane")
    rust = requests(series, "rust-openai", "rust")
    assert lane + rust == 8
    # Through the proxy's Rust path: the origin header's two, and the first request of the key
    # on a worker whose lane has no verdict for it yet (the first plain request taught one).
    assert 2 <= rust <= 2 + workers - 1
    assert value(series, "litellm_fastpath_lane_to_proxy_total", reason="lane_header") == 2
    assert value(series, "litellm_fastpath_lane_to_proxy_total", reason="lane_model") == 3
    if workers == 1:
        assert (lane, rust) == (6, 2)
        assert value(series, "litellm_fastpath_lane_to_proxy_total", reason="lane_auth") == 0


def test_declines_by_reason(mixed: tuple[ProxyProcess, int, Series]) -> None:
    _proxy, _workers, series = mixed
    assert value(series, "litellm_fastpath_declines_total", reason="n") == 2
    declined = {
        dict(labels)["reason"]: count
        for (name, labels), count in series.items()
        if name == "litellm_fastpath_declines_total"
    }
    assert declined == {"n": 2}
    # What the lane sent to the proxy with `n` in the body, under one bounded reason.
    reasons = {
        dict(labels)["reason"]
        for (name, labels), count in series.items()
        if name == "litellm_fastpath_lane_to_proxy_total" and count
    }
    assert reasons <= {"lane_header", "lane_auth", "lane_model", "lane_body", "lane_param"}


def test_upstream_durations_as_the_fast_path_measured_them(
    mixed: tuple[ProxyProcess, int, Series],
) -> None:
    _proxy, _workers, series = mixed
    for path in ("lane", "rust"):
        count = value(
            series, "litellm_fastpath_upstream_duration_seconds_count", route="chat", path=path
        )
        assert count == requests(series, "rust-openai", path)
        inf = value(
            series,
            "litellm_fastpath_upstream_duration_seconds_bucket",
            route="chat",
            path=path,
            le="+Inf",
        )
        assert inf == count
        total = value(
            series, "litellm_fastpath_upstream_duration_seconds_sum", route="chat", path=path
        )
        assert 0 < total < count * 5  # a loopback mock answers in milliseconds
    assert ("litellm_fastpath_lane_backlog", frozenset()) in series


def test_warm_connections_are_counted(mixed: tuple[ProxyProcess, int, Series]) -> None:
    """The warmer's requests to the `rust: true` upstream (every worker warms it at startup)."""
    proxy, workers, _series = mixed

    def warmed() -> Series | None:
        # Each worker folds its own warmer's counts every few seconds, and one worker's round
        # alone answers more than one request (2 connections by default): wait for every
        # worker's gauge, not for a total of answers.
        series = scrape(proxy)
        answered = value(series, "litellm_fastpath_warm_requests_total", outcome="answered")
        targets = value(series, "litellm_fastpath_warm_targets")
        return series if answered >= workers and targets >= workers else None

    series = wait_until(warmed, lambda: scrape(proxy), timeout=20)
    assert value(series, "litellm_fastpath_warm_requests_total", outcome="failed") == 0


def test_no_label_carries_a_key_or_request_text(mixed: tuple[ProxyProcess, int, Series]) -> None:
    _proxy, _workers, series = mixed
    values = {v for _name, labels in series for _k, v in labels}
    assert not any("sk-" in v or "hi" == v or "localhost" in v for v in values)


def test_without_the_prometheus_callback_nothing_is_registered(
    upstream: RecordingUpstream, tmp_path: Path
) -> None:
    log = tmp_path / "events.jsonl"
    log.touch()
    with proxy_with(upstream, log, 1, fastpath_lane=True) as proxy:
        assert proxy.post("/chat/completions", json={"model": "rust-openai", "messages": HI})
        # LiteLLM mounts no /metrics without its callback; ours registers nothing either.
        response = proxy.get("/metrics/")
        assert "litellm_fastpath_" not in response.text
