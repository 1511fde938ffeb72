"""Soak bench: the LiteLLM proxy (1 worker) under constant load, Python vs `rust: true`, RSS.

Minutes of constant open-loop load; the RSS of the proxy's process tree is sampled every second.

One provider at a time. The mock provider (`benches/mock_provider.py`) runs in its own process;
per arm a *fresh* proxy (`gateway.Gateway`, i.e. `tests.harness.ProxyProcess`, 1 worker, the
same config for both arms: `<provider>-python` and `<provider>-rust`) is started, so each arm's
RSS starts from a clean process. Arms run one after the other: python, then rust.

`benches/loadgen.py` (its own process) drives the arm's model at a constant arrival rate in
back-to-back segments (default 30 s), so errors and p50/p99 come per segment; a thread samples
the RSS of the proxy's whole process tree every second (`/proc/<pid>/statm`, plus RssAnon and the
thread count from `/proc/<pid>/status`). Errors: non-2xx, timeouts, connection errors, a rust-arm
response without `x-litellm-rust: true`, a python-arm response with `x-litellm-rust`.

RSS slope = least-squares fit over the samples after the warm-up (default 60 s), in MiB/min;
the report also gives a step-robust growth (median of the last window - median of the first
window after warm-up) and the upward RSS steps of ≥ 1 MiB between consecutive samples.

Default rate: 80% of the rust arm's highest held 1-worker rate for the provider in
`benches/results/gateway.json` (90 req/s without it). Both arms run at that rate unless
`--python-rate` says otherwise.

    python benches/soak.py --quick                # 45 s per arm       (BENCH_QUICK=1)
    python benches/soak.py                        # 600 s per arm, openai
    python benches/soak.py --provider bedrock --rate 60 --duration 300
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import (
    PROVIDERS,
    RESULTS,
    MockProvider,
    cpu_seconds,
    env_flag,
    fmt,
    loadavg,
    machine,
    machine_line,
    median,
    process_tree,
    rss_bytes,
    system_busy_seconds,
    wait_quiet,
    write_results,
)
from gateway import ARMS, MESSAGES, RUST_HEADER, Gateway, lat_stats, log, run_loadgen

DEFAULT_RATE = 90.0  # req/s when benches/results/gateway.json has no 1-worker rust figure
CAPACITY_SHARE = 0.8
GATEWAY_JSON = RESULTS / "gateway.json"
MIB = 2**20
STEP_MIB = 1.0  # an RSS rise of at least this much between consecutive samples is a "step"
MAX_DURATION_S = 3600.0
MAX_RATE = 1000.0


# -- rate ----------------------------------------------------------------------------------


def rate_from_gateway(provider: str, path: Path = GATEWAY_JSON) -> dict[str, Any] | None:
    """The 1-worker held rates for `provider` from a gateway.py result, or None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    run = next((r for r in data.get("runs", []) if r.get("workers") == 1), None)
    summary = (run or {}).get("summary", {}).get(provider)
    if not summary or not summary.get("rust_max_rps"):
        return None
    meta = data.get("meta", {})
    return {
        "file": str(path.relative_to(RESULTS.parent.parent)),
        "mode": meta.get("mode"),
        "date": meta.get("machine", {}).get("date"),
        "complete": data.get("complete"),
        "rust_max_rps": float(summary["rust_max_rps"]),
        "python_max_rps": float(summary.get("python_max_rps") or 0.0),
        # The rate list ran out before the rust arm failed: its max is a lower bound.
        "rust_capped_by_rate_list": bool(summary.get("rust_capped_by_rate_list")),
    }


# -- RSS sampling --------------------------------------------------------------------------


def status_fields(pids: list[int]) -> tuple[int, int]:
    """(sum of RssAnon in bytes, sum of Threads) over the given processes."""
    anon = threads = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        for line in text.splitlines():
            if line.startswith("RssAnon:"):
                anon += int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads += int(line.split()[1])
    return anon, threads


