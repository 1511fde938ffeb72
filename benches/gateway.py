"""Gateway bench: the real LiteLLM proxy, Python path vs `rust: true`, open loop, stepped rates
(method and commands: benches/README.md)."""

from __future__ import annotations

import collections
import math
import sys
import time
from typing import Any

from benches._common import (
    ARMS,
    MOCK_ARGS,
    WORKLOAD_NAMES,
    BenchProxy,
    arg_parser,
    direct_step,
    fmt,
    log,
    machine,
    machine_line,
    median,
    table,
    workloads,
    write_results,
)
from devtools.processes import ServerProcess
from devtools.procfs import MIB, proc_status

P99_LIMIT_MS = 50.0
# Finer steps where a 1-worker proxy saturates (~80-120 req/s on these 2-core boxes).
DEFAULT_RATES = (25, 50, 70, 85, 100, 115, 130, 150, 175, 200, 250, 300, 400, 500, 700, 1000)
QS = ("p50", "p99", "p999")
FOREIGN_LIMIT = 0.35  # a step during which other processes used more cores is contended
SUMMARY_HEAD = ["provider", "python max req/s", "rust max req/s", "rust/python", "half rate"]
SUMMARY_HEAD += ["added p50 py ms", "added p50 rust ms", "rust/py p50", "added p99 py"]
SUMMARY_HEAD += ["added p99 rust", "CPU s/1k py", "CPU s/1k rust"]
STEPS_HEAD = ["rate", "rep", "arm", "achieved", "err", "p50", "p99", "p99.9", "added p50"]
STEPS_HEAD += ["added p99", "added p99.9", "CPU s/1k", "proxy cores", "foreign cores"]


def arm_step(gw: BenchProxy, provider: str, arm: str, rate: float) -> dict[str, Any]:
    step = gw.step(provider, arm, rate, gw.args.duration)
    del step["latencies_ms"]
    step["held"] = step["errors"] == 0 and step["lat"]["p99"] <= gw.args.p99_limit
    if not step["held"]:
        gw.wait_idle()
    return step


def baseline(gw: BenchProxy, provider: str, rate: float) -> dict[str, Any]:
    """`direct_step` of the provider's workload (the idle proxy's timers count as ours)."""
    work, flags = workloads()[provider], ("--timeout", str(gw.args.timeout))
    url, watch = gw.mock.url + work.upstream_path, [gw.mock.pid, *gw.pids()]
    step = direct_step(url, work.upstream_body, rate, gw.args.direct_duration, *flags, watch=watch)
    return {"provider": provider, **step}


def with_direct(step: dict[str, Any], direct: dict[str, Any], rep: int) -> dict[str, Any]:
    """The step with its added latency over the direct baseline (logged)."""
    added = {q: step["lat"][q] - direct["lat"][q] for q in QS}
    log(
        f"w={step['workers']} rate={step['rate']:g} rep={rep} {step['provider']}-{step['arm']}: "
        f"p99 {fmt(step['lat']['p99'], 1)} ms, added p50 {fmt(added['p50'], 2)} ms, errors "
        f"{step['errors']}, proxy CPU {step['proxy_cpu_s_per_1k']:.1f} s/1k, foreign "
        f"{step['foreign_cores']:.2f}"
    )
    return {**step, "rep": rep, "added": added, "direct": direct["lat"]}


def held_verdict(steps: list[dict[str, Any]]) -> bool | None:
    """Majority of repetitions held; None on a tie (run one more)."""
    yes = sum(1 for s in steps if s["held"])
    return None if 2 * yes == len(steps) else 2 * yes > len(steps)


