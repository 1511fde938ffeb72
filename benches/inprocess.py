"""In-process bench: `await litellm.acompletion(..., rust=True)` (and `litellm.aembedding`) vs
LiteLLM's Python path, per case, against the mock provider (method: benches/README.md).

    python -m benches.inprocess            # full: 1000 calls per arm and case
    python -m benches.inprocess --quick    # 200 calls per arm and case (BENCH_QUICK=1)
    python -m benches.inprocess --cases openai embed-openai-64
    python -m benches.inprocess --callbacks   # with one CustomLogger configured, as in a proxy

Chat cases are named after the provider; embedding cases `embed-<kind>-<inputs>` send 1 or 64
inputs and get 1,536-dimensional vectors back.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from benches._common import (
    ARMS,
    MESSAGES,
    arg_parser,
    cpu_seconds,
    fmt,
    loadavg,
    machine,
    machine_line,
    median,
    percentile,
    run_loadgen,
    system_busy_seconds,
    write_results,
)
from litellm_fastpath.mock_provider import (
    PROVIDERS,
    ServerProcess,
    deployment_kwargs,
    embedding_deployment_kwargs,
)

BAR = 0.15
EMBEDDING_DIMS = 1536
EMBEDDING_KINDS = ("openai", "cohere", "titan-v1")
EMBEDDING_INPUTS = (1, 64)


@dataclass(frozen=True)
class Case:
    """One benchmarked call: LiteLLM's entry point and its kwargs (minus `rust`)."""

    name: str
    entry: str
    kwargs: dict[str, Any]


def cases(url: str) -> dict[str, Case]:
    out = {
        provider: Case(
            provider, "acompletion", {**deployment_kwargs(provider, url), "messages": MESSAGES}
        )
        for provider in PROVIDERS
    }
    for kind in EMBEDDING_KINDS:
        for n in EMBEDDING_INPUTS:
            inputs = [f"benchmark input number {i}" for i in range(n)]
            name = f"embed-{kind}-{n}"
            kwargs = {**embedding_deployment_kwargs(kind, url), "input": inputs}
            out[name] = Case(name, "aembedding", kwargs)
    return out


CASE_NAMES = tuple(cases("http://x"))


def served_by_rust(response: Any) -> bool:
    headers = (getattr(response, "_hidden_params", None) or {}).get("additional_headers") or {}
    return headers.get("x-litellm-rust") == "true"


async def bench_case(litellm: Any, case: Case, args: Any) -> dict[str, Any]:
    call, kwargs = getattr(litellm, case.entry), case.kwargs
    rust_kw: dict[str, dict[str, Any]] = {"python": {}, "rust": {"rust": True}}
    for _ in range(args.warmup):
        for arm in ARMS:
            await call(**rust_kw[arm], **kwargs)
    data = {
        arm: {"lat": [], "cpu": [], "blocks": [], "not_rust": 0, "rust_on_py": 0} for arm in ARMS
    }
    perf, cpu = time.perf_counter, time.process_time
    for _block in range(args.blocks):
        for arm in ARMS:
            d, block = data[arm], []
            for _ in range(args.block_size):
                c0, t0 = cpu(), perf()
                response = await call(**rust_kw[arm], **kwargs)
                t1, c1 = perf(), cpu()
                if served_by_rust(response) != (arm == "rust"):
                    d["not_rust" if arm == "rust" else "rust_on_py"] += 1
                    if arm == "rust":
                        continue  # the Python path answered: never credited to Rust
                block.append((t1 - t0) * 1000)
                d["cpu"].append((c1 - c0) * 1000)
            d["lat"] += block
            d["blocks"].append(round(median(block), 4))
    result: dict[str, Any] = {"provider": case.name, "entry": case.entry, "arms": {}}
    if case.entry == "acompletion":
        result["rust_call"] = await rust_call_share(kwargs, args.blocks * args.block_size)
    for arm, d in data.items():
        lat = sorted(d["lat"])
        result["arms"][arm] = {
            "calls": len(lat),
            "median_ms": median(lat),
            "p99_ms": percentile(lat, 99),
            "mean_ms": sum(lat) / len(lat) if lat else float("nan"),
            "cpu_ms_per_call": sum(d["cpu"]) / len(d["cpu"]) if d["cpu"] else float("nan"),
            "block_medians_ms": d["blocks"],
            "not_served_by_rust": d["not_rust"],
            "python_arm_served_by_rust": d["rust_on_py"],
        }
    py, rs = result["arms"]["python"], result["arms"]["rust"]
    result["ratio_median"] = rs["median_ms"] / py["median_ms"]
    result["ratio_p99"] = rs["p99_ms"] / py["p99_ms"]
    result["ratio_cpu"] = rs["cpu_ms_per_call"] / py["cpu_ms_per_call"]
    ok = rs["not_served_by_rust"] == 0 and rs["calls"] > 0
    result["bar_met"] = result["ratio_median"] <= BAR and ok
    return result


