"""Gateway bench: the real LiteLLM proxy, Python path vs `rust: true`, open loop, stepped rates
(method: benches/README.md).

    python -m benches.gateway --quick      # 3 s steps, 1 worker            (BENCH_QUICK=1)
    python -m benches.gateway              # 6 s steps, 1 then 2 workers, py-spy profile
"""

from __future__ import annotations

import collections
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benches._common import (
    ARMS,
    AUTH,
    RESULTS,
    ROOT,
    WORKLOAD_NAMES,
    BenchProxy,
    arg_parser,
    bench_mock,
    direct_step,
    errors,
    fmt,
    loadavg,
    loadgen_cmd,
    log,
    machine,
    machine_line,
    median,
    run_loadgen,
    table,
    wait_quiet,
    workloads,
    write_results,
)
from devtools.procfs import MIB, cpu_seconds, proc_status

P99_LIMIT_MS = 50.0
# Finer steps where a 1-worker proxy saturates (~80-120 req/s on these 2-core boxes).
DEFAULT_RATES = (25, 50, 70, 85, 100, 115, 130, 150, 175, 200, 250, 300, 400, 500, 700, 1000)
QS = ("p50", "p99", "p999")
SUMMARY_HEAD = ["provider", "python max req/s", "rust max req/s", "rust/python", "half rate"]
SUMMARY_HEAD += ["added p50 py ms", "added p50 rust ms", "rust/py p50", "added p99 py"]
SUMMARY_HEAD += ["added p99 rust", "CPU s/1k py", "CPU s/1k rust"]
STEPS_HEAD = ["rate", "rep", "arm", "achieved", "err", "p50", "p99", "p99.9", "added p50"]
STEPS_HEAD += ["added p99", "added p99.9", "CPU s/1k", "proxy cores", "foreign cores"]


def upstream_body(provider: str) -> str:
    return json.dumps(workloads()[provider].upstream_body)


def checked(args: Any, measure: Callable[[], dict[str, Any]], what: str) -> dict[str, Any]:
    """A step, rerun (after waiting for quiet) when other processes used the CPU meanwhile."""
    for attempt in range(args.contended_retries + 1):
        step = measure()
        step["attempt"] = attempt
        if step["foreign_cores"] <= args.foreign_limit or attempt == args.contended_retries:
            break
        log(
            f"contended step ({step['foreign_cores']:.2f} foreign cores): "
            f"{what} @ {step['rate']:g}; waiting up to 20 s for quiet"
        )
        if wait_quiet(20, threshold=args.foreign_limit) > args.foreign_limit:
            break  # still busy: keep this step (marked contended) rather than stall
    return step


def arm_step(gw: BenchProxy, provider: str, arm: str, rate: float) -> dict[str, Any]:
    def measure() -> dict[str, Any]:
        step = gw.step(provider, arm, rate, gw.args.duration)
        del step["latencies_ms"]
        step["held"] = step["errors"] == 0 and step["lat"]["p99"] <= gw.args.p99_limit
        if not step["held"]:
            gw.wait_idle()
        return step

    return checked(gw.args, measure, f"{provider}-{arm}")


def baseline(gw: BenchProxy, provider: str, rate: float) -> dict[str, Any]:
    """`direct_step` of the provider's workload (the idle proxy's timers count as ours)."""
    work, flags = workloads()[provider], ("--timeout", str(gw.args.timeout))
    url, secs, watch = gw.mock.url + work.upstream_path, gw.args.direct_duration, gw.pids()

    def measure() -> dict[str, Any]:
        step = direct_step(url, work.upstream_body, rate, secs, *flags, watch=[gw.mock.pid, *watch])
        return {"provider": provider, **step}

    return checked(gw.args, measure, f"direct {provider}")