def run_workers(gw: BenchProxy, workers: int, args: Any) -> dict[str, Any]:
    log(f"starting proxy with {workers} worker(s)")
    info = gw.start(workers)
    log(f"proxy up in {info['startup_s']:.1f}s, pids {info['pids']}")
    try:
        # Warm every arm (imports, connection pools, caches) before measuring anything.
        for p in args.providers:
            for arm in ARMS:
                gw.step(p, arm, 50, 1.0 if args.quick else 2.0)
        gw.wait_idle()
        steps: list[dict[str, Any]] = []
        directs: list[dict[str, Any]] = []
        active = {(p, arm) for p in args.providers for arm in ARMS}
        held_max: dict[tuple[str, str], float] = dict.fromkeys(active, 0.0)
        first_fail: dict[tuple[str, str], float] = {}
        for rate in args.rates:
            if not active:
                break
            by_arm: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
            rep = 0
            pending = set(active)
            while pending:
                direct = {p: baseline(gw, p, rate) for p in args.providers}
                directs += [{**direct[p], "rep": rep, "workers": workers} for p in args.providers]
                for p, arm in ((p, arm) for p in args.providers for arm in ARMS):
                    if (p, arm) not in pending:
                        continue
                    steps.append(s := with_direct(arm_step(gw, p, arm, rate), direct[p], rep))
                    by_arm[(p, arm)].append(s)
                rep += 1
                for key in list(pending):
                    runs = by_arm[key]
                    verdict = held_verdict(runs)
                    if len(runs) < args.reps or (verdict is None and len(runs) < args.reps + 1):
                        continue  # a tie gets one more repetition for this arm
                    pending.discard(key)
                    if verdict:
                        held_max[key] = rate
                    else:
                        active.discard(key)
                        first_fail[key] = rate
        # Both arms at 50% of the Python arm's highest held rate, per provider.
        half: list[dict[str, Any]] = []
        for rep in range(args.reps):
            for p in args.providers:
                rate = held_max[(p, "python")] / 2
                if rate <= 0:
                    continue
                d = baseline(gw, p, rate)
                half += [with_direct(arm_step(gw, p, arm, rate), d, rep) for arm in ARMS]
        return {
            "workers": workers,
            "proxy": info,
            "steps": steps,
            "directs": directs,
            "held_max": {f"{p}-{a}": v for (p, a), v in held_max.items()},
            "first_fail": {f"{p}-{a}": v for (p, a), v in first_fail.items()},
            "half": half,
            "proxy_vmhwm_sum_mib": proc_status(gw.pids())["VmHWM"] / MIB,
        }
    finally:
        gw.stop()


def summarize(run: dict[str, Any], providers: list[str]) -> dict[str, Any]:
    """Per provider: highest held rates, ratios, and the half-rate comparison."""
    out: dict[str, Any] = {}
    for p in providers:
        py_max, rs_max = run["held_max"][f"{p}-python"], run["held_max"][f"{p}-rust"]
        half = {a: [s for s in run["half"] if (s["provider"], s["arm"]) == (p, a)] for a in ARMS}
        half_added = {a: {q: median(s["added"][q] for s in half[a]) for q in QS} for a in ARMS}
        ratio_p50 = half_added["rust"]["p50"] / half_added["python"]["p50"]
        rate_ratio = rs_max / py_max if py_max else math.nan
        capped = f"{p}-rust" not in run["first_fail"]
        out[p] = {
            "python_max_rps": py_max,
            "rust_max_rps": rs_max,
            "rust_capped_by_rate_list": capped,
            "max_rate_ratio": rate_ratio,
            "half_rate": py_max / 2,
            "half_added": half_added,
            "half_added_p50_ratio": ratio_p50,
            "half_cpu_per_1k": {a: median(s["proxy_cpu_s_per_1k"] for s in half[a]) for a in ARMS},
            "bar_p50": ratio_p50 <= 0.7 if not math.isnan(ratio_p50) else None,
            # A rust arm that never failed only gives a lower bound: inconclusive below 1.3.
            "bar_rate": None
            if math.isnan(rate_ratio) or (capped and rate_ratio < 1.3)
            else rate_ratio >= 1.3,
        }
    return out


