"""Soak bench: the LiteLLM proxy (1 worker, fresh per arm) under minutes of constant load,
Python vs `rust: true`: errors, latency per segment, RSS slope (method: benches/README.md).

    python -m benches.soak --quick                # 45 s per arm       (BENCH_QUICK=1)
    python -m benches.soak                        # 600 s per arm, openai
    python -m benches.soak --provider bedrock --rate 60 --duration 300
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
import time
from typing import Any

from benches._common import (
    ARMS,
    RESULTS,
    WORKLOAD_NAMES,
    BenchProxy,
    arg_parser,
    bench_mock,
    cells,
    errors,
    finish,
    fmt,
    lat_stats,
    loadavg,
    log,
    machine,
    machine_line,
    median,
    table,
)
from devtools.procfs import Sampler, proc_state

DEFAULT_RATE = 90.0  # req/s when benches/results/gateway.json has no 1-worker rust figure
CAPACITY_SHARE = 0.8
STEP_MIB = 1.0  # an RSS rise of at least this much between consecutive samples is a "step"
MAX_DURATION_S = 3600.0
MAX_RATE = 1000.0


def rss_trend(samples: list[dict[str, float]], key: str, warmup_s: float) -> dict[str, Any]:
    """Slope (MiB/min, least squares after the warm-up), step-robust growth and RSS steps."""
    pts = [(s["t"], s[key]) for s in samples if s["t"] >= warmup_s]
    slope = intercept = r2 = math.nan
    if len(pts) >= 3:
        xs, ys = zip(*pts, strict=True)
        try:
            slope, intercept = statistics.linear_regression(xs, ys)
            r2 = statistics.correlation(xs, ys) ** 2 if len(set(ys)) > 1 else 1.0
        except statistics.StatisticsError:  # every x equal
            pass
    out: dict[str, Any] = {
        "points": len(pts),
        "slope_mib_per_min": slope * 60,
        "intercept_mib": intercept,
        "r2": r2,
        "fit_from_s": warmup_s,
    }
    if len(pts) >= 3:
        t_first, t_last = pts[0][0], pts[-1][0]
        window = min(60.0, (t_last - t_first) / 3)
        first = median(y for x, y in pts if x <= t_first + window)
        last = median(y for x, y in pts if x >= t_last - window)
        minutes = (t_last - t_first - window) / 60
        out["growth_mib"] = last - first
        out["growth_window_s"] = window
        out["growth_mib_per_min"] = (last - first) / minutes if minutes > 0 else math.nan
    steps = [b - a for (_, a), (_, b) in itertools.pairwise(pts) if b - a >= STEP_MIB]
    out |= {"steps": len(steps), "steps_total_mib": sum(steps)}
    out["largest_step_mib"] = max(steps, default=0.0)
    return out


def summarize_arm(arm: dict[str, Any], latencies: list[float], warmup_s: float) -> dict[str, Any]:
    segs, samples = arm["segments"], arm["samples"]
    kinds: dict[str, int] = {}
    for s in segs:
        for k, v in s["error_kinds"].items():
            kinds[k] = kinds.get(k, 0) + v
    ok, window = sum(s["ok"] for s in segs), sum(s["window_s"] for s in segs)
    first, last = (samples[0], samples[-1]) if samples else ({}, {})
    return {
        "sent": sum(s["scheduled"] for s in segs),
        "ok": ok,
        "errors": sum(s["errors"] for s in segs),
        "error_kinds": kinds,
        "first_error": next((s["first_error"] for s in segs if s["first_error"]), None),
        "achieved_rps": ok / window if window > 0 else 0.0,
        # Share of the arm's wall time with load scheduled (loadgen start-up/drain between
        # segments is the rest).
        "duty": sum(s["sched_s"] for s in segs) / arm["load_wall_s"] if arm["load_wall_s"] else 0,
        "lat": lat_stats(latencies),
        "segment_p99_max": max((s["lat"]["p99"] for s in segs), default=math.nan),
        "proxy_cpu_s_per_1k": sum(s["proxy_cpu_s"] for s in segs) / max(1, ok) * 1000,
        "foreign_cores_median": median(s["foreign_cores"] for s in segs),
        "foreign_cores_max": max((s["foreign_cores"] for s in segs), default=math.nan),
        "rss_start_mib": first.get("rss_mib", math.nan),
        "rss_end_mib": last.get("rss_mib", math.nan),
        "rss_max_mib": max((s["rss_mib"] for s in samples), default=math.nan),
        "anon_start_mib": first.get("anon_mib", math.nan),
        "anon_end_mib": last.get("anon_mib", math.nan),
        "threads_start": first.get("threads"),
        "threads_end": last.get("threads"),
        "threads_max": max((s["threads"] for s in samples), default=None),
        "rss": rss_trend(samples, "rss_mib", warmup_s),
        "anon": rss_trend(samples, "anon_mib", warmup_s),
    }


def run_arm(gw: BenchProxy, arm: str, rate: float, args: Any) -> dict[str, Any]:
    """One arm on a fresh 1-worker proxy: segments of open-loop load, RSS sampled every 1 s."""
    provider = args.provider
    log(f"{arm} arm: starting a fresh proxy (1 worker)")
    info = gw.start(1)
    try:
        verify = info["verify"][f"{provider}-{arm}"]
        if verify["status"] != 200 or (verify["x-litellm-rust"] == "true") != (arm == "rust"):
            raise RuntimeError(f"{provider}-{arm} is not served as expected: {verify}")
        gw.wait_idle(10)
        log(
            f"{arm} arm: proxy up in {info['startup_s']:.1f}s, pids {info['pids']}; "
            f"{rate:g} req/s for {args.duration:g}s in {args.segment:g}s segments"
        )
        n_segments = math.ceil(args.duration / args.segment - 1e-9)
        bound = int((args.duration + 120 * n_segments) / args.sample_interval)
        sampler = Sampler(gw.proxy.pid, args.sample_interval, max_samples=bound)
        sampler.start()
        segments: list[dict[str, Any]] = []
        latencies: list[float] = []
        stopped: str | None = None
        t_load = time.monotonic()
        try:
            for i in range(n_segments):
                seconds = min(args.segment, args.duration - i * args.segment)
                if seconds < 0.5:
                    break
                if proc_state(gw.proxy.pid) in (None, "Z"):
                    stopped = "proxy exited"
                    break
                t_start = time.monotonic() - sampler.t0
                try:
                    seg = gw.step(provider, arm, rate, seconds, warm=False)
                except RuntimeError as err:
                    stopped = f"load generator: {err}"
                    log(f"{arm} arm: segment {i}: {err}")
                    break
                latencies += seg.pop("latencies_ms")
                rss = sampler.samples[-1]["rss_mib"] if sampler.samples else math.nan
                segments.append(seg := {"index": i, "t_start_s": t_start, **seg, "rss_mib": rss})
                log(
                    f"{arm:>6} seg {i:>2} t={t_start:6.0f}s sent={seg['scheduled']} "
                    f"err={seg['errors']} p50={fmt(seg['lat']['p50'], 1)} "
                    f"p99={fmt(seg['lat']['p99'], 1)} ms rss={rss:.1f} MiB "
                    f"cores={seg['proxy_cores']:.2f} foreign={seg['foreign_cores']:.2f}"
                )
        finally:
            load_wall = time.monotonic() - t_load
            sampler.stop(final_sample=True)  # one last point at the very end of the load
        result = {
            "arm": arm,
            "rate": rate,
            "proxy": {"startup_s": info["startup_s"], "pids": info["pids"], "verify": verify},
            "stopped_early": stopped,
            "load_wall_s": load_wall,
            "segments": segments,
            "samples": sampler.samples,
        }
        return {**result, "summary": summarize_arm(result, latencies, args.warmup)}
    finally:
        gw.stop()


def summary_rows(a: dict[str, Any]) -> list[tuple[str, str]]:
    s, lat, rss, anon = a["summary"], a["summary"]["lat"], a["summary"]["rss"], a["summary"]["anon"]
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(s["error_kinds"].items()))
    return [
        ("offered rate (req/s)", f"{a['rate']:g}"),
        ("requests sent", f"{s['sent']}"),
        ("errors", f"{s['errors']}" + (f" ({kinds})" if kinds else "")),
        ("achieved rate (req/s)", f"{s['achieved_rps']:.1f}"),
        ("load duty cycle", f"{s['duty'] * 100:.1f}%"),
        ("latency p50 / p99 (ms)", f"{fmt(lat['p50'], 1)} / {fmt(lat['p99'], 1)}"),
        ("worst segment p99 (ms)", fmt(s["segment_p99_max"], 1)),
        ("proxy CPU s / 1k req", f"{s['proxy_cpu_s_per_1k']:.1f}"),
        ("RSS start → end (MiB)", f"{s['rss_start_mib']:.1f} → {s['rss_end_mib']:.1f}"),
        ("RSS max (MiB)", f"{s['rss_max_mib']:.1f}"),
        ("**RSS slope (MiB/min)**", f"**{fmt(rss['slope_mib_per_min'])}**"),
        ("RSS fit r²", fmt(rss["r2"])),
        ("RSS growth after warm-up (MiB)", fmt(rss.get("growth_mib", math.nan), 1)),
        (
            f"RSS steps ≥ {STEP_MIB:g} MiB (count / MiB)",
            f"{rss['steps']} / {rss['steps_total_mib']:.1f}",
        ),
        ("RssAnon start → end (MiB)", f"{s['anon_start_mib']:.1f} → {s['anon_end_mib']:.1f}"),
        ("RssAnon slope (MiB/min)", fmt(anon["slope_mib_per_min"])),
        (
            "threads start → end (max)",
            f"{s['threads_start']} → {s['threads_end']} ({s['threads_max']})",
        ),
        (
            "foreign cores median / max",
            f"{fmt(s['foreign_cores_median'])} / {fmt(s['foreign_cores_max'])}",
        ),
        ("stopped early", a["stopped_early"] or "no"),
    ]


def render(data: dict[str, Any]) -> str:
    meta, arms, cmp_ = data["meta"], data["arms"], data.get("comparison") or {}
    lines = [
        f"# Soak: LiteLLM proxy, 1 worker, Python path vs `rust: true` ({meta['provider']})",
        "",
        machine_line(meta["machine"]),
        "",
        f"Mode: {meta['mode']}; per arm a fresh proxy (python first, then rust), "
        f"{meta['duration']:g} s of open-loop load in {meta['segment']:g} s loadgen segments, "
        f"request timeout {meta['timeout']:g} s; RSS of the proxy's process tree sampled every "
        f"{meta['sample_interval']:g} s; slope fitted after a {meta['warmup']:g} s warm-up. "
        f"Rate: {meta['rate_source']['text']}.",
        "",
        *[f"> **Note:** {w}" for w in meta["warnings"]],
        *([""] if meta["warnings"] else []),
    ]
    present = [a for a in ARMS if a in arms]
    columns = [summary_rows(arms[a]) for a in present]
    rows = [[label, *(c[i][1] for c in columns)] for i, (label, _) in enumerate(columns[0])]
    lines += table(["", *present], rows if columns else [], "l" + "r" * len(present))
    lines += [
        "",
        f"**RSS slope rust/python: {fmt(cmp_.get('rss_slope_ratio', math.nan))}** "
        f"(rust - python: {fmt(cmp_.get('rss_slope_diff', math.nan))} MiB/min; RssAnon "
        f"ratio {fmt(cmp_.get('anon_slope_ratio', math.nan))}). "
        "A ratio is only meaningful when the Python slope is clearly non-zero; compare the "
        "difference and the growth row too.",
        "",
        "Slope, growth, errors, duty cycle and foreign cores as in benches/README.md (*Soak*).",
        "",
    ]
    head = ["#", "t (s)", "sent", "err", "achieved", "p50 ms", "p99 ms", "p99.9 ms"]
    head += ["proxy cores", "foreign cores", "RSS MiB"]
    tail = ("proxy_cores:.2f", "foreign_cores:.2f", "rss_mib:.1f")
    for a in present:
        rows = []
        for s in arms[a]["segments"]:
            row = [*cells(s, "index", "t_start_s:.0f", "scheduled"), errors(s)]
            lat = [fmt(s["lat"][q], 1) for q in ("p50", "p99", "p999")]
            rows.append([*row, *cells(s, "achieved_rps:.1f"), *lat, *cells(s, *tail)])
        summary = f"<details><summary>{a} arm: {len(arms[a]['segments'])} segments</summary>"
        lines += [summary, "", *table(head, rows, "r" * 11), "", "</details>", ""]
    return "\n".join(lines)


def plot(data: dict[str, Any], plt: Any) -> Any:
    meta, colors = data["meta"], {"python": "tab:blue", "rust": "tab:orange"}
    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for name, arm in data["arms"].items():
        t = [s["t"] / 60 for s in arm["samples"]]
        trend, color = arm["summary"]["rss"], colors[name]
        ax.plot(t, [s["rss_mib"] for s in arm["samples"]], color=color, lw=1, label=f"{name} RSS")
        if not math.isnan(a := trend["slope_mib_per_min"]):
            fit = [x for x in t if x * 60 >= meta["warmup"]]
            line = [trend["intercept_mib"] + a * x for x in fit]
            ax.plot(fit, line, color=color, ls="--", lw=1, label=f"{name} fit {a:+.2f} MiB/min")
        if segs := arm["segments"]:
            # One horizontal line per segment: starts, plus the end of the last one.
            ts = [s["t_start_s"] / 60 for s in segs] + [
                (segs[-1]["t_start_s"] + segs[-1]["wall_s"]) / 60
            ]
            p99 = [s["lat"]["p99"] for s in segs] + [segs[-1]["lat"]["p99"]]
            ax2.step(ts, p99, where="post", color=color, label=f"{name} p99")
    ax.axvline(meta["warmup"] / 60, color="grey", lw=0.8, ls=":", label="end of warm-up")
    ax.set_ylabel("proxy tree RSS (MiB)")
    rate = data["arms"].get("rust", data["arms"].get("python", {})).get("rate", 0)
    ax.set_title(f"Soak, 1 worker, {meta['provider']}: RSS at {rate:g} req/s")
    ax2.set_ylabel("segment p99 (ms)")
    ax2.set_xlabel("minutes since the arm's load started (each arm on a fresh proxy)")
    for a in (ax, ax2):
        a.grid(True, alpha=0.3)
        a.legend(fontsize=8)
    return fig


def parse_args(argv: list[str] | None) -> Any:
    p = arg_parser(__doc__, "45 s per arm, 15 s segments, 15 s warm-up (also BENCH_QUICK=1)")
    p.add_argument(
        "--provider", choices=WORKLOAD_NAMES, default="openai", help="workload (chat or embed-*)"
    )
    p.add_argument(
        "--rate",
        type=float,
        help="req/s for both arms (default 80%% of the rust arm's 1-worker max held rate "
        f"in results/gateway.json, else {DEFAULT_RATE:g})",
    )
    p.add_argument("--python-rate", type=float, help="req/s for the python arm (default --rate)")
    p.add_argument("--duration", type=float, help="seconds of load per arm (default 600 / 45)")
    p.add_argument("--segment", type=float, help="seconds per loadgen run (default 30 / 15)")
    p.add_argument("--warmup", type=float, help="seconds left out of the slope (default 60 / 15)")
    p.add_argument("--sample-interval", type=float, default=1.0, help="RSS sampling period (s)")
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--timeout", type=float, default=5.0, help="per-request timeout (s)")
    p.add_argument("--out", help="results name (default soak, soak-quick with --quick)")
    args = p.parse_args(argv)
    args.duration = args.duration or (45.0 if args.quick else 600.0)
    args.segment = args.segment or (15.0 if args.quick else 30.0)
    args.warmup = args.warmup if args.warmup is not None else (15.0 if args.quick else 60.0)
    args.out = args.out or ("soak-quick" if args.quick else "soak")
    args.arms = [a for a in ARMS if a in args.arms]  # python first, then rust
    args.providers = [args.provider]  # what BenchProxy reads
    if not 0 < args.duration <= MAX_DURATION_S:
        p.error(f"keep it bounded: 0 < --duration ≤ {MAX_DURATION_S:g}")
    if not 1 <= args.segment <= 120:
        p.error("--segment must be in [1, 120] s")
    if not 0.1 <= args.sample_interval <= 10:
        p.error("--sample-interval must be in [0.1, 10] s")
    if not 0 <= args.warmup < args.duration:
        p.error("--warmup must be shorter than --duration")
    if any(r is not None and not 0 < r <= MAX_RATE for r in (args.rate, args.python_rate)):
        p.error(f"rates must be in (0, {MAX_RATE:g}]")
    return args


def choose_rates(args: Any) -> tuple[dict[str, float], dict[str, Any], list[str]]:
    """Each arm's rate, where it comes from, and warnings: by default 80% of the rust arm's
    highest held 1-worker rate in gateway.py's results for the workload."""
    name = "gateway-embeddings.json" if args.provider.startswith("embed-") else "gateway.json"
    try:
        runs = json.loads((RESULTS / name).read_text())["runs"]
        held = next(r for r in runs if r["workers"] == 1)["summary"][args.provider]
    except (OSError, ValueError, KeyError, StopIteration):
        held = {}
    rust_max, py_max = held.get("rust_max_rps") or 0.0, held.get("python_max_rps") or 0.0
    capped = "≥ " if held.get("rust_capped_by_rate_list") else ""
    rate = args.rate or (round(CAPACITY_SHARE * rust_max, 1) if rust_max else DEFAULT_RATE)
    text = f"{rate:g} req/s " + (
        "(--rate)"
        if args.rate
        else f"= {CAPACITY_SHARE:.0%} of the rust arm's 1-worker max held rate {capped}"
        f"{rust_max:g} req/s (benches/results/{name})"
        if rust_max
        else f"(default; no 1-worker rust figure in {name})"
    )
    rates, warnings = {"python": args.python_rate or rate, "rust": rate}, []
    if "python" in args.arms and py_max and rates["python"] > py_max:
        warnings.append(
            f"the python arm runs at {rates['python']:g} req/s, above its own 1-worker max held "
            f"rate ({py_max:g} req/s in {name}): expect queueing, timeouts and RSS from "
            "in-flight requests in that arm (use --python-rate for a control below capacity)"
        )
    if rates["python"] != rates["rust"] and len(args.arms) == 2:
        warnings.append(
            f"the arms run at different rates (python {rates['python']:g}, rust "
            f"{rates['rust']:g} req/s)"
        )
    return rates, {"text": text, "gateway": held}, warnings


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rates, source, warnings = choose_rates(args)
    for w in warnings:
        log(f"note: {w}")
    info = machine(args.wait_quiet)
    started = time.monotonic()
    arms: dict[str, Any] = {}
    failed: str | None = None
    with bench_mock() as mock:
        log(f"mock on {mock.url}; provider {args.provider}; rates {rates}")
        gw = BenchProxy(args, mock)
        for arm in args.arms:
            try:
                arms[arm] = run_arm(gw, arm, rates[arm], args)
            except Exception as err:  # report what we have, then fail
                failed = f"{arm} arm: {err!r}"
                log(f"ERROR {failed}")
                break
    info["loadavg_end"] = loadavg()
    comparison: dict[str, float] = {}
    if "python" in arms and "rust" in arms:
        for key in ("rss", "anon"):
            a, b = (arms[arm]["summary"][key]["slope_mib_per_min"] for arm in ("rust", "python"))
            comparison[f"{key}_slope_ratio"] = a / b if b and not math.isnan(a + b) else math.nan
            comparison[f"{key}_slope_diff"] = a - b
    meta = {
        "machine": info,
        "mode": "quick" if args.quick else "full",
        "provider": args.provider,
        "rates": rates,
        "rate_source": source,
        "warnings": warnings,
        **{k: getattr(args, k) for k in ("duration", "segment", "warmup", "sample_interval")},
        "timeout": args.timeout,
        "elapsed_s": time.monotonic() - started,
        "failed": failed,
    }
    data = {"meta": meta, "arms": arms, "comparison": comparison}
    markdown = render(data) + (f"\n**Run failed:** {failed}\n" if failed else "")
    draw = (lambda plt: plot(data, plt)) if arms else None
    finish(args, args.out, markdown, data, plot=draw, alt="proxy RSS over time, both arms")
    log(f"done in {meta['elapsed_s']:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
