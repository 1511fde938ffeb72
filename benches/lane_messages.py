"""`/v1/messages` on the fast lane (`fastpath_lane: true`), in one run against: the plain model
(LiteLLM's Python path), `rust: true` without the lane, and LiteLLM's own native route
(`LITELLM_RUST=1`). Requests as the Anthropic SDK sends them (`x-api-key`, `anthropic-version`),
non-streaming, to `anthropic/…` on the package's mock provider.

Added latency over direct-to-mock at 45 req/s through one worker (p50, p99), open loop, arms
interleaved per repetition; callback count = request count on the lane proxy (read after its
shutdown). Method: benches/README.md.

`python -m benches.lane_messages [--quick]`; results in `benches/results/lane-messages.{md,json}`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benches._common import (
    MESSAGES,
    arg_parser,
    lat_stats,
    log,
    machine,
    machine_line,
    median,
    run_loadgen,
    write_results,
)
from benches.lane import LATENCY_RATE, WARMUP
from litellm_fastpath import _native
from litellm_fastpath import mock_provider as mock_module
from litellm_fastpath.mock_provider import ServerProcess
from tests.harness import MASTER_KEY, ProxyProcess

ROUTE = "/v1/messages"
SDK_HEADERS = ("-H", f"x-api-key: {MASTER_KEY}", "-H", "anthropic-version: 2023-06-01")
ARMS = ("python", "native", "rust", "lane")
RUST = "x-litellm-rust: true"
FASTPATH = f"x-litellm-fastpath: {_native.__version__}"


def start_proxy(mock_url: str, log_path: Path, *, lane: bool, native: bool) -> ProxyProcess:
    params = mock_module.deployment_kwargs("anthropic", mock_url)
    models = [
        {"model_name": "claude-python", "litellm_params": dict(params)},
        {"model_name": "claude-rust", "litellm_params": {**params, "rust": True}},
    ]
    settings: dict[str, Any] = {
        "callbacks": ["litellm_fastpath.proxy.accelerator", "tests.proxy_logger.recorder"]
    }
    if lane:
        settings["fastpath_lane"] = True
    root = str(Path(__file__).resolve().parents[1])
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
        "FASTPATH_TEST_CALLBACK_LOG": str(log_path),
    }
    if native:
        env["LITELLM_RUST"] = "1"
    proxy = ProxyProcess(models, settings, workers=1, startup_timeout=120, extra_env=env)
    proxy.__enter__()
    time.sleep(1.0)
    for _ in range(3):  # hand the lane the master key's verdict
        for model in ("claude-python", "claude-rust"):
            proxy.post(ROUTE, json=body(model))
    time.sleep(0.5)
    return proxy


def body(model: str) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "max_tokens": 64}


def step(url: str, model: str, arm: str, secs: float) -> dict[str, Any]:
    # LiteLLM's native route tags its answers `x-litellm-rust: true` too; ours carry
    # `x-litellm-fastpath` as well.
    checks = {
        "python": ("--forbid-header", "x-litellm-rust"),
        "native": ("--expect-header", RUST, "--forbid-header", "x-litellm-fastpath"),
        "rust": ("--expect-header", RUST, "--expect-header", FASTPATH),
        "lane": ("--expect-header", RUST, "--expect-header", FASTPATH),
    }[arm]
    res = run_loadgen(
        url + ROUTE, json.dumps(body(model)), LATENCY_RATE, secs, *SDK_HEADERS, *checks
    )
    return {"ok": res["ok"], "errors": res["errors"], "lat": lat_stats(res["latencies_ms"])}


def main(argv: list[str] | None = None) -> int:
    args = arg_parser(__doc__ or "", "shorter steps").parse_args(argv)
    secs = 4.0 if args.quick else 8.0
    reps = 1 if args.quick else 3
    data: dict[str, Any] = {"machine": machine(), "rate": LATENCY_RATE}
    workdir = Path(tempfile.mkdtemp(prefix="lane-messages-bench-"))
    logs = {name: workdir / f"{name}.jsonl" for name in ("plain", "native", "lane")}
    for path in logs.values():
        path.touch()
    with ServerProcess() as mock:
        plain = start_proxy(mock.url, logs["plain"], lane=False, native=False)
        native = start_proxy(mock.url, logs["native"], lane=False, native=True)
        lane = start_proxy(mock.url, logs["lane"], lane=True, native=False)
        targets = {
            "python": (plain, "claude-python"),
            "native": (native, "claude-python"),
            "rust": (plain, "claude-rust"),
            "lane": (lane, "claude-rust"),
        }
        steps: dict[str, list[dict[str, Any]]] = {arm: [] for arm in (*ARMS, "direct")}
        warm: dict[str, dict[str, Any]] = {}
        try:
            for arm in ARMS:
                proxy, model = targets[arm]
                warm[arm] = step(proxy.url, model, arm, 2.0)
            for rep in range(reps):
                direct = run_loadgen(
                    mock.url + ROUTE, json.dumps(body("claude-sonnet-4-5")), LATENCY_RATE, secs
                )
                steps["direct"].append({"lat": lat_stats(direct["latencies_ms"])})
                for arm in ARMS:
                    proxy, model = targets[arm]
                    steps[arm].append(step(proxy.url, model, arm, secs))
                    log(f"  rep {rep} {arm}: p50 {steps[arm][-1]['lat']['p50']:.2f} ms")
        finally:
            lane.stop(term_timeout=60)  # drains: every served request is replayed and logged
            for proxy in (lane, native, plain):
                proxy.__exit__(None, None, None)
    base = {q: median(s["lat"][q] for s in steps["direct"]) for q in ("p50", "p99")}
    data["added"] = {
        arm: {q: median(s["lat"][q] for s in steps[arm]) - base[q] for q in base} for arm in ARMS
    }
    data["direct"] = base
    data["steps"] = steps
    events = [json.loads(line) for line in logs["lane"].read_text().splitlines()]
    data["callbacks"] = {
        "lane_events": sum(e.get("model_group") == "claude-rust" for e in events),
        # Measured and warm-up steps, each with its unrecorded requests, and the 3 of the start.
        "lane_requests": sum(s["ok"] + WARMUP for s in [warm["lane"], *steps["lane"]]) + 3,
        "lane_errors": sum(s["errors"] for s in steps["lane"]),
        "lane_served": max((e.get("lane") or {}).get("served", 0) for e in events),
    }
    write_results("lane-messages", render(data), data)
    return 0


def render(data: dict[str, Any]) -> str:
    added = data["added"]
    py = added["python"]
    lines = [
        "# `/v1/messages` on the fast lane (`benches/lane_messages.py`)",
        "",
        machine_line(data["machine"]),
        "",
        f"One worker, open loop at {data['rate']:g} req/s, non-streaming, Anthropic SDK headers;"
        " added latency over the same request sent to the mock directly.",
        "",
        "| | Python (plain model) | LiteLLM native (`LITELLM_RUST=1`) | `rust: true` | lane "
        "| lane / Python | lane / native |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for q in ("p50", "p99"):
        lines.append(
            f"| added {q} | {py[q]:.2f} ms | {added['native'][q]:.2f} ms | "
            f"{added['rust'][q]:.2f} ms | {added['lane'][q]:.2f} ms | "
            f"**{added['lane'][q] / py[q]:.3f}x** | "
            f"**{added['lane'][q] / added['native'][q]:.3f}x** |"
        )
    calls = data["callbacks"]
    lines += [
        "",
        f"Lane proxy: {calls['lane_served']} requests served by the lane; "
        f"{calls['lane_events']} callback events for {calls['lane_requests']} requests answered "
        f"(errors: {calls['lane_errors']}).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