def render(data: dict[str, Any]) -> str:
    meta = data["meta"]
    lines = [
        "# Gateway: LiteLLM proxy, Python path vs `rust: true` (open loop)",
        "",
        machine_line(meta["machine"]),
        "",
        f"Mode: {meta['mode']}; steps of {meta['duration']} s, {meta['reps']} repetitions "
        f"per rate, arms interleaved, direct-to-mock baseline {meta['direct_duration']} s; p99 "
        f"limit {meta['p99_limit']} ms; request timeout {meta['timeout']} s. Method: "
        "benches/README.md (*Gateway*).",
        "",
        f"Load generator: at most {meta['gen_cpu_util_max'] * 100:.1f}% of a core during proxy "
        "steps; the direct-to-mock baseline at each rate shows what the mock and generator hold.",
        "",
    ]
    for run in data["runs"]:
        w = run["workers"]
        all_steps = run["steps"] + run["half"]
        contended = sum(1 for s in all_steps if s["foreign_cores"] > FOREIGN_LIMIT)
        lines += [
            f"## {w} worker{'s' if w > 1 else ''}",
            "",
            f"Proxy startup {run['proxy']['startup_s']:.1f} s; sum of VmHWM over the proxy's "
            f"processes at the end: {run['proxy_vmhwm_sum_mib']:.0f} MiB; steps during which "
            f"other processes used > {FOREIGN_LIMIT} cores: {contended} of {len(all_steps)}.",
            "",
        ]
        rows = []
        for p, s in run["summary"].items():
            py, rs, cpu = s["half_added"]["python"], s["half_added"]["rust"], s["half_cpu_per_1k"]
            capped = "≥" if s["rust_capped_by_rate_list"] else ""
            cells = [p, f"{s['python_max_rps']:.0f}", f"{capped}{s['rust_max_rps']:.0f}"]
            cells += [f"**{fmt(s['max_rate_ratio'])}**", f"{s['half_rate']:.1f}", fmt(py["p50"])]
            cells += [fmt(rs["p50"]), f"**{fmt(s['half_added_p50_ratio'])}**", fmt(py["p99"])]
            rows.append([*cells, fmt(rs["p99"]), fmt(cpu["python"], 1), fmt(cpu["rust"], 1)])
        lines += table(SUMMARY_HEAD, rows)
        lines += [
            "",
            "Max req/s: held with p99 ≤ 50 ms and no errors (majority of repetitions; ≥: the rate "
            "list ran out). Added = proxied - direct at the same percentile, rate and repetition; "
            "half rate = 50% of the Python max; medians over repetitions.",
            "",
            "<details><summary>All steps</summary>",
            "",
        ]
        rows = []
        for s in all_steps:
            cells = [f"{s['rate']:g}", s["rep"], f"{s['provider']}-{s['arm']}"]
            error = f"{s['errors']}" + (f" ({s['first_error']})" if s["errors"] else "")
            cells += [f"{s['achieved_rps']:.1f}", error, *(fmt(s["lat"][q]) for q in QS)]
            cells += [fmt(s["added"][q]) for q in QS]
            cells += [f"{s['proxy_cpu_s_per_1k']:.1f}", f"{s['proxy_cores']:.2f}"]
            rows.append([*cells, f"{s['foreign_cores']:.2f}", f"{s['proxy_peak_rss_mib']:.0f}"])
        lines += table([*STEPS_HEAD, "peak RSS MiB"], rows, "rrl" + "r" * 12)
        lines += ["", "</details>", ""]
    lines += ["## Bars (1 worker)", ""]
    one = next((r for r in data["runs"] if r["workers"] == 1), None)
    verdict = {None: "n/a (inconclusive)", True: "**met**", False: "**NOT met**"}
    for p, s in (one or {}).get("summary", {}).items():
        lines.append(
            f"- {p}: added p50 at {s['half_rate']:.1f} req/s rust/python = "
            f"{fmt(s['half_added_p50_ratio'])} (bar ≤ 0.7): {verdict[s['bar_p50']]}; "
            f"max rate at p99 ≤ 50 ms rust/python = {fmt(s['max_rate_ratio'])} "
            f"(bar ≥ 1.3): {verdict[s['bar_rate']]}"
        )
    return "\n".join([*lines, *([] if one else ["(no 1-worker run)"]), ""])