async def rust_call_share(kwargs: dict[str, Any], calls: int) -> dict[str, float]:
    """The Rust call alone (tokio + reqwest + parse, and the bridge back to asyncio): the
    admitted call is awaited with the Python glue around it (admission, the response object,
    logging) left out of the timer."""
    from litellm_fastpath import integration
    from litellm_fastpath.bridge import await_call

    lat, cpu = [], []
    perf, process = time.perf_counter, time.process_time
    for _ in range(calls):
        admitted = integration._admit_chat(dict(kwargs))
        assert admitted is not None, "declined: the bench's case must take the fast path"
        _, prepared = admitted
        c0, t0 = process(), perf()
        await await_call(prepared)
        t1, c1 = perf(), process()
        lat.append((t1 - t0) * 1000)
        cpu.append((c1 - c0) * 1000)
    return {"median_ms": median(sorted(lat)), "cpu_ms_per_call": sum(cpu) / len(cpu)}


def mock_capacity(url: str, quick: bool) -> dict[str, Any]:
    """Closed-loop capacity of the mock with the load generator (both separate processes)."""
    body = json.dumps({"model": "gpt-4o-mini", "messages": MESSAGES})
    keep = ("achieved_rps", "p50_ms", "p99_ms", "errors", "gen_cpu_util")
    out, url, secs = {}, f"{url}/chat/completions", 1.0 if quick else 2.0
    for n in (1, 16):
        res = run_loadgen(url, body, 0, secs, "--closed", str(n), warm=False)
        out[f"closed_{n}"] = {k: res[k] for k in keep}
    return out


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# In-process: `litellm.acompletion` / `litellm.aembedding` with `rust=True` vs "
        "LiteLLM's Python path",
        "",
        machine_line(meta["machine"]),
        "",
        f"Mode: {meta['mode']}; {meta['blocks']} blocks x {meta['block_size']} sequential calls "
        f"per arm and provider, arms interleaved (python, rust, python, rust, ...), "
        f"{meta['warmup']} warm-up calls per arm first; event loop: {meta['loop']}. "
        "Mock provider in a separate process on loopback.",
        "",
        "| case | arm | calls | median ms | p99 ms | CPU ms/call | "
        "median rust/py | p99 rust/py | CPU rust/py | bar ≤ 0.15 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in results:
        for arm, a in r["arms"].items():
            ratios = " | | |"
            if arm == "rust":
                ratios = f" **{fmt(r['ratio_median'], 3)}** | {fmt(r['ratio_p99'], 3)} | "
                ratios += f"{fmt(r['ratio_cpu'], 3)} | **{'met' if r['bar_met'] else 'NOT met'}**"
            lines.append(
                f"| {r['provider']} | {arm} | {a['calls']} | {fmt(a['median_ms'], 3)} | "
                f"{fmt(a['p99_ms'], 3)} | {fmt(a['cpu_ms_per_call'], 3)} |{ratios} |"
            )
    shares = [r for r in results if "rust_call" in r]
    if shares:
        lines += [
            "",
            "The Rust call's own share of a `rust=True` call (tokio + reqwest + parse and the "
            "bridge to asyncio, timed around the awaited call alone) beside the whole call:",
            "",
            "| case | whole call ms | Rust call ms | Python glue ms | whole CPU ms | "
            "Rust call CPU ms |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in shares:
            whole, core = r["arms"]["rust"], r["rust_call"]
            lines.append(
                f"| {r['provider']} | {fmt(whole['median_ms'], 3)} | "
                f"{fmt(core['median_ms'], 3)} | "
                f"{fmt(whole['median_ms'] - core['median_ms'], 3)} | "
                f"{fmt(whole['cpu_ms_per_call'], 3)} | {fmt(core['cpu_ms_per_call'], 3)} |"
            )
    lines += ["", "Per-block medians (ms), in run order — drift check:", ""]
    for r in results:
        for arm, a in r["arms"].items():
            blocks = ", ".join(fmt(v, 3) for v in a["block_medians_ms"])
            lines.append(f"- {r['provider']} {arm}: {blocks}")
    problems = [
        f"{r['provider']}: {n} rust calls answered by Python"
        for r in results
        if (n := r["arms"]["rust"]["not_served_by_rust"])
    ] + [
        f"{r['provider']}: {n} python calls carried x-litellm-rust"
        for r in results
        if (n := r["arms"]["python"]["python_arm_served_by_rust"])
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
    if cap := meta.get("mock_capacity"):
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
        "`LITELLM_LOCAL_MODEL_COST_MAP=True`; "
        + (
            "one `CustomLogger` configured (LiteLLM's logging, cost and standard logging "
            "payload run on both arms, as in a proxy)."
            if meta["callbacks"]
            else "no callbacks configured."
        ),
        "",
    ]
    return "\n".join(lines)


async def run(args: Any) -> int:
    import litellm

    import litellm_fastpath

    litellm_fastpath.install()
    litellm.suppress_debug_info = True
    if args.callbacks:
        from litellm.integrations.custom_logger import CustomLogger

        litellm.callbacks = [type("CountingLogger", (CustomLogger,), {})()]
    info = machine(args.wait_quiet)
    results: list[dict[str, Any]] = []
    with ServerProcess(args=("--embedding-dims", str(EMBEDDING_DIMS))) as mock:
        cap = mock_capacity(mock.url, args.quick) if args.capacity else None
        all_cases = cases(mock.url)
        for name in args.cases:
            gc.collect()
            w0, b0, o0 = time.monotonic(), system_busy_seconds(), time.process_time()
            m0 = cpu_seconds([mock.pid])
            r = await bench_case(litellm, all_cases[name], args)
            ours = time.process_time() - o0 + cpu_seconds([mock.pid]) - m0
            # CPU the rest of the machine used meanwhile (other builds/tests skew results).
            r["foreign_cores"] = max(
                0.0, (system_busy_seconds() - b0 - ours) / (time.monotonic() - w0)
            )
            r["loadavg_after"] = loadavg()
            results.append(r)
            print(
                f"{name}: python {r['arms']['python']['median_ms']:.3f} ms, "
                f"rust {r['arms']['rust']['median_ms']:.3f} ms, ratio {r['ratio_median']:.3f}",
                file=sys.stderr,
                flush=True,
            )
    meta = {
        "machine": info,
        "mode": "quick" if args.quick else "full",
        **{k: getattr(args, k) for k in ("blocks", "block_size", "warmup")},
        "loop": "uvloop" if args.uvloop else "asyncio (default)",
        "mock_capacity": cap,
        "bar": BAR,
        "callbacks": args.callbacks,
    }
    markdown = render(results, meta)
    print(markdown)
    if not args.no_write:
        write_results(args.out, markdown, {"meta": meta, "results": results})
    ok = all(r["arms"]["rust"]["not_served_by_rust"] == 0 for r in results)
    return 0 if ok and (not args.check_bar or all(r["bar_met"] for r in results)) else 1


def main(argv: list[str] | None = None) -> int:
    p = arg_parser(__doc__, "200 calls per arm (4 blocks x 50); also BENCH_QUICK=1")
    p.add_argument("--cases", nargs="+", choices=CASE_NAMES, default=list(CASE_NAMES))
    p.add_argument("--blocks", type=int, help="blocks per arm (default 4 / 10)")
    p.add_argument("--block-size", type=int, help="calls per block (default 50 / 100)")
    p.add_argument("--warmup", type=int, help="warm-up calls per arm")
    p.add_argument("--uvloop", action="store_true", help="run on uvloop (the proxy's loop)")
    p.add_argument("--no-capacity", dest="capacity", action="store_false", help="skip the mock's")
    p.add_argument("--check-bar", action="store_true", help="exit 1 unless every bar is met")
    p.add_argument(
        "--callbacks", action="store_true", help="one CustomLogger configured, as in a proxy"
    )
    p.add_argument("--out", help="results name (default inprocess, inprocess-callbacks)")
    args = p.parse_args(argv)
    args.out = args.out or ("inprocess-callbacks" if args.callbacks else "inprocess")
    args.blocks = args.blocks or (4 if args.quick else 10)
    args.block_size = args.block_size or (50 if args.quick else 100)
    args.warmup = args.warmup if args.warmup is not None else (20 if args.quick else 50)
    if args.blocks * args.block_size < 200:
        p.error("at least 200 measured calls per arm (blocks x block-size)")
    if args.uvloop:
        import uvloop

        return int(uvloop.run(run(args)))
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
