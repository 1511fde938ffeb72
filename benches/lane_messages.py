"""`/v1/messages` on the fast lane (`fastpath_lane: true`), in one run against: the plain model
(LiteLLM's Python path), `rust: true` without the lane, and LiteLLM's own native route
(`LITELLM_RUST=1`). Requests as the Anthropic SDK sends them (`x-api-key`, `anthropic-version`),
to `anthropic/…` on the package's mock provider, non-streaming and streamed (64 text deltas);
with `--provider bedrock`, to Bedrock Invoke (Claude) on the mock, where LiteLLM has no native
route (three arms).

Added latency over direct-to-mock at 45 req/s through one worker (p50, p99; to the last byte for
streams) and the proxy's CPU per request, open loop, arms interleaved per repetition; callback
count = request count on the lane proxy (read after its shutdown). Method: benches/README.md.

`python -m benches.lane_messages [--quick] [--provider bedrock]`; results in
`benches/results/lane-messages[-bedrock].{md,json}`.
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
from benches.lane import LATENCY_RATE, WARMUP
from litellm_fastpath import _native
from litellm_fastpath import mock_provider as mock_module
from litellm_fastpath.mock_provider import ServerProcess
from tests.harness import MASTER_KEY, ProxyProcess

ROUTE = "/v1/messages"
SDK_HEADERS = ("-H", f"x-api-key: {MASTER_KEY}", "-H", "anthropic-version: 2023-06-01")
ARMS = ("python", "native", "rust", "lane")
BEDROCK_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
KINDS = ("plain", "stream")
RUST = "x-litellm-rust: true"
FASTPATH = f"x-litellm-fastpath: {_native.__version__}"


def deployment(provider: str, mock_url: str) -> dict[str, Any]:
    if provider == "bedrock":
        return {
            "model": f"bedrock/{BEDROCK_ID}",
            "api_base": mock_url,
            "aws_access_key_id": "AKIDEXAMPLE",
            "aws_secret_access_key": "secret",
            "aws_region_name": "us-east-1",
        }
    return mock_module.deployment_kwargs("anthropic", mock_url)


def direct_target(provider: str, mock_url: str, stream: bool) -> tuple[str, dict[str, Any]]:
    """The same request sent straight to the mock: its URL and body."""
    if provider == "bedrock":
        path = "invoke-with-response-stream" if stream else "invoke"
        invoke = {"anthropic_version": "bedrock-2023-05-31", "messages": MESSAGES}
        return f"{mock_url}/model/{BEDROCK_ID}/{path}", {**invoke, "max_tokens": 64}
    return mock_url + ROUTE, body("claude-sonnet-4-5", stream)


def start_proxy(
    mock_url: str, log_path: Path, *, lane: bool, native: bool, provider: str
) -> ProxyProcess:
    params = deployment(provider, mock_url)
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


def body(model: str, stream: bool = False) -> dict[str, Any]:
    return {
        "model": model,
        "messages": MESSAGES,
        "max_tokens": 64,
        **({"stream": True} if stream else {}),
    }


def step(proxy: ProxyProcess, model: str, arm: str, secs: float, stream: bool) -> dict[str, Any]:
    # LiteLLM's native route tags its answers `x-litellm-rust: true` too; ours carry
    # `x-litellm-fastpath` as well.
    checks = {
        "python": ("--forbid-header", "x-litellm-rust"),
        "native": ("--expect-header", RUST, "--forbid-header", "x-litellm-fastpath"),
        "rust": ("--expect-header", RUST, "--expect-header", FASTPATH),
        "lane": ("--expect-header", RUST, "--expect-header", FASTPATH),
    }[arm]
    pids = process_tree(proxy.pid)
    cpu = cpu_seconds(pids)
    res = run_loadgen(
        proxy.url + ROUTE,
        json.dumps(body(model, stream)),
        LATENCY_RATE,
        secs,
        *SDK_HEADERS,
        *checks,
    )
    return {
        "ok": res["ok"],
        "errors": res["errors"],
        "lat": lat_stats(res["latencies_ms"]),
        "cpu_ms_per_request": (cpu_seconds(pids) - cpu) / max(1, res["ok"] + WARMUP) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__ or "", "shorter steps")
    parser.add_argument("--provider", choices=("anthropic", "bedrock"), default="anthropic")
    args = parser.parse_args(argv)
    provider = args.provider
    # LiteLLM's native `/v1/messages` route serves `anthropic/…` only.
    arms = ARMS if provider == "anthropic" else tuple(a for a in ARMS if a != "native")
    secs = 4.0 if args.quick else 8.0
    reps = 1 if args.quick else 3
    data: dict[str, Any] = {
        "machine": machine(),
        "rate": LATENCY_RATE,
        "provider": provider,
        "arms": list(arms),
    }
    workdir = Path(tempfile.mkdtemp(prefix="lane-messages-bench-"))
    logs = {name: workdir / f"{name}.jsonl" for name in ("plain", "native", "lane")}
    for path in logs.values():
        path.touch()
    with ServerProcess() as mock:
        plain = start_proxy(mock.url, logs["plain"], lane=False, native=False, provider=provider)
        native = None
        if "native" in arms:
            native = start_proxy(
                mock.url, logs["native"], lane=False, native=True, provider=provider
            )
        lane = start_proxy(mock.url, logs["lane"], lane=True, native=False, provider=provider)
        targets = {
            "python": (plain, "claude-python"),
            "native": (native, "claude-python"),
            "rust": (plain, "claude-rust"),
            "lane": (lane, "claude-rust"),
        }
        steps: dict[str, dict[str, list[dict[str, Any]]]] = {
            kind: {arm: [] for arm in (*arms, "direct")} for kind in KINDS
        }
        warm: list[dict[str, Any]] = []
        try:
            for arm in arms:
                proxy, model = targets[arm]
                for kind in KINDS:
                    warmed = step(proxy, model, arm, 2.0, kind == "stream")
                    if arm == "lane":
                        warm.append(warmed)
            for rep in range(reps):
                for kind in KINDS:
                    stream = kind == "stream"
                    url, sent = direct_target(provider, mock.url, stream)
                    direct = run_loadgen(url, json.dumps(sent), LATENCY_RATE, secs)
                    steps[kind]["direct"].append({"lat": lat_stats(direct["latencies_ms"])})
                    for arm in arms:
                        proxy, model = targets[arm]
                        steps[kind][arm].append(step(proxy, model, arm, secs, stream))
                        p50 = steps[kind][arm][-1]["lat"]["p50"]
                        log(f"  rep {rep} {kind} {arm}: p50 {p50:.2f} ms")
        finally:
            lane.stop(term_timeout=60)  # drains: every served request is replayed and logged
            for proxy in (lane, native, plain):
                if proxy is not None:
                    proxy.__exit__(None, None, None)
    data["kinds"] = {}
    for kind in KINDS:
        base = {q: median(s["lat"][q] for s in steps[kind]["direct"]) for q in ("p50", "p99")}
        data["kinds"][kind] = {
            "direct": base,
            "added": {
                arm: {q: median(s["lat"][q] for s in steps[kind][arm]) - base[q] for q in base}
                for arm in arms
            },
            "cpu_ms_per_request": {
                arm: median(s["cpu_ms_per_request"] for s in steps[kind][arm]) for arm in arms
            },
        }
    data["steps"] = steps
    lane_steps = [*warm, *(s for kind in KINDS for s in steps[kind]["lane"])]
    events = [json.loads(line) for line in logs["lane"].read_text().splitlines()]
    data["callbacks"] = {
        "lane_events": sum(e.get("model_group") == "claude-rust" for e in events),
        # Measured and warm-up steps, each with its unrecorded requests, and the 3 of the start.
        "lane_requests": sum(s["ok"] + WARMUP for s in lane_steps) + 3,
        "lane_errors": sum(s["errors"] for s in lane_steps),
        "lane_served": max((e.get("lane") or {}).get("served", 0) for e in events),
    }
    name = "lane-messages" if provider == "anthropic" else f"lane-messages-{provider}"
    write_results(name, render(data), data)
    return 0


def render(data: dict[str, Any]) -> str:
    arms = data.get("arms", list(ARMS))
    provider = data.get("provider", "anthropic")
    names = {
        "python": "Python (plain model)",
        "native": "LiteLLM native (`LITELLM_RUST=1`)",
        "rust": "`rust: true`",
        "lane": "lane",
    }
    against = [a for a in ("python", "native") if a in arms]
    target = "Bedrock Invoke (Claude)" if provider == "bedrock" else "`anthropic/…`"
    lines = [
        f"# `/v1/messages` to {target} on the fast lane (`benches/lane_messages.py`)",
        "",
        machine_line(data["machine"]),
        "",
        f"One worker, open loop at {data['rate']:g} req/s, Anthropic SDK headers; added latency"
        " over the same request sent to the mock directly (to the last byte of a stream), and"
        " the proxy's CPU per request (its process tree).",
        "",
        "| | "
        + " | ".join(names[a] for a in arms)
        + " | "
        + " | ".join(f"lane / {'plain' if a == 'python' else a}" for a in against)
        + " |",
        "|---|" + "---:|" * (len(arms) + len(against)),
    ]

    def row(label: str, values: dict[str, float]) -> str:
        cells = [f"{values[a]:.2f} ms" for a in arms]
        ratios = [f"**{values['lane'] / values[a]:.3f}x**" for a in against]
        return f"| {label} | " + " | ".join(cells + ratios) + " |"

    for kind, label in (("plain", "non-streaming"), ("stream", "streamed, 64 deltas")):
        added = data["kinds"][kind]["added"]
        for q in ("p50", "p99"):
            lines.append(row(f"{label}: added {q}", {a: added[a][q] for a in arms}))
        lines.append(
            row(f"{label}: proxy CPU per request", data["kinds"][kind]["cpu_ms_per_request"])
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