def with_direct(step: dict[str, Any], direct: dict[str, Any], rep: int) -> dict[str, Any]:
    added = {q: step["lat"][q] - direct["lat"][q] for q in QS}
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
                    s = with_direct(arm_step(gw, p, arm, rate), direct[p], rep)
                    steps.append(s)
                    by_arm[(p, arm)].append(s)
                    log(
                        f"w={workers} rate={rate:>5} rep={rep} {p:>9}-{arm:<6} "
                        f"p50={fmt(s['lat']['p50'], 1):>7} p99={fmt(s['lat']['p99'], 1):>8} "
                        f"added p50={fmt(s['added']['p50'], 1)} err={s['errors']} "
                        f"rps={s['achieved_rps']:.0f} cpu/1k={s['proxy_cpu_s_per_1k']:.1f}s "
                        f"foreign={s['foreign_cores']:.2f}"
                    )
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
                for arm in ARMS:
                    half.append(s := with_direct(arm_step(gw, p, arm, rate), d, rep))
                    log(
                        f"w={workers} half-rate {rate:.1f} rep={rep} {p}-{arm}: "
                        f"added p50={fmt(s['added']['p50'], 2)} p99={fmt(s['added']['p99'], 2)}"
                    )
        profile = run_profiles(gw, args, held_max) if args.profile and workers == 1 else None
        return {
            "workers": workers,
            "proxy": info,
            "steps": steps,
            "directs": directs,
            "held_max": {f"{p}-{a}": v for (p, a), v in held_max.items()},
            "first_fail": {f"{p}-{a}": v for (p, a), v in first_fail.items()},
            "half": half,
            "profile": profile,
            "proxy_vmhwm_sum_mib": proc_status(gw.pids())["VmHWM"] / MIB,
        }
    finally:
        gw.stop()


