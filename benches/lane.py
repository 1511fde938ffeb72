"""The fast lane (`fastpath_lane: true`) through the proxy, against the plain model, in one run.

Two proxies on one mock provider: the usual one (`openai-python`, `openai-rust`) and one with the
lane on (`openai-rust` served by the lane). Open-loop load from its own process, arms
interleaved per step:
- added latency over direct-to-mock at 45 req/s (p50, p99), one worker;
- each arm's highest rate at p99 <= 50 ms and no errors, one worker, and the lane with two;
- callback count = request count on the lane proxy (a counting callback, read after the run).

`python -m benches.lane [--quick]`; results in `benches/results/lane.{md,json,png}`.
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
    AUTH,
    MESSAGES,
    RESULTS,
    RUST_HEADER,
    arg_parser,
    cpu_seconds,
    lat_stats,
    log,
    machine,
    machine_line,
    median,
    process_tree,
    run_loadgen,
    write_results,
)
from litellm_fastpath import mock_provider as mock_module
from litellm_fastpath.mock_provider import ServerProcess
from tests.harness import ProxyProcess

ROUTE = "/chat/completions"
BODY = {"messages": MESSAGES}
LATENCY_RATE = 45.0
P99_BAR_MS = 50.0
ARMS = ("python", "rust", "lane")
WARMUP = 20  # unrecorded requests before each step (`_common.loadgen_cmd`)


def start_proxy(mock_url: str, lane: bool, workers: int, log_path: Path) -> ProxyProcess:
    params = mock_module.deployment_kwargs("openai", mock_url)
    models = [
        {"model_name": "openai-python", "litellm_params": dict(params)},
        {"model_name": "openai-rust", "litellm_params": {**params, "rust": True}},
    ]
    settings: dict[str, Any] = {
        "callbacks": ["litellm_fastpath.proxy.accelerator", "tests.proxy_logger.recorder"]
    }
    if lane:
        settings["fastpath_lane"] = True
    root = str(Path(__file__).resolve().parents[1])
    proxy = ProxyProcess(
        models,
        settings,
        workers=workers,
        startup_timeout=120,
        extra_env={
            "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
            "FASTPATH_TEST_CALLBACK_LOG": str(log_path),
        },
    )
    proxy.__enter__()
    time.sleep(1.0 if workers == 1 else 3.0)
    for _ in range(3 * workers):  # hand every worker's lane the master key's verdict
        proxy.post(ROUTE, json={"model": "openai-python", **BODY})
        proxy.post(ROUTE, json={"model": "openai-rust", **BODY})
    time.sleep(0.5)
    return proxy


def step(url: str, model: str, rate: float, secs: float, rust: bool, pids: list[int]) -> dict:
    body = json.dumps({"model": model, **BODY})
    check = ("--expect-header", RUST_HEADER) if rust else ("--forbid-header", "x-litellm-rust")
    c0 = cpu_seconds(pids)
    res = run_loadgen(url + ROUTE, body, rate, secs, "-H", AUTH, *check, "--timeout", "5")
    cpu = cpu_seconds(pids) - c0
    return {
        "rate": rate,
        "ok": res["ok"],
        "errors": res["errors"],
        "achieved_rps": res["achieved_rps"],
        "lat": lat_stats(res["latencies_ms"]),
        "proxy_cpu_s_per_1k": cpu / max(1, res["ok"]) * 1000,
    }


def direct(mock_url: str, rate: float, secs: float) -> dict:
    body = json.dumps({"model": "gpt-4o-mini", "messages": MESSAGES})
    res = run_loadgen(mock_url + "/chat/completions", body, rate, secs)
    return {"lat": lat_stats(res["latencies_ms"])}


def held(s: dict) -> bool:
    return (
        s["errors"] == 0 and s["lat"]["p99"] <= P99_BAR_MS and s["achieved_rps"] >= 0.95 * s["rate"]
    )


def highest(run: Any, rates: list[float]) -> tuple[float, list[dict]]:
    best, steps = 0.0, []
    for rate in rates:
        s = run(rate)
        steps.append(s)
        log(f"  {rate:>6.0f} req/s: p99 {s['lat']['p99']:.1f} ms, errors {s['errors']}")
        if not held(s):
            break
        best = rate
    return best, steps


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__ or "", "shorter steps")
    parser.add_argument("--replot", action="store_true", help="redraw from results/lane.json")
    args = parser.parse_args(argv)
    if args.replot:
        data = json.loads((RESULTS / "lane.json").read_text())
        write_results("lane", render(data), data, plot=lambda plt: plot(data, plt), alt=PLOT_ALT)
        return 0
    secs = 4.0 if args.quick else 8.0
    reps = 1 if args.quick else 3
    data: dict[str, Any] = {"machine": machine()}
    workdir = Path(tempfile.mkdtemp(prefix="lane-bench-"))
    with ServerProcess() as mock:
        plain_log, lane_log = workdir / "plain.jsonl", workdir / "lane.jsonl"
        plain_log.touch()
        lane_log.touch()
        plain = start_proxy(mock.url, False, 1, plain_log)
        lane = start_proxy(mock.url, True, 1, lane_log)
        try:
            targets = {
                "python": (plain, "openai-python", False),
                "rust": (plain, "openai-rust", True),
                "lane": (lane, "openai-rust", True),
            }

            lane_steps: list[dict] = []

            def run(arm: str, rate: float, s: float = secs) -> dict:
                proxy, model, rust = targets[arm]
                result = step(proxy.url, model, rate, s, rust, process_tree(proxy.pid))
                if arm == "lane":
                    lane_steps.append(result)
                return result

            for arm in ARMS:  # warm every arm
                run(arm, 50, 2.0)
            log(f"added latency at {LATENCY_RATE:g} req/s, {reps} interleaved repetitions")
            latency: dict[str, list] = {arm: [] for arm in (*ARMS, "direct")}
            for rep in range(reps):
                latency["direct"].append(direct(mock.url, LATENCY_RATE, secs))
                for arm in ARMS:
                    latency[arm].append(run(arm, LATENCY_RATE))
                    log(f"  rep {rep} {arm}: p50 {latency[arm][-1]['lat']['p50']:.2f} ms")
            base = {q: median(d["lat"][q] for d in latency["direct"]) for q in ("p50", "p99")}
            added = {
                arm: {q: median(s["lat"][q] for s in latency[arm]) - base[q] for q in base}
                for arm in ARMS
            }
            data["latency"] = {"direct": base, "added": added, "steps": latency}
            log("highest rate at p99 <= 50 ms")
            python_rates = [40, 60, 80, 100, 120, 140, 160]
            lane_rates = [100, 150, 200, 250, 300, 350, 400, 500, 600, 800]
            rates = {}
            for arm, ladder in (
                ("python", python_rates),
                ("rust", python_rates),
                ("lane", lane_rates),
            ):
                log(f" {arm}")
                rates[arm] = highest(lambda r, a=arm: run(a, r), ladder)
            data["rates"] = {arm: {"max": m, "steps": s} for arm, (m, s) in rates.items()}
        finally:
            # SIGTERM with time to replay what was served (each worker drains, then exits).
            lane.stop(term_timeout=60)
            lane.__exit__(None, None, None)
            plain.__exit__(None, None, None)
        # Every request the lane proxy answered was logged once (read after its shutdown):
        # the measured ones, each step's 20 warm-up requests, and the 3 of the start.
        lines = [json.loads(line) for line in lane_log.read_text().splitlines()]
        answered = sum(s["ok"] + WARMUP for s in lane_steps) + 3
        data["callbacks"] = {
            "lane_events": sum(e.get("model_group") == "openai-rust" for e in lines),
            "lane_requests": answered,
            "lane_errors": sum(s["errors"] for s in lane_steps),
        }
        two = workdir / "two.jsonl"
        two.touch()
        lane2 = start_proxy(mock.url, True, 2, two)
        try:
            log(" lane, two workers")
            best2, steps2 = highest(
                lambda r: step(lane2.url, "openai-rust", r, secs, True, process_tree(lane2.pid)),
                lane_rates,
            )
        finally:
            lane2.stop(term_timeout=60)
            lane2.__exit__(None, None, None)
        data["rates"]["lane_2_workers"] = {"max": best2, "steps": steps2}
    write_results("lane", render(data), data, plot=lambda plt: plot(data, plt), alt=PLOT_ALT)
    return 0


PLOT_ALT = "p99 latency against offered rate, one worker: Python, rust: true, lane"


def plot(data: dict[str, Any], plt: Any) -> Any:
    """p99 per offered rate for each arm (one worker, and the lane with two)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, label in (
        ("python", "plain model"),
        ("rust", "rust: true"),
        ("lane", "lane"),
        ("lane_2_workers", "lane, 2 workers"),
    ):
        steps = data["rates"][arm]["steps"]
        ax.plot([s["rate"] for s in steps], [s["lat"]["p99"] for s in steps], "o-", label=label)
    ax.axhline(P99_BAR_MS, color="grey", linestyle=":", label="p99 50 ms")
    ax.set_xlabel("offered rate (req/s, open loop)")
    ax.set_ylabel("p99 latency (ms, log)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Through the proxy: p99 against rate")
    return fig


