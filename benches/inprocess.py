"""In-process bench: `await litellm.acompletion(..., rust=True)` (and `litellm.aembedding`) vs
LiteLLM's Python path, per case, against the mock provider (method and commands:
benches/README.md)."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benches._common import (
    MESSAGES,
    MOCK_ARGS,
    arg_parser,
    finish,
    fmt,
    machine,
    machine_line,
    median,
    percentile,
    table,
)
from devtools.deployments import (
    PROVIDERS,
    deployment_kwargs,
    embedding_deployment_kwargs,
    served_by_rust,
)
from devtools.processes import ServerProcess
from devtools.procfs import cpu_seconds, system_busy_seconds

BAR = 0.15
EMBEDDING_KINDS = ("openai", "cohere", "titan-v1")
EMBEDDING_INPUTS = (1, 64)


def cases(url: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each benchmarked call: LiteLLM's entry point and its kwargs (minus `rust`)."""
    out = {
        p: ("acompletion", {**deployment_kwargs(p, url), "messages": MESSAGES}) for p in PROVIDERS
    }
    for kind in EMBEDDING_KINDS:
        for n in EMBEDDING_INPUTS:
            inputs = [f"benchmark input number {i}" for i in range(n)]
            out[f"embed-{kind}-{n}"] = (
                "aembedding",
                {**embedding_deployment_kwargs(kind, url), "input": inputs},
            )
    return out


CASE_NAMES = tuple(cases("http://x"))


async def interleaved_calls(
    calls: dict[str, Callable[[], Awaitable[bool]]], warmup: int, blocks: int, block_size: int
) -> dict[str, dict[str, Any]]:
    """Each arm's call (it says whether the arm it was meant for served it), `warmup` times each
    first, then in blocks of `block_size` calls, arms interleaved block by block: latency and
    CPU (`time.process_time()`, every thread) per call, block medians, and how many calls the
    other path served (those are not credited to the arm)."""
    for _ in range(warmup):
        for call in calls.values():
            await call()
    out = {arm: {"lat": [], "cpu": [], "blocks": [], "misrouted": 0} for arm in calls}
    perf, cpu = time.perf_counter, time.process_time
    for _ in range(blocks):
        for arm, call in calls.items():
            d, block = out[arm], []
            for _ in range(block_size):
                c0, t0 = cpu(), perf()
                served = await call()
                t1, c1 = perf(), cpu()
                if not served:
                    d["misrouted"] += 1
                    continue
                block.append((t1 - t0) * 1000)
                d["cpu"].append((c1 - c0) * 1000)
            d["lat"] += block
            d["blocks"].append(round(median(block), 4))
    return out


def arm_stats(d: dict[str, Any]) -> dict[str, Any]:
    lat = sorted(d["lat"])
    return {
        "calls": len(lat),
        "median_ms": median(lat),
        "p99_ms": percentile(lat, 99),
        "cpu_ms_per_call": sum(d["cpu"]) / len(d["cpu"]) if d["cpu"] else float("nan"),
        "block_medians_ms": d["blocks"],
        "misrouted": d["misrouted"],
    }


