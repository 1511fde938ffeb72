"""In-process bench: `await litellm.acompletion(..., rust=True)` vs LiteLLM's Python path.

For each provider (openai, anthropic, bedrock) the same call is made sequentially against the
mock provider (a separate process, `benches/mock_provider.py`), alternating blocks of the two
arms (A B A B ...) after a warm-up, so drift shows up in the per-block medians. A rust call
counts as Rust only when its response carries
`_hidden_params["additional_headers"]["x-litellm-rust"] == "true"`; any other is reported as
"not served by Rust" and fails the run.

CPU per call is the `time.process_time()` delta around the await: it includes every thread of
this process, so the Rust runtime's threads are charged to the Rust arm (as they should be).

    python benches/inprocess.py            # full: 1000 calls per arm and provider
    python benches/inprocess.py --quick    # CI: 200 calls per arm and provider (BENCH_QUICK=1)

Bar (issue): median per-call latency of the Rust arm <= 0.25x the Python arm, per provider.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from typing import Any

from _common import (
    PROVIDERS,
    MockProvider,
    cpu_seconds,
    deployment_kwargs,
    env_flag,
    fmt,
    loadavg,
    machine,
    machine_line,
    median,
    percentile,
    system_busy_seconds,
    wait_quiet,
    write_results,
)

BAR = 0.25
MESSAGES = [{"role": "user", "content": "Say hello."}]
ARMS = ("python", "rust")


def served_by_rust(response: Any) -> bool:
    hidden = getattr(response, "_hidden_params", None) or {}
    headers = hidden.get("additional_headers") or {}
    return headers.get("x-litellm-rust") == "true"


async def _call(litellm: Any, kwargs: dict[str, Any], rust: bool) -> Any:
    if rust:
        return await litellm.acompletion(messages=MESSAGES, rust=True, **kwargs)
    return await litellm.acompletion(messages=MESSAGES, **kwargs)


async def bench_provider(
    litellm: Any, provider: str, url: str, blocks: int, block_size: int, warmup: int
) -> dict[str, Any]:
    kwargs = deployment_kwargs(provider, url)
    for _ in range(warmup):
        for arm in ARMS:
            await _call(litellm, kwargs, arm == "rust")

    data: dict[str, dict[str, Any]] = {
        arm: {"lat_ms": [], "cpu_ms": [], "block_medians_ms": [], "not_rust": 0, "rust_on_py": 0}
        for arm in ARMS
    }
    perf, cpu = time.perf_counter, time.process_time
    for _block in range(blocks):
        for arm in ARMS:
            rust = arm == "rust"
            d = data[arm]
            block_lat: list[float] = []
            for _ in range(block_size):
                c0, t0 = cpu(), perf()
                response = await _call(litellm, kwargs, rust)
                t1, c1 = perf(), cpu()
                is_rust = served_by_rust(response)
                if rust and not is_rust:
                    d["not_rust"] += 1  # the Python path answered: never credited to Rust
                    continue
                if not rust and is_rust:
                    d["rust_on_py"] += 1
                block_lat.append((t1 - t0) * 1000)
                d["cpu_ms"].append((c1 - c0) * 1000)
            d["lat_ms"].extend(block_lat)
            d["block_medians_ms"].append(round(median(block_lat), 4))

    result: dict[str, Any] = {"provider": provider, "arms": {}}
    for arm in ARMS:
        d = data[arm]
        lat = sorted(d["lat_ms"])
        result["arms"][arm] = {
            "calls": len(lat),
            "median_ms": median(lat),
            "p99_ms": percentile(lat, 99),
            "mean_ms": sum(lat) / len(lat) if lat else float("nan"),
            "cpu_ms_per_call": sum(d["cpu_ms"]) / len(d["cpu_ms"]) if d["cpu_ms"] else float("nan"),
            "block_medians_ms": d["block_medians_ms"],
            "not_served_by_rust": d["not_rust"],
            "python_arm_served_by_rust": d["rust_on_py"],
        }
    py, rs = result["arms"]["python"], result["arms"]["rust"]
    result["ratio_median"] = rs["median_ms"] / py["median_ms"]
    result["ratio_p99"] = rs["p99_ms"] / py["p99_ms"]
    result["ratio_cpu"] = rs["cpu_ms_per_call"] / py["cpu_ms_per_call"]
    result["bar_met"] = (
        result["ratio_median"] <= BAR and rs["not_served_by_rust"] == 0 and rs["calls"] > 0
    )
    return result


async def mock_capacity(url: str, seconds: float) -> dict[str, Any]:
    """Closed-loop capacity of the mock with the load generator (both separate processes)."""
    body = json.dumps({"model": "gpt-4o-mini", "messages": MESSAGES})
    out: dict[str, Any] = {}
    for conns in (1, 16):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(__import__("_common").BENCHES / "loadgen.py"),
            "--url",
            f"{url}/chat/completions",
            "--body",
            body,
            "--closed",
            str(conns),
            "--duration",
            str(seconds),
            "--no-latencies",
            stdout=asyncio.subprocess.PIPE,
        )
        stdout, _ = await asyncio.wait_for(proc.communicate(), timeout=seconds + 30)
        res = json.loads(stdout)
        out[f"closed_{conns}"] = {
            k: res[k] for k in ("achieved_rps", "p50_ms", "p99_ms", "errors", "gen_cpu_util")
        }
    return out


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# In-process: `litellm.acompletion(..., rust=True)` vs LiteLLM's Python path",
        "",
        machine_line(meta["machine"]),
        "",
        f"Mode: {meta['mode']}; {meta['blocks']} blocks x {meta['block_size']} sequential calls "
        f"per arm and provider, arms interleaved (python, rust, python, rust, ...), "
        f"{meta['warmup']} warm-up calls per arm first; event loop: {meta['loop']}. "
        "Mock provider in a separate process on loopback.",
        "",
        "| provider | arm | calls | median ms | p99 ms | CPU ms/call | "
        "median rust/py | p99 rust/py | CPU rust/py | bar ≤ 0.25 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in results:
        py, rs = r["arms"]["python"], r["arms"]["rust"]
        lines.append(
            f"| {r['provider']} | python | {py['calls']} | {fmt(py['median_ms'], 3)} | "
            f"{fmt(py['p99_ms'], 3)} | {fmt(py['cpu_ms_per_call'], 3)} | | | | |"
        )
        verdict = "**met**" if r["bar_met"] else "**NOT met**"
        lines.append(
            f"| {r['provider']} | rust | {rs['calls']} | {fmt(rs['median_ms'], 3)} | "
            f"{fmt(rs['p99_ms'], 3)} | {fmt(rs['cpu_ms_per_call'], 3)} | "
            f"**{fmt(r['ratio_median'], 3)}** | {fmt(r['ratio_p99'], 3)} | "
            f"{fmt(r['ratio_cpu'], 3)} | {verdict} |"
        )
    lines += [
        "",
        "Per-block medians (ms), in run order — drift check:",
        "",
    ]
    for r in results:
        for arm in ARMS:
            blocks = ", ".join(fmt(v, 3) for v in r["arms"][arm]["block_medians_ms"])
            lines.append(f"- {r['provider']} {arm}: {blocks}")
    problems = [
        f"{r['provider']}: {r['arms']['rust']['not_served_by_rust']} rust calls answered by Python"
        for r in results
        if r["arms"]["rust"]["not_served_by_rust"]
    ] + [
        f"{r['provider']}: {r['arms']['python']['python_arm_served_by_rust']} python calls "
        "carried x-litellm-rust"
        for r in results
        if r["arms"]["python"]["python_arm_served_by_rust"]
    ]
    foreign = ", ".join(
        f"{r['provider']} {r['foreign_cores']:.2f} (loadavg {r['loadavg_after']})" for r in results
    )
    lines += [
        "",
        f"Other processes on the machine used on average (cores): {foreign}. "
        "Anything well above 0 means the absolute numbers are noisy; the ratios compare arms "
        "interleaved in the same run.",
        "",
    ]
    if problems:
        lines += ["Problems:", "", *[f"- {p}" for p in problems], ""]
    cap = meta.get("mock_capacity")
    if cap:
        c1, c16 = cap["closed_1"], cap["closed_16"]
        lines += [
            f"Mock provider capacity (closed loop, `benches/loadgen.py`, separate processes): "
            f"{c1['achieved_rps']:.0f} req/s on 1 connection (p50 {fmt(c1['p50_ms'], 3)} ms), "
            f"{c16['achieved_rps']:.0f} req/s on 16 connections "
            f"(p99 {fmt(c16['p99_ms'], 3)} ms) — far above anything measured here.",
            "",
        ]
    lines += [
        "Notes: latency is wall time around each `await`; CPU is the `time.process_time()` delta "
        "around it, which counts all threads of this process (the Rust runtime's threads "
        "included). A rust call is counted only if its response carries "
        '`_hidden_params["additional_headers"]["x-litellm-rust"] == "true"`. '
        "`LITELLM_LOCAL_MODEL_COST_MAP=True`; no callbacks configured.",
        "",
    ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> int:
    import litellm

    import litellm_fastpath

    litellm_fastpath.install()
    litellm.suppress_debug_info = True
    info = machine()
    if args.wait_quiet > 0:
        print(f"waiting up to {args.wait_quiet:.0f}s for an idle machine", file=sys.stderr)
        info["busy_cores_before"] = wait_quiet(args.wait_quiet)
    results: list[dict[str, Any]] = []
    with MockProvider() as mock:
        cap = await mock_capacity(mock.url, 1.0 if args.quick else 2.0) if args.capacity else None
        for provider in args.providers:
            gc.collect()
            w0, b0, o0 = time.monotonic(), system_busy_seconds(), time.process_time()
            m0 = cpu_seconds([mock.pid])
            r = await bench_provider(
                litellm, provider, mock.url, args.blocks, args.block_size, args.warmup
            )
            ours = time.process_time() - o0 + cpu_seconds([mock.pid]) - m0
            wall = time.monotonic() - w0
            # CPU the rest of the machine used meanwhile (other builds/tests skew results).
            r["foreign_cores"] = max(0.0, (system_busy_seconds() - b0 - ours) / wall)
            r["loadavg_after"] = loadavg()
            results.append(r)
            print(
                f"{provider}: python {r['arms']['python']['median_ms']:.3f} ms, "
                f"rust {r['arms']['rust']['median_ms']:.3f} ms, ratio {r['ratio_median']:.3f}",
                file=sys.stderr,
                flush=True,
            )
    meta = {
        "machine": info,
        "mode": "quick" if args.quick else "full",
        "blocks": args.blocks,
        "block_size": args.block_size,
        "warmup": args.warmup,
        "loop": args.loop_name,
        "mock_capacity": cap,
        "bar": BAR,
    }
    markdown = render(results, meta)
    print(markdown)
    if not args.no_write:
        md, js = write_results("inprocess", markdown, {"meta": meta, "results": results})
        print(f"wrote {md} and {js}", file=sys.stderr)
    ok = all(r["arms"]["rust"]["not_served_by_rust"] == 0 for r in results)
    if args.check_bar:
        ok = ok and all(r["bar_met"] for r in results)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        default=env_flag("BENCH_QUICK"),
        help="200 calls per arm (4 blocks x 50); also BENCH_QUICK=1",
    )
    p.add_argument("--providers", nargs="+", choices=PROVIDERS, default=list(PROVIDERS))
    p.add_argument("--blocks", type=int, default=None, help="blocks per arm (default 4 / 10)")
    p.add_argument(
        "--block-size", type=int, default=None, help="calls per block (default 50 / 100)"
    )
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls per arm")
    p.add_argument("--uvloop", action="store_true", help="run on uvloop (the proxy's loop)")
    p.add_argument(
        "--no-capacity",
        dest="capacity",
        action="store_false",
        help="skip measuring the mock's capacity",
    )
    p.add_argument(
        "--check-bar", action="store_true", help="exit 1 unless every provider meets the 0.25x bar"
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=float(os.environ.get("BENCH_WAIT_QUIET", "0")),
        help="first wait up to N s for other processes to go idle (BENCH_WAIT_QUIET)",
    )
    p.add_argument("--no-write", action="store_true", help="print only; keep results/ as is")
    args = p.parse_args(argv)
    args.blocks = args.blocks or (4 if args.quick else 10)
    args.block_size = args.block_size or (50 if args.quick else 100)
    args.warmup = args.warmup if args.warmup is not None else (20 if args.quick else 50)
    if args.blocks * args.block_size < 200:
        p.error("at least 200 measured calls per arm (blocks x block-size)")
    if args.uvloop:
        import uvloop

        args.loop_name = "uvloop"
        return uvloop.run(run(args))
    args.loop_name = "asyncio (default)"
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