def plot(data: dict[str, Any], plt: Any) -> Any:
    runs = data["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(7 * len(runs), 5), squeeze=False)
    colors = {"openai": "tab:green", "anthropic": "tab:orange", "bedrock": "tab:blue"}
    for ax, run in zip(axes[0], runs, strict=False):
        for p in data["meta"]["providers"]:
            for arm in ARMS:
                pts = [s for s in run["steps"] if s["provider"] == p and s["arm"] == arm]
                if not pts:
                    continue
                rates = sorted({s["rate"] for s in pts})
                med = [
                    median(max(0.1, s["added"]["p99"]) for s in pts if s["rate"] == r)
                    for r in rates
                ]
                style = "o-" if arm == "rust" else "s--"
                ax.plot(rates, med, style, color=colors.get(p), label=f"{p} {arm}")
        ax.axhline(data["meta"]["p99_limit"], color="red", lw=0.8, ls=":", label="50 ms")
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (req/s, open loop)")
        ax.set_ylabel("added p99 latency (ms, proxied - direct)")
        ax.set_title(f"LiteLLM proxy, {run['workers']} worker(s): python (dashed) vs rust, medians")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def parse_args(argv: list[str] | None) -> Any:
    p = arg_parser(__doc__, "3 s steps, 1 worker (also BENCH_QUICK=1)")
    p.add_argument("--workers", type=int, nargs="+", help="worker counts (default 1 / 1 2)")
    chat = ["openai", "anthropic", "bedrock"]  # workloads: also messages and embed-*
    p.add_argument("--providers", nargs="+", choices=WORKLOAD_NAMES, default=chat)
    p.add_argument("--out", default="gateway", help="results name (default gateway)")
    p.add_argument("--rates", type=float, nargs="+", default=list(DEFAULT_RATES))
    p.add_argument("--duration", type=float, help="seconds per step (default 3 / 6)")
    p.add_argument("--direct-duration", type=float, help="seconds per direct baseline step")
    p.add_argument("--reps", type=int, default=2, help="repetitions per rate (default 2)")
    p.add_argument("--p99-limit", type=float, default=P99_LIMIT_MS)
    p.add_argument("--timeout", type=float, default=5.0, help="per-request timeout (s)")
    args = p.parse_args(argv)
    args.workers = args.workers or ([1] if args.quick else [1, 2])
    args.duration = args.duration or (3.0 if args.quick else 6.0)
    args.direct_duration = args.direct_duration or min(args.duration, 1.5 if args.quick else 3.0)
    args.rates = sorted(set(args.rates))
    if args.duration > 60 or args.reps > 5 or max(args.rates) > 5000:
        p.error("keep it bounded: --duration ≤ 60, --reps ≤ 5, rates ≤ 5000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine(args.wait_quiet)
    started = time.monotonic()
    runs = []
    with ServerProcess(args=MOCK_ARGS) as mock:
        gw = BenchProxy(args, mock)
        for w in args.workers:
            run = run_workers(gw, w, args)
            run["summary"] = summarize(run, args.providers)
            runs.append(run)
            if w != args.workers[-1]:
                report(args, info, runs, started, final=False)
    report(args, info, runs, started, final=True)
    return 0


def report(args: Any, info: dict, runs: list[dict], started: float, *, final: bool) -> None:
    """Writes (and on the final call prints) the report; earlier calls save partial results."""
    all_steps = [s for r in runs for s in r["steps"] + r["half"]]
    meta = {
        "machine": info,
        "mode": "quick" if args.quick else "full",
        **{k: getattr(args, k) for k in ("duration", "direct_duration", "reps", "rates")},
        **{k: getattr(args, k) for k in ("providers", "p99_limit", "timeout")},
        "gen_cpu_util_max": max((s["gen_cpu_util"] or 0.0 for s in all_steps), default=0.0),
        "elapsed_s": time.monotonic() - started,
    }
    data = {"meta": meta, "runs": runs, "complete": final}
    markdown = render(data)
    if final:
        print(markdown)
    else:
        markdown = "> Partial results: the run is still going.\n\n" + markdown
    if not args.no_write:
        alt = "added p99 vs offered rate"
        write_results(args.out, markdown, data, plot=lambda plt: plot(data, plt), alt=alt)
    if final:
        log(f"done in {meta['elapsed_s']:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