def run_profiles(
    gw: BenchProxy, args: Any, held_max: dict[tuple[str, str], float]
) -> dict[str, Any] | None:
    """py-spy on the busiest proxy worker under each arm at 80% of its highest held rate."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        log("py-spy not installed; skipping the profile (pip install py-spy)")
        return None
    out: dict[str, Any] = {}
    provider, secs = args.providers[0], args.profile_seconds
    for arm in args.profile_arms:
        rate = max(25.0, 0.8 * held_max[(provider, arm)])
        work = workloads()[provider]
        body = json.dumps({"model": f"{provider}-{arm}", **work.body})
        url = f"{gw.proxy.url}{work.route}"
        cmd = loadgen_cmd(url, body, rate, 2 * secs + 6, "-H", AUTH, "--no-latencies")
        load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, cwd=ROOT)
        try:
            time.sleep(1.5)
            pids = gw.pids()
            before = {pid: cpu_seconds([pid]) for pid in pids}
            time.sleep(1.0)
            pid = max(pids, key=lambda pid: cpu_seconds([pid]) - before[pid])
            svg, raw = RESULTS / f"profile-{arm}.svg", RESULTS / f"profile-{arm}.txt"
            log(f"py-spy: {arm} arm at {rate:.0f} req/s, worker pid {pid}, {secs:.0f}s x 2")
            for fmt_name, path in (("flamegraph", svg), ("raw", raw)):
                # --gil: only samples holding the GIL, i.e. where the worker's Python CPU goes
                # (the Rust runtime's threads never hold it). Blocking sampling, 100 Hz.
                spy = [py_spy, "record", "--pid", str(pid), "--duration", str(int(secs)), "--gil"]
                spy += ["--full-filenames", "--nolineno", "--format", fmt_name, "-o", str(path)]
                subprocess.run(spy, check=True, capture_output=True, timeout=secs + 60)
            out[arm] = {"rate": rate, "pid": pid, "svg": svg.name, "raw": raw.name}
            out[arm] |= summarize_profile(raw)
        except (subprocess.SubprocessError, OSError) as err:
            log(f"py-spy failed for the {arm} arm: {err!r}")
            out[arm] = {"error": repr(err)}
        finally:
            load.terminate()
            load.wait(10)
        gw.wait_idle()
    return out


_DEEP = ("proxy", "litellm_core_utils", "llms", "integrations", "types")


def _category(frame: str) -> str:
    """The module area of a frame: `litellm/proxy/auth`, `litellm/router`, `pydantic`, ..."""
    path = frame[frame.rfind("(") + 1 :].rstrip(")") if "(" in frame else frame
    if path.startswith("<frozen importlib"):
        return "importlib (import machinery)"
    if path.startswith("<"):
        return path
    parts = path.split("/")
    if parts[0] == "litellm" and len(parts) > 1:
        return "/".join(parts[: 3 if parts[1] in _DEEP else 2]).removesuffix(".py")
    return parts[0].removesuffix(".py")


def _short(frame: str) -> str:
    """`fn (/venv/lib/python3.11/site-packages/pkg/mod.py)` -> `fn (pkg/mod.py)`."""
    for marker in ("site-packages/", "/lib/python3.11/", "/python/"):
        idx = frame.find(marker)
        if idx >= 0:
            return frame[: frame.rfind("(", 0, idx) + 1] + frame[idx + len(marker) :]
    return frame


def summarize_profile(raw: Path, top: int = 15) -> dict[str, Any]:
    """Top frames from py-spy's collapsed stacks: inclusive and self share, and self by area."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    area_self: collections.Counter[str] = collections.Counter()
    area_incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        total += count
        frames = [_short(f) for f in stack.split(";")]
        inclusive.update(dict.fromkeys(frames, count))
        area_incl.update(dict.fromkeys({_category(f) for f in frames}, count))
        own[frames[-1]] += count
        area_self[_category(frames[-1])] += count

    def share(counter: collections.Counter[str], n: int = top) -> list[tuple[str, float]]:
        return [(k, v / total * 100) for k, v in counter.most_common(n)] if total else []

    # Where the request's time goes below the ASGI stack: LiteLLM and our frames only.
    ours = collections.Counter(
        {
            f: v
            for f, v in inclusive.items()
            if "litellm" in f
            and "middleware" not in f
            and "_lazy_features" not in f
            and v < 0.95 * total
        }
    )
    return {
        "samples": total,
        "top_inclusive": share(inclusive),
        "top_inclusive_litellm": share(ours),
        "top_self": share(own),
        "self_by_area": share(area_self),
        "inclusive_by_area": share(area_incl, top + 8),
    }