async def bench_case(litellm: Any, name: str, entry: str, kwargs: dict, args: Any) -> dict:
    call = getattr(litellm, entry)

    def arm(rust: bool) -> Callable[[], Awaitable[bool]]:
        async def one() -> bool:
            return served_by_rust(await call(**kwargs, **({"rust": True} if rust else {}))) == rust

        return one

    calls = {"python": arm(False), "rust": arm(True)}
    data = await interleaved_calls(calls, args.warmup, args.blocks, args.block_size)
    result: dict[str, Any] = {"provider": name, "entry": entry}
    result["arms"] = {a: arm_stats(d) for a, d in data.items()}
    if entry == "acompletion":
        result["rust_call"] = await rust_call_share(kwargs, args.blocks * args.block_size)
    py, rs = result["arms"]["python"], result["arms"]["rust"]
    for ratio, key in (("median", "median_ms"), ("p99", "p99_ms"), ("cpu", "cpu_ms_per_call")):
        result[f"ratio_{ratio}"] = rs[key] / py[key]
    result["bar_met"] = result["ratio_median"] <= BAR and rs["misrouted"] == 0 and rs["calls"] > 0
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
        c0, t0 = process(), perf()
        await await_call(admitted[1])
        t1, c1 = perf(), process()
        lat.append((t1 - t0) * 1000)
        cpu.append((c1 - c0) * 1000)
    return {"median_ms": median(sorted(lat)), "cpu_ms_per_call": sum(cpu) / len(cpu)}


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    rows = []
    for r in results:
        for arm, a in r["arms"].items():
            ratios = ["", "", "", ""]
            if arm == "rust":
                ratios = [f"**{fmt(r['ratio_median'], 3)}**", fmt(r["ratio_p99"], 3)]
                ratios += [fmt(r["ratio_cpu"], 3), f"**{'met' if r['bar_met'] else 'NOT met'}**"]
            cells = [fmt(a[k], 3) for k in ("median_ms", "p99_ms", "cpu_ms_per_call")]
            rows.append([r["provider"], arm, a["calls"], *cells, *ratios])
    head = ["case", "arm", "calls", "median ms", "p99 ms", "CPU ms/call", "median rust/py"]
    head += ["p99 rust/py", "CPU rust/py", "bar ≤ 0.15"]
    shares = []
    for r in (r for r in results if "rust_call" in r):
        whole, core = r["arms"]["rust"], r["rust_call"]
        values = (whole["median_ms"], core["median_ms"], whole["median_ms"] - core["median_ms"])
        values += (whole["cpu_ms_per_call"], core["cpu_ms_per_call"])
        shares.append([r["provider"], *(fmt(v, 3) for v in values)])
    share_head = ["case", "whole call ms", "Rust call ms", "Python glue ms", "whole CPU ms"]
    blocks = [
        f"- {r['provider']} {arm}: " + ", ".join(fmt(v, 3) for v in a["block_medians_ms"])
        for r in results
        for arm, a in r["arms"].items()
    ]
    problems = [
        f"- {r['provider']}: {n} {arm} calls answered by the other path"
        for r in results
        for arm in ("rust", "python")
        if (n := r["arms"][arm]["misrouted"])
    ]
    foreign = ", ".join(f"{r['provider']} {r['foreign_cores']:.2f}" for r in results)
    lines = [
        "# In-process: `litellm.acompletion` / `litellm.aembedding` with `rust=True` vs "
        "LiteLLM's Python path",
        "",
        machine_line(meta["machine"]),
        "",
        f"Mode: {meta['mode']}; {meta['blocks']} blocks x {meta['block_size']} sequential calls "
        f"per arm and case, arms interleaved, {meta['warmup']} warm-up calls per arm first; "
        + ("one `CustomLogger` configured" if meta["callbacks"] else "no callbacks configured")
        + ". Method (what is timed, which calls count as Rust's): benches/README.md.",
        "",
        *table(head, rows, "llrrrrrrrc"),
        *(["", "The Rust call's own share of a `rust=True` call (the awaited call alone):", ""]),
        *(table([*share_head, "Rust call CPU ms"], shares) if shares else []),
        "",
        "Per-block medians (ms), in run order — drift check:",
        "",
        *blocks,
        "",
        f"Cores other processes used on average: {foreign} (well above 0: noisy absolute numbers).",
        "",
        *(["Problems:", "", *problems, ""] if problems else []),
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
    with ServerProcess(args=MOCK_ARGS) as mock:
        all_cases = cases(mock.url)
        for name in args.cases:
            gc.collect()
            w0, b0, o0 = time.monotonic(), system_busy_seconds(), time.process_time()
            m0 = cpu_seconds([mock.pid])
            r = await bench_case(litellm, name, *all_cases[name], args)
            ours = time.process_time() - o0 + cpu_seconds([mock.pid]) - m0
            # CPU the rest of the machine used meanwhile (other builds/tests skew results).
            busy = system_busy_seconds() - b0 - ours
            r["foreign_cores"] = max(0.0, busy / (time.monotonic() - w0))
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
        "bar": BAR,
        "callbacks": args.callbacks,
    }
    finish(args, args.out, render(results, meta), {"meta": meta, "results": results})
    return 0 if all(r["arms"]["rust"]["misrouted"] == 0 for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    p = arg_parser(__doc__, "200 calls per arm (4 blocks x 50); also BENCH_QUICK=1")
    p.add_argument("--cases", nargs="+", choices=CASE_NAMES, default=list(CASE_NAMES))
    p.add_argument("--blocks", type=int, help="blocks per arm (default 4 / 10)")
    p.add_argument("--block-size", type=int, help="calls per block (default 50 / 100)")
    p.add_argument("--warmup", type=int, help="warm-up calls per arm")
    p.add_argument("--callbacks", action="store_true", help="one CustomLogger, as in a proxy")
    p.add_argument("--out", help="results name (default inprocess, inprocess-callbacks)")
    args = p.parse_args(argv)
    args.out = args.out or ("inprocess-callbacks" if args.callbacks else "inprocess")
    args.blocks = args.blocks or (4 if args.quick else 10)
    args.block_size = args.block_size or (50 if args.quick else 100)
    args.warmup = args.warmup if args.warmup is not None else (20 if args.quick else 50)
    if args.blocks * args.block_size < 200:
        p.error("at least 200 measured calls per arm (blocks x block-size)")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