class RssSampler(threading.Thread):
    """Samples RSS, RssAnon, threads and CPU of a process tree on a fixed 1 s grid (t = 0 at
    start) until stopped; bounded by `max_samples`."""

    def __init__(self, root: int, interval: float, max_samples: int) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.root = root
        self.interval = interval
        self.max_samples = max_samples
        self.samples: list[dict[str, float]] = []
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> dict[str, float]:
        pids = process_tree(self.root)
        anon, threads = status_fields(pids)
        s = {
            "t": round(time.monotonic() - self.t0, 3),
            "rss_mib": rss_bytes(pids) / MIB,
            "anon_mib": anon / MIB,
            "threads": threads,
            "procs": len(pids),
            "cpu_s": cpu_seconds(pids),
        }
        self.samples.append(s)
        return s

    def run(self) -> None:
        k = 0
        while k < self.max_samples and not self.stop_event.is_set():
            self.sample()
            k += 1
            delay = self.t0 + k * self.interval - time.monotonic()
            if self.stop_event.wait(max(0.0, delay)):
                break

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)
        self.sample()  # one last point at the very end of the load


# -- analysis --------------------------------------------------------------------------------


def least_squares(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(slope, intercept, r²) of y on x; NaNs with fewer than 3 points."""
    n = len(points)
    if n < 3:
        return math.nan, math.nan, math.nan
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    if sxx == 0:
        return math.nan, math.nan, math.nan
    slope = sxy / sxx
    r2 = sxy * sxy / (sxx * syy) if syy > 0 else 1.0
    return slope, my - slope * mx, r2


def rss_trend(samples: list[dict[str, float]], key: str, warmup_s: float) -> dict[str, Any]:
    """Slope (MiB/min, least squares after the warm-up), step-robust growth and RSS steps."""
    pts = [(s["t"], s[key]) for s in samples if s["t"] >= warmup_s]
    slope, intercept, r2 = least_squares(pts)
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
        first = median([y for x, y in pts if x <= t_first + window])
        last = median([y for x, y in pts if x >= t_last - window])
        minutes = (t_last - t_first - window) / 60
        out["growth_mib"] = last - first
        out["growth_window_s"] = window
        out["growth_mib_per_min"] = (last - first) / minutes if minutes > 0 else math.nan
    steps = [b - a for (_, a), (_, b) in itertools.pairwise(pts) if b - a >= STEP_MIB]
    out["steps"] = len(steps)
    out["steps_total_mib"] = sum(steps)
    out["largest_step_mib"] = max(steps, default=0.0)
    return out


def summarize_arm(arm: dict[str, Any], latencies: list[float], warmup_s: float) -> dict[str, Any]:
    segs = arm["segments"]
    samples = arm["samples"]
    kinds: dict[str, int] = {}
    for s in segs:
        for k, v in s["error_kinds"].items():
            kinds[k] = kinds.get(k, 0) + v
    sent = sum(s["scheduled"] for s in segs)
    ok = sum(s["ok"] for s in segs)
    window = sum(s["window_s"] for s in segs)
    cpu = sum(s["proxy_cpu_s"] for s in segs)
    first = samples[0] if samples else {}
    last = samples[-1] if samples else {}
    return {
        "sent": sent,
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
        "proxy_cpu_s_per_1k": cpu / max(1, ok) * 1000,
        "foreign_cores_median": median([s["foreign_cores"] for s in segs]),
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


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


# -- the run -----------------------------------------------------------------------------------


def load_segment(
    gw: Gateway,
    mock: MockProvider,
    arm: str,
    body: str,
    rate: float,
    seconds: float,
    index: int,
    sampler: RssSampler,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One loadgen run against the proxy; its raw latencies are under `latencies_ms`."""
    pids = gw.pids()
    c0, m0 = cpu_seconds(pids), cpu_seconds([mock.pid])
    b0, w0 = system_busy_seconds(), time.monotonic()
    t_start = w0 - sampler.t0
    res = run_loadgen(
        f"{gw.proxy.url}/chat/completions",
        body,
        rate,
        seconds,
        headers=("Authorization: Bearer sk-test-master",),
        expect=(RUST_HEADER,) if arm == "rust" else (),
        forbid=("x-litellm-rust",) if arm == "python" else (),
        timeout=args.timeout,
        conns=0,  # no unrecorded warm-up requests: every request counts
        warmup=0,
    )
    wall = time.monotonic() - w0
    proxy_cpu = cpu_seconds(gw.pids()) - c0
    mock_cpu = cpu_seconds([mock.pid]) - m0
    busy = system_busy_seconds() - b0
    lat = res["latencies_ms"]
    keep = (
        "scheduled",
        "ok",
        "errors",
        "error_kinds",
        "first_error",
        "achieved_rps",
        "sched_s",
        "window_s",
        "conns_peak",
        "send_lag_p99_ms",
        "gen_cpu_util",
    )
    return {
        "index": index,
        "t_start_s": t_start,
        "wall_s": wall,
        **{k: res[k] for k in keep},
        "lat": lat_stats(lat),
        "proxy_cpu_s": proxy_cpu,
        "proxy_cores": proxy_cpu / wall,
        # Everything else on the machine (builds, tests): > ~0.3 means a contended segment.
        "foreign_cores": max(0.0, (busy - proxy_cpu - mock_cpu - res["gen_cpu_s"]) / wall),
        "rss_mib": sampler.samples[-1]["rss_mib"] if sampler.samples else math.nan,
        "latencies_ms": lat,
    }


def run_arm(
    gw: Gateway, mock: MockProvider, arm: str, rate: float, args: argparse.Namespace
) -> dict[str, Any]:
    """One arm on a fresh 1-worker proxy: segments of open-loop load, RSS sampled every 1 s."""
    from tests.harness import proc_state

    provider = args.provider
    log(f"{arm} arm: starting a fresh proxy (1 worker)")
    info = gw.start_proxy(1)
    try:
        verify = info["verify"][f"{provider}-{arm}"]
        served_by_rust = verify["x-litellm-rust"] == "true"
        if verify["status"] != 200 or served_by_rust != (arm == "rust"):
            raise RuntimeError(f"{provider}-{arm} is not served as expected: {verify}")
        gw.wait_idle(10)
        log(
            f"{arm} arm: proxy up in {info['startup_s']:.1f}s, pids {info['pids']}; "
            f"{rate:g} req/s for {args.duration:g}s in {args.segment:g}s segments"
        )
        body = json.dumps({"model": f"{provider}-{arm}", "messages": MESSAGES})
        n_segments = math.ceil(args.duration / args.segment - 1e-9)
        sampler = RssSampler(
            gw.proxy.pid,
            args.sample_interval,
            max_samples=int((args.duration + 120 * n_segments) / args.sample_interval),
        )
        sampler.start()
        segments: list[dict[str, Any]] = []
        latencies: list[float] = []
        stopped: str | None = None
        t_load = time.monotonic()
        try:
            for i in range(n_segments):
                seg_duration = min(args.segment, args.duration - i * args.segment)
                if seg_duration < 0.5:
                    break
                if proc_state(gw.proxy.pid) in (None, "Z"):
                    stopped = "proxy exited"
                    break
                try:
                    seg = load_segment(gw, mock, arm, body, rate, seg_duration, i, sampler, args)
                except RuntimeError as err:
                    stopped = f"load generator: {err}"
                    log(f"{arm} arm: segment {i}: {err}")
                    break
                latencies.extend(seg.pop("latencies_ms"))
                segments.append(seg)
                log(
                    f"{arm:>6} seg {i:>2} t={seg['t_start_s']:6.0f}s sent={seg['scheduled']} "
                    f"err={seg['errors']} p50={fmt(seg['lat']['p50'], 1)} "
                    f"p99={fmt(seg['lat']['p99'], 1)} ms rss={seg['rss_mib']:.1f} MiB "
                    f"cores={seg['proxy_cores']:.2f} foreign={seg['foreign_cores']:.2f}"
                )
        finally:
            load_wall = time.monotonic() - t_load
            sampler.stop()
        result = {
            "arm": arm,
            "rate": rate,
            "proxy": {"startup_s": info["startup_s"], "pids": info["pids"], "verify": verify},
            "stopped_early": stopped,
            "load_wall_s": load_wall,
            "segments": segments,
            "samples": sampler.samples,
        }
        result["summary"] = summarize_arm(result, latencies, args.warmup)
        return result
    finally:
        gw.stop_proxy()


# -- reporting -------------------------------------------------------------------------------


def render(data: dict[str, Any]) -> str:
    meta = data["meta"]
    arms = data["arms"]
    src = meta["rate_source"]
    lines = [
        f"# Soak: LiteLLM proxy, 1 worker, Python path vs `rust: true` ({meta['provider']})",
        "",
        machine_line(meta["machine"]),
        "",
        f"Mode: {meta['mode']}; per arm a fresh proxy (python first, then rust), "
        f"{meta['duration']:g} s of open-loop load in {meta['segment']:g} s loadgen segments, "
        f"request timeout {meta['timeout']:g} s; RSS of the proxy's process tree sampled every "
        f"{meta['sample_interval']:g} s; slope fitted after a {meta['warmup']:g} s warm-up. "
        f"Rate: {src['text']}.",
        "",
    ]
    if meta.get("warnings"):
        lines += [*(f"> **Note:** {w}" for w in meta["warnings"]), ""]
    present = [a for a in ARMS if a in arms]
    lines += [
        "| | " + " | ".join(present) + " |",
        "|---|" + "---:|" * len(present),
    ]

    def row(label: str, fn: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(fn(arms[a]) for a in present) + " |")

    def errs(a: dict[str, Any]) -> str:
        s = a["summary"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(s["error_kinds"].items()))
        return f"{s['errors']}" + (f" ({kinds})" if kinds else "")

    def sm(a: dict[str, Any]) -> dict[str, Any]:
        summary: dict[str, Any] = a["summary"]
        return summary

    row("offered rate (req/s)", lambda a: f"{a['rate']:g}")
    row("requests sent", lambda a: f"{sm(a)['sent']}")
    row("errors", errs)
    row("achieved rate (req/s)", lambda a: f"{sm(a)['achieved_rps']:.1f}")
    row("load duty cycle", lambda a: f"{sm(a)['duty'] * 100:.1f}%")
    row(
        "latency p50 / p99 (ms)",
        lambda a: f"{fmt(a['summary']['lat']['p50'], 1)} / {fmt(a['summary']['lat']['p99'], 1)}",
    )
    row("worst segment p99 (ms)", lambda a: fmt(sm(a)["segment_p99_max"], 1))
    row("proxy CPU s / 1k req", lambda a: f"{sm(a)['proxy_cpu_s_per_1k']:.1f}")
    row(
        "RSS start → end (MiB)",
        lambda a: f"{sm(a)['rss_start_mib']:.1f} → {sm(a)['rss_end_mib']:.1f}",
    )
    row("RSS max (MiB)", lambda a: f"{sm(a)['rss_max_mib']:.1f}")
    row("**RSS slope (MiB/min)**", lambda a: f"**{fmt(sm(a)['rss']['slope_mib_per_min'], 2)}**")
    row("RSS fit r²", lambda a: fmt(sm(a)["rss"]["r2"], 2))
    row(
        "RSS growth after warm-up (MiB)", lambda a: fmt(sm(a)["rss"].get("growth_mib", math.nan), 1)
    )
    row(
        f"RSS steps ≥ {STEP_MIB:g} MiB (count / MiB)",
        lambda a: f"{sm(a)['rss']['steps']} / {sm(a)['rss']['steps_total_mib']:.1f}",
    )
    row(
        "RssAnon start → end (MiB)",
        lambda a: f"{sm(a)['anon_start_mib']:.1f} → {sm(a)['anon_end_mib']:.1f}",
    )
    row("RssAnon slope (MiB/min)", lambda a: fmt(sm(a)["anon"]["slope_mib_per_min"], 2))
    row(
        "threads start → end (max)",
        lambda a: f"{sm(a)['threads_start']} → {sm(a)['threads_end']} ({sm(a)['threads_max']})",
    )
    row(
        "foreign cores median / max",
        lambda a: f"{fmt(sm(a)['foreign_cores_median'], 2)} / {fmt(sm(a)['foreign_cores_max'], 2)}",
    )
    row("stopped early", lambda a: a["stopped_early"] or "no")
    cmp_ = data.get("comparison") or {}
    lines += [
        "",
        f"**RSS slope rust/python: {fmt(cmp_.get('rss_slope_ratio', math.nan), 2)}** "
        f"(rust - python: {fmt(cmp_.get('rss_slope_diff', math.nan), 2)} MiB/min; RssAnon "
        f"ratio {fmt(cmp_.get('anon_slope_ratio', math.nan), 2)}). "
        "A ratio is only meaningful when the Python slope is clearly non-zero; compare the "
        "difference and the growth row too.",
        "",
        "Slope = least squares over the samples after the warm-up (samples are autocorrelated; "
        "read r² and the growth row before trusting a small slope). Growth = median RSS of the "
        "last window - median of the first window after warm-up (windows of min(60 s, span/3)). "
        "Errors = non-2xx, timeouts, connection errors, and responses on the wrong path "
        "(rust arm without `x-litellm-rust: true`, python arm with `x-litellm-rust`). Duty cycle "
        "= share of the load phase during which requests were scheduled (the rest is loadgen "
        "start-up and drain between segments). Foreign cores = CPU used by other processes.",
        "",
    ]
    for a in present:
        arm = arms[a]
        lines += [
            f"<details><summary>{a} arm: {len(arm['segments'])} segments</summary>",
            "",
            "| # | t (s) | sent | err | achieved | p50 ms | p99 ms | p99.9 ms | proxy cores | "
            "foreign cores | RSS MiB |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in arm["segments"]:
            err = f"{s['errors']}" + (f" ({s['first_error']})" if s["errors"] else "")
            lines.append(
                f"| {s['index']} | {s['t_start_s']:.0f} | {s['scheduled']} | {err} | "
                f"{s['achieved_rps']:.1f} | {fmt(s['lat']['p50'], 1)} | "
                f"{fmt(s['lat']['p99'], 1)} | {fmt(s['lat']['p999'], 1)} | "
                f"{s['proxy_cores']:.2f} | {s['foreign_cores']:.2f} | {s['rss_mib']:.1f} |"
            )
        lines += ["", "</details>", ""]
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed; no plot (pip install matplotlib)")
        return False
    meta = data["meta"]
    colors = {"python": "tab:blue", "rust": "tab:orange"}
    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for name, arm in data["arms"].items():
        samples = arm["samples"]
        t = [s["t"] / 60 for s in samples]
        trend = arm["summary"]["rss"]
        ax.plot(t, [s["rss_mib"] for s in samples], color=colors[name], lw=1, label=f"{name} RSS")
        if not math.isnan(trend["slope_mib_per_min"]):
            fit = [x for x in t if x * 60 >= meta["warmup"]]
            a, b = trend["slope_mib_per_min"], trend["intercept_mib"]
            ax.plot(
                fit,
                [b + a * x for x in fit],
                color=colors[name],
                ls="--",
                lw=1,
                label=f"{name} fit {a:+.2f} MiB/min",
            )
        segs = arm["segments"]
        if not segs:
            continue
        # One horizontal line per segment: starts, plus the end of the last one.
        ax2.step(
            [s["t_start_s"] / 60 for s in segs]
            + [(segs[-1]["t_start_s"] + segs[-1]["wall_s"]) / 60],
            [s["lat"]["p99"] for s in segs] + [segs[-1]["lat"]["p99"]],
            where="post",
            color=colors[name],
            label=f"{name} p99",
        )
    ax.axvline(meta["warmup"] / 60, color="grey", lw=0.8, ls=":", label="end of warm-up")
    ax.set_ylabel("proxy tree RSS (MiB)")
    ax.set_title(
        f"Soak, 1 worker, {meta['provider']}: RSS at "
        f"{data['arms'].get('rust', data['arms'].get('python', {})).get('rate', 0):g} req/s"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax2.set_ylabel("segment p99 (ms)")
    ax2.set_xlabel("minutes since the arm's load started (each arm on a fresh proxy)")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        default=env_flag("BENCH_QUICK"),
        help="45 s per arm, 15 s segments, 15 s warm-up (also BENCH_QUICK=1)",
    )
    p.add_argument("--provider", choices=PROVIDERS, default="openai")
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
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=float(os.environ.get("BENCH_WAIT_QUIET", "0")),
        help="first wait up to N s for other processes to go idle (BENCH_WAIT_QUIET)",
    )
    p.add_argument("--out", help="results name (default soak, soak-quick with --quick)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    args.duration = args.duration or (45.0 if args.quick else 600.0)
    args.segment = args.segment or (15.0 if args.quick else 30.0)
    args.warmup = args.warmup if args.warmup is not None else (15.0 if args.quick else 60.0)
    args.out = args.out or ("soak-quick" if args.quick else "soak")
    args.arms = [a for a in ARMS if a in args.arms]  # python first, then rust
    args.providers = [args.provider]  # what gateway.Gateway reads
    if not 0 < args.duration <= MAX_DURATION_S:
        p.error(f"keep it bounded: 0 < --duration ≤ {MAX_DURATION_S:g}")
    if not 1 <= args.segment <= 120:
        p.error("--segment must be in [1, 120] s")
    if not 0.1 <= args.sample_interval <= 10:
        p.error("--sample-interval must be in [0.1, 10] s")
    if not 0 <= args.warmup < args.duration:
        p.error("--warmup must be shorter than --duration")
    for r in (args.rate, args.python_rate):
        if r is not None and not 0 < r <= MAX_RATE:
            p.error(f"rates must be in (0, {MAX_RATE:g}]")
    return args


def choose_rates(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, Any], list[str]]:
    gw_rates = rate_from_gateway(args.provider)
    warnings: list[str] = []
    if args.rate is not None:
        rate = args.rate
        source: dict[str, Any] = {"text": f"{rate:g} req/s (--rate)", "gateway": gw_rates}
    elif gw_rates is not None:
        rate = round(CAPACITY_SHARE * gw_rates["rust_max_rps"], 1)
        bound = "≥ " if gw_rates["rust_capped_by_rate_list"] else ""
        source = {
            "text": f"{rate:g} req/s = {CAPACITY_SHARE:.0%} of the rust arm's 1-worker max held "
            f"rate {bound}{gw_rates['rust_max_rps']:g} req/s ({gw_rates['file']}, "
            f"{gw_rates['mode']} run of {gw_rates['date']})",
            "gateway": gw_rates,
        }
    else:
        rate = DEFAULT_RATE
        source = {"text": f"{rate:g} req/s (default; no 1-worker rust figure in gateway.json)"}
    rates = {"python": args.python_rate or rate, "rust": rate}
    py_max = (gw_rates or {}).get("python_max_rps") or 0.0
    if "python" in args.arms and py_max and rates["python"] > py_max:
        warnings.append(
            f"the python arm runs at {rates['python']:g} req/s, above its own 1-worker max held "
            f"rate ({py_max:g} req/s in gateway.json): expect queueing, timeouts and RSS from "
            "in-flight requests in that arm (use --python-rate for a control below capacity)"
        )
    if rates["python"] != rates["rust"] and len(args.arms) == 2:
        warnings.append(
            f"the arms run at different rates (python {rates['python']:g}, rust "
            f"{rates['rust']:g} req/s)"
        )
    return rates, source, warnings


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rates, source, warnings = choose_rates(args)
    for w in warnings:
        log(f"note: {w}")
    info = machine()
    if args.wait_quiet > 0:
        log(f"waiting up to {args.wait_quiet:.0f}s for the machine to be idle")
        info["busy_cores_before"] = wait_quiet(args.wait_quiet)
    info["loadavg_start"] = loadavg()
    started = time.monotonic()
    arms: dict[str, Any] = {}
    failed: str | None = None
    with MockProvider() as mock:
        log(f"mock on {mock.url}; provider {args.provider}; rates {rates}")
        gw = Gateway(args, mock)
        for arm in args.arms:
            try:
                arms[arm] = run_arm(gw, mock, arm, rates[arm], args)
            except Exception as err:  # report what we have, then fail
                failed = f"{arm} arm: {err!r}"
                log(f"ERROR {failed}")
                break
    info["loadavg_end"] = loadavg()
    comparison: dict[str, float] = {}
    if "python" in arms and "rust" in arms:
        py, rs = arms["python"]["summary"], arms["rust"]["summary"]
        for key in ("rss", "anon"):
            a, b = rs[key]["slope_mib_per_min"], py[key]["slope_mib_per_min"]
            comparison[f"{key}_slope_ratio"] = ratio(a, b)
            comparison[f"{key}_slope_diff"] = a - b
    meta = {
        "machine": info,
        "mode": "quick" if args.quick else "full",
        "provider": args.provider,
        "rates": rates,
        "rate_source": source,
        "warnings": warnings,
        "duration": args.duration,
        "segment": args.segment,
        "warmup": args.warmup,
        "sample_interval": args.sample_interval,
        "timeout": args.timeout,
        "elapsed_s": time.monotonic() - started,
        "failed": failed,
    }
    data = {"meta": meta, "arms": arms, "comparison": comparison}
    markdown = render(data)
    if failed:
        markdown += f"\n**Run failed:** {failed}\n"
    print(markdown)
    if not args.no_write:
        write_results(args.out, markdown, data)
        written = f"{RESULTS}/{args.out}.md, {args.out}.json"
        if arms and plot(data, RESULTS / f"{args.out}.png"):
            with (RESULTS / f"{args.out}.md").open("a") as fh:
                fh.write(f"\n![proxy RSS over time, both arms]({args.out}.png)\n")
            written += f", {args.out}.png"
        log(f"wrote {written}")
    log(f"done in {meta['elapsed_s']:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