def summarize(run: dict[str, Any], providers: list[str]) -> dict[str, Any]:
    """Per provider: highest held rates, ratios, and the half-rate comparison."""
    out: dict[str, Any] = {}
    for p in providers:
        py_max, rs_max = run["held_max"][f"{p}-python"], run["held_max"][f"{p}-rust"]
        half = {a: [s for s in run["half"] if (s["provider"], s["arm"]) == (p, a)] for a in ARMS}
        half_added = {a: {q: median(s["added"][q] for s in half[a]) for q in QS} for a in ARMS}
        ratio_p50 = (
            half_added["rust"]["p50"] / half_added["python"]["p50"] if half["python"] else math.nan
        )
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
    meta, cap = data["meta"], data["meta"]["capacity"]
    lines = [
        "# Gateway: LiteLLM proxy, Python path vs `rust: true` (open loop)",
        "",
        machine_line(meta["machine"]),
        "",
        f"Mode: {meta['mode']}; steps of {meta['duration']} s, {meta['reps']} repetitions "
        f"per rate, arms interleaved, direct-to-mock baseline {meta['direct_duration']} s; p99 "
        f"limit {meta['p99_limit']} ms; request timeout {meta['timeout']} s; steps with > "
        f"{meta['foreign_limit']} foreign cores rerun up to {meta['contended_retries']} times. "
        "Method: benches/README.md (*Gateway*).",
        "",
        f"Tools' capacity (loopback): mock + generator closed loop (16 connections) "
        f"{cap['closed']['achieved_rps']:.0f} req/s, p99 {fmt(cap['closed']['p99_ms'])} ms; "
        f"open loop at {cap['open']['rate']:.0f} req/s: {cap['open']['achieved_rps']:.0f} req/s, "
        f"p50/p99 {fmt(cap['open']['p50_ms'])}/{fmt(cap['open']['p99_ms'])} ms, errors "
        f"{cap['open']['errors']}, generator {cap['open']['gen_cpu_util'] * 100:.0f}% of a core "
        f"(at most {meta['gen_cpu_util_max'] * 100:.1f}% during proxy steps).",
        "",
    ]
    for run in data["runs"]:
        w = run["workers"]
        all_steps = run["steps"] + run["half"]
        contended = sum(1 for s in all_steps if s["foreign_cores"] > meta["foreign_limit"])
        lines += [
            f"## {w} worker{'s' if w > 1 else ''}",
            "",
            f"Proxy startup {run['proxy']['startup_s']:.1f} s; sum of VmHWM over the proxy's "
            f"processes at the end: {run['proxy_vmhwm_sum_mib']:.0f} MiB; steps still "
            f"contended after reruns: {contended} of {len(all_steps)}.",
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
            cells += [f"{s['achieved_rps']:.1f}", errors(s), *(fmt(s["lat"][q]) for q in QS)]
            cells += [fmt(s["added"][q]) for q in QS]
            cells += [f"{s['proxy_cpu_s_per_1k']:.1f}", f"{s['proxy_cores']:.2f}"]
            rows.append([*cells, f"{s['foreign_cores']:.2f}", f"{s['proxy_peak_rss_mib']:.0f}"])
        lines += table([*STEPS_HEAD, "peak RSS MiB"], rows, "rrl" + "r" * 12)
        lines += ["", "</details>", ""]
        if run.get("profile"):
            lines += ["### py-spy profile of the busiest proxy worker (1 worker)", ""]
            for arm, prof in run["profile"].items():
                lines += render_profile(arm, prof)
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


def render_profile(arm: str, prof: dict[str, Any]) -> list[str]:
    if "error" in prof:
        return [f"- {arm}: failed ({prof['error']})", ""]
    incl = [(a, v) for a, v in prof["inclusive_by_area"] if v < 95]
    areas = [
        (a, f"{v:.1f}", b, f"{w:.1f}")
        for (a, v), (b, w) in zip(prof["self_by_area"], incl, strict=False)
    ]
    frames = [(f"`{f}`", f"{v:.1f}") for f, v in prof["top_self"][:12]]
    ours = [(f"`{f}`", f"{v:.1f}") for f, v in prof.get("top_inclusive_litellm", [])[:15]]
    return [
        f"**{arm} arm** at {prof['rate']:.0f} req/s, {prof['samples']} GIL-holding samples "
        f"(`{prof['svg']}`, raw stacks `{prof['raw']}`).",
        "",
        *table(["area (self time)", "%", "area (inclusive)", "%"], areas, "lrlr"),
        "",
        *table(["top self frames", "%"], frames),
        "",
        *table(["LiteLLM / fast-path frames, inclusive", "%"], ours),
        "",
    ]


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
                y = {id(s): max(0.1, s["added"]["p99"]) for s in pts}
                med = [median(y[id(s)] for s in pts if s["rate"] == r) for r in rates]
                style, marker = ("-", "o") if arm == "rust" else ("--", "s")
                ax.plot(rates, med, style, color=colors.get(p), label=f"{p} {arm}")
                xs = [s["rate"] for s in pts]
                ax.scatter(xs, y.values(), marker=marker, color=colors.get(p), s=14, alpha=0.6)
        ax.axhline(data["meta"]["p99_limit"], color="red", lw=0.8, ls=":", label="50 ms")
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (req/s, open loop)")
        ax.set_ylabel("added p99 latency (ms, proxied - direct)")
        ax.set_title(f"LiteLLM proxy, {run['workers']} worker(s): python (dashed) vs rust")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def parse_args(argv: list[str] | None) -> Any:
    p = arg_parser(__doc__, "3 s steps, 1 worker, no profile (also BENCH_QUICK=1)")
    p.add_argument("--workers", type=int, nargs="+", help="worker counts (default 1 / 1 2)")
    p.add_argument(
        "--providers",
        nargs="+",
        choices=WORKLOAD_NAMES,
        default=["openai", "anthropic", "bedrock"],
        help="workloads: chat per provider, or embed-openai / embed-cohere / embed-titan",
    )
    p.add_argument("--out", default="gateway", help="results name (default gateway)")
    p.add_argument("--rates", type=float, nargs="+", default=list(DEFAULT_RATES))
    p.add_argument("--duration", type=float, help="seconds per step (default 3 / 6)")
    p.add_argument("--direct-duration", type=float, help="seconds per direct baseline step")
    p.add_argument("--reps", type=int, default=2, help="repetitions per rate (default 2)")
    p.add_argument("--p99-limit", type=float, default=P99_LIMIT_MS)
    p.add_argument("--timeout", type=float, default=5.0, help="per-request timeout (s)")
    prof = p.add_mutually_exclusive_group()
    prof.add_argument("--profile", action="store_true", default=None, help="default: full mode")
    prof.add_argument("--no-profile", dest="profile", action="store_false")
    p.add_argument("--profile-arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--profile-seconds", type=float, default=10.0)
    p.add_argument(
        "--foreign-limit",
        type=float,
        default=0.35,
        help="a step during which other processes used more cores than this is contended",
    )
    p.add_argument("--contended-retries", type=int, help="reruns of a contended step (1 / 2)")
    args = p.parse_args(argv)
    if args.contended_retries is None:
        args.contended_retries = 1 if args.quick else 2
    args.workers = args.workers or ([1] if args.quick else [1, 2])
    args.duration = args.duration or (3.0 if args.quick else 6.0)
    args.direct_duration = args.direct_duration or min(args.duration, 1.5 if args.quick else 3.0)
    if args.profile is None:
        args.profile = not args.quick
    args.rates = sorted(set(args.rates))
    if args.duration > 60 or args.reps > 5 or max(args.rates) > 5000:
        p.error("keep it bounded: --duration ≤ 60, --reps ≤ 5, rates ≤ 5000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine(args.wait_quiet)
    started = time.monotonic()
    runs = []
    with bench_mock() as mock:
        log(f"mock on {mock.url}; measuring generator/mock capacity")
        url, body, secs = mock.url + "/chat/completions", upstream_body("openai"), 1.5
        if not args.quick:
            secs = 3.0
        capacity = {
            "closed": run_loadgen(url, body, 0, secs, "--closed", "16"),
            "open": run_loadgen(url, body, 2000.0, secs),
        }
        for res in capacity.values():
            del res["latencies_ms"]
        gw = BenchProxy(args, mock)
        for w in args.workers:
            run = run_workers(gw, w, args)
            run["summary"] = summarize(run, args.providers)
            runs.append(run)
            if w != args.workers[-1]:
                report(args, info, capacity, runs, started, final=False)
    report(args, info, capacity, runs, started, final=True)
    return 0


def report(
    args: Any,
    info: dict[str, Any],
    capacity: dict[str, Any],
    runs: list[dict[str, Any]],
    started: float,
    *,
    final: bool,
) -> None:
    """Writes (and on the final call prints) the report; earlier calls save partial results."""
    info["loadavg_end"] = loadavg()
    all_steps = [s for r in runs for s in r["steps"] + r["half"]]
    meta = {
        "machine": info,
        "mode": "quick" if args.quick else "full",
        **{k: getattr(args, k) for k in ("duration", "direct_duration", "reps", "rates")},
        **{k: getattr(args, k) for k in ("providers", "p99_limit", "timeout", "foreign_limit")},
        "contended_retries": args.contended_retries,
        "capacity": capacity,
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