def render(data: dict[str, Any]) -> str:
    added = data["latency"]["added"]
    rates = data["rates"]
    py = added["python"]
    lines = [
        "# The fast lane through the proxy (`benches/lane.py`)",
        "",
        machine_line(data["machine"]),
        "",
        "| one worker, open loop | Python (plain model) | rust: true | lane | lane / Python |",
        "|---|---:|---:|---:|---:|",
    ]
    for q in ("p50", "p99"):
        lines.append(
            f"| added {q} at {LATENCY_RATE:g} req/s | {py[q]:.2f} ms | {added['rust'][q]:.2f} ms "
            f"| {added['lane'][q]:.2f} ms | **{added['lane'][q] / py[q]:.3f}x** |"
        )
    ratio = rates["lane"]["max"] / max(1.0, rates["python"]["max"])
    lines.append(
        f"| highest rate at p99 ≤ 50 ms | {rates['python']['max']:g} req/s | "
        f"{rates['rust']['max']:g} req/s | {rates['lane']['max']:g} req/s | **{ratio:.1f}x** |"
    )
    two = rates["lane_2_workers"]["max"] / max(1.0, rates["lane"]["max"])
    lines += [
        "",
        f"Lane with two workers: {rates['lane_2_workers']['max']:g} req/s "
        f"({two:.2f}x one worker). Rates are the last step of the ladder that held (no errors, "
        "p99 ≤ 50 ms, ≥ 95% achieved); ≥ when the ladder ran out.",
        "",
        f"Callbacks on the lane proxy: {data['callbacks']['lane_events']} events for "
        f"{data['callbacks']['lane_requests']} requests answered (errors: "
        f"{data['callbacks']['lane_errors']}; a request that timed out at the client may still "
        "have been answered and logged).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
