"""Gateway bench: the real LiteLLM proxy, Python path vs `rust: true`, open loop.

Starts the mock provider (`benches/mock_provider.py`) and the real LiteLLM proxy
(`tests.harness.ProxyProcess`; 1 worker, then 2 in full mode) with, per provider, a plain model
`<provider>-python` and a `rust: true` model `<provider>-rust`, both pointing at the mock, and
`callbacks: ["litellm_fastpath.proxy.accelerator"]` (default logging otherwise).

`benches/loadgen.py` (its own process) drives each arm open loop at a constant arrival rate;
latency is measured from each request's *scheduled* send time (coordinated-omission
correction). Added latency = proxied percentile - direct-to-mock percentile at the same rate in
the same repetition. Every response of a rust arm must carry `x-litellm-rust: true` (else it is
an error for that arm); a python arm's response must not carry it.

Rates step up; at each rate the arms run interleaved (python, rust per provider) and each step
is repeated (`--reps`). An arm holds a rate when p99 ≤ 50 ms with no errors in the majority of
repetitions (a tie gets one more repetition); an arm stops stepping at the first rate it does not
hold. Then both arms run at 50% of the Python arm's highest held rate.

    python benches/gateway.py --quick      # ~3 s steps, 1 worker            (BENCH_QUICK=1)
    python benches/gateway.py              # 6 s steps, 1 then 2 workers, py-spy profile
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import (
    BENCHES,
    PROVIDERS,
    RESULTS,
    MockProvider,
    cpu_seconds,
    deployment_kwargs,
    env_flag,
    fmt,
    hwm_bytes,
    loadavg,
    machine,
    machine_line,
    percentile,
    process_tree,
    rss_bytes,
    system_busy_seconds,
    wait_quiet,
    write_results,
)

ARMS = ("python", "rust")
P99_LIMIT_MS = 50.0
# Finer steps where a 1-worker proxy saturates (~80-120 req/s on these 2-core boxes).
DEFAULT_RATES = (25, 50, 70, 85, 100, 115, 130, 150, 175, 200, 250, 300, 400, 500, 700, 1000)
MESSAGES = [{"role": "user", "content": "Say hello."}]
UPSTREAM_PATH = {
    "openai": "/chat/completions",
    "anthropic": "/v1/messages",
    "bedrock": "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse",
}
RUST_HEADER = "x-litellm-rust: true"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- load generator --------------------------------------------------------------------------


def upstream_body(provider: str) -> str:
    if provider == "openai":
        return json.dumps({"model": "gpt-4o-mini", "messages": MESSAGES})
    if provider == "anthropic":
        return json.dumps({"model": "claude-sonnet-4-5", "messages": MESSAGES, "max_tokens": 64000})
    return json.dumps({"messages": [{"role": "user", "content": [{"text": "Say hello."}]}]})


def run_loadgen(
    url: str,
    body: str,
    rate: float,
    duration: float,
    *,
    headers: tuple[str, ...] = (),
    expect: tuple[str, ...] = (),
    forbid: tuple[str, ...] = (),
    timeout: float = 5.0,
    conns: int = 8,
    closed: int = 0,
    warmup: int = 20,
    watch_pids: list[int] | None = None,
) -> dict[str, Any]:
    """Runs `benches/loadgen.py` and returns its JSON; samples the watched processes' RSS."""
    cmd = [
        sys.executable,
        str(BENCHES / "loadgen.py"),
        "--url",
        url,
        "--body",
        body,
        "--duration",
        str(duration),
        "--timeout",
        str(timeout),
        "--conns",
        str(conns),
        "--warmup",
        str(warmup),
        "--fifo",
        "--max-conns",
        "512",
    ]
    cmd += ["--closed", str(closed)] if closed else ["--rate", str(rate)]
    for h in headers:
        cmd += ["-H", h]
    for h in expect:
        cmd += ["--expect-header", h]
    for h in forbid:
        cmd += ["--forbid-header", h]
    peak = 0
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    deadline = time.monotonic() + duration + timeout + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if watch_pids:
            peak = max(peak, rss_bytes(watch_pids))
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        raise RuntimeError("load generator overran its time budget")
    reader.join(5)
    if proc.returncode != 0 or not out or not out[0]:
        raise RuntimeError(f"load generator failed with {proc.returncode}")
    result: dict[str, Any] = json.loads(out[0])
    result["peak_rss_bytes"] = peak
    return result


# -- per-step bookkeeping --------------------------------------------------------------------


def lat_stats(latencies: list[float]) -> dict[str, float]:
    s = sorted(latencies)
    return {"p50": percentile(s, 50), "p99": percentile(s, 99), "p999": percentile(s, 99.9)}


class Gateway:
    def __init__(self, args: argparse.Namespace, mock: MockProvider) -> None:
        self.args = args
        self.mock = mock
        self.proxy: Any = None
        self.workers = 0

    # proxy lifecycle ------------------------------------------------------------------------

    def start_proxy(self, workers: int) -> dict[str, Any]:
        from tests.harness import ProxyProcess

        model_list = []
        for p in self.args.providers:
            base = deployment_kwargs(p, self.mock.url)
            model_list.append({"model_name": f"{p}-python", "litellm_params": dict(base)})
            model_list.append({"model_name": f"{p}-rust", "litellm_params": {**base, "rust": True}})
        settings = {"callbacks": ["litellm_fastpath.proxy.accelerator"]}
        self.proxy = ProxyProcess(model_list, settings, workers=workers, startup_timeout=120)
        self.proxy.__enter__()
        self.workers = workers
        time.sleep(1.0 if workers == 1 else 3.0)  # let every worker finish its startup
        info = {"workers": workers, "startup_s": self.proxy.startup_s, "pids": self.pids()}
        info["verify"] = self.verify()
        return info

    def stop_proxy(self) -> None:
        if self.proxy is not None:
            self.proxy.__exit__(None, None, None)
            self.proxy = None

    def pids(self) -> list[int]:
        return process_tree(self.proxy.pid)

    def verify(self) -> dict[str, Any]:
        """One request per model: status and whether the Rust headers came back."""
        out = {}
        for p in self.args.providers:
            for arm in ARMS:
                r = self.proxy.post(
                    "/chat/completions", json={"model": f"{p}-{arm}", "messages": MESSAGES}
                )
                out[f"{p}-{arm}"] = {
                    "status": r.status_code,
                    "x-litellm-rust": r.headers.get("x-litellm-rust"),
                    "x-litellm-fastpath": r.headers.get("x-litellm-fastpath"),
                }
                rust_ok = r.headers.get("x-litellm-rust") == "true"
                if r.status_code != 200 or rust_ok != (arm == "rust"):
                    log(f"WARNING verify {p}-{arm}: {out[f'{p}-{arm}']} {r.text[:300]}")
        return out

    def wait_idle(self, budget: float = 15.0) -> float:
        """Waits until the proxy burns < 5% of a core (a saturated step leaves a backlog)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < budget:
            pids = self.pids()
            c0 = cpu_seconds(pids)
            time.sleep(0.5)
            if cpu_seconds(pids) - c0 < 0.025:
                break
        return time.monotonic() - t0

    # measurements -----------------------------------------------------------------------------

    def arm_step(self, provider: str, arm: str, rate: float, duration: float) -> dict[str, Any]:
        body = json.dumps({"model": f"{provider}-{arm}", "messages": MESSAGES})
        pids = self.pids()
        m0 = cpu_seconds([self.mock.pid])
        c0, b0, w0 = cpu_seconds(pids), system_busy_seconds(), time.monotonic()
        res = run_loadgen(
            f"{self.proxy.url}/chat/completions",
            body,
            rate,
            duration,
            headers=("Authorization: Bearer sk-test-master",),
            expect=(RUST_HEADER,) if arm == "rust" else (),
            forbid=("x-litellm-rust",) if arm == "python" else (),
            timeout=self.args.timeout,
            watch_pids=pids,
        )
        wall = time.monotonic() - w0
        proxy_cpu = cpu_seconds(self.pids()) - c0
        busy = system_busy_seconds() - b0
        mock_cpu = cpu_seconds([self.mock.pid]) - m0
        lat = res.pop("latencies_ms")
        step = {
            "provider": provider,
            "arm": arm,
            "rate": rate,
            "workers": self.workers,
            **{k: res[k] for k in ("scheduled", "ok", "errors", "error_kinds", "first_error")},
            "achieved_rps": res["achieved_rps"],
            "error_rate": res["errors"] / max(1, res["scheduled"]),
            "lat": lat_stats(lat),
            "proxy_cpu_s": proxy_cpu,
            "proxy_cpu_s_per_1k": proxy_cpu / max(1, res["ok"]) * 1000,
            "proxy_cores": proxy_cpu / wall,
            "machine_busy_cores": busy / wall,
            # Everything else on the machine (builds, tests): > ~0.2 means a contended step.
            "foreign_cores": max(0.0, (busy - proxy_cpu - mock_cpu - res["gen_cpu_s"]) / wall),
            "proxy_peak_rss_mib": res["peak_rss_bytes"] / 2**20,
            "gen_cpu_util": res["gen_cpu_util"],
            "conns_peak": res["conns_peak"],
            "send_lag_p99_ms": res["send_lag_p99_ms"],
        }
        step["held"] = step["errors"] == 0 and step["lat"]["p99"] <= self.args.p99_limit
        if not step["held"]:
            self.wait_idle()
        return step

    def checked_step(self, provider: str, arm: str, rate: float, duration: float) -> dict[str, Any]:
        """arm_step, rerun (after waiting for quiet) when other processes used the CPU."""
        return self._checked(
            lambda: self.arm_step(provider, arm, rate, duration), f"{provider}-{arm}"
        )

    def checked_direct(self, provider: str, rate: float, duration: float) -> dict[str, Any]:
        return self._checked(
            lambda: self.direct_step(provider, rate, duration), f"direct {provider}"
        )

    def _checked(self, measure: Any, what: str) -> dict[str, Any]:
        for attempt in range(self.args.contended_retries + 1):
            step: dict[str, Any] = measure()
            step["attempt"] = attempt
            if step["foreign_cores"] <= self.args.foreign_limit:
                break
            if attempt == self.args.contended_retries:
                break
            log(
                f"contended step ({step['foreign_cores']:.2f} foreign cores): "
                f"{what} @ {step['rate']:g}; waiting up to 20 s for quiet"
            )
            if wait_quiet(20, threshold=self.args.foreign_limit) > self.args.foreign_limit:
                break  # still busy: keep this step (marked contended) rather than stall
        return step

    def direct_step(self, provider: str, rate: float, duration: float) -> dict[str, Any]:
        watched = [self.mock.pid, *self.pids()]  # the idle proxy's timers count as ours
        c0, b0, w0 = cpu_seconds(watched), system_busy_seconds(), time.monotonic()
        res = run_loadgen(
            self.mock.url + UPSTREAM_PATH[provider],
            upstream_body(provider),
            rate,
            duration,
            timeout=self.args.timeout,
        )
        wall = time.monotonic() - w0
        ours = cpu_seconds(watched) - c0 + res["gen_cpu_s"]
        lat = res.pop("latencies_ms")
        return {
            "provider": provider,
            "rate": rate,
            "ok": res["ok"],
            "errors": res["errors"],
            "lat": lat_stats(lat),
            "gen_cpu_util": res["gen_cpu_util"],
            "foreign_cores": max(0.0, (system_busy_seconds() - b0 - ours) / wall),
        }


def added(step: dict[str, Any], direct: dict[str, Any]) -> dict[str, float]:
    return {q: step["lat"][q] - direct["lat"][q] for q in ("p50", "p99", "p999")}


def held_verdict(steps: list[dict[str, Any]]) -> bool | None:
    """Majority of repetitions held; None on a tie (run one more)."""
    yes = sum(1 for s in steps if s["held"])
    no = len(steps) - yes
    if yes == no:
        return None
    return yes > no


def run_workers(gw: Gateway, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    log(f"starting proxy with {workers} worker(s)")
    info = gw.start_proxy(workers)
    log(f"proxy up in {info['startup_s']:.1f}s, pids {info['pids']}")
    try:
        # Warm every arm (imports, connection pools, caches) before measuring anything.
        for p in args.providers:
            for arm in ARMS:
                gw.arm_step(p, arm, 50, 1.0 if args.quick else 2.0)
        gw.wait_idle()
        steps: list[dict[str, Any]] = []
        directs: list[dict[str, Any]] = []
        active = {(p, arm) for p in args.providers for arm in ARMS}
        held_max: dict[tuple[str, str], float] = {k: 0.0 for k in active}
        first_fail: dict[tuple[str, str], float] = {}
        for rate in args.rates:
            if not active:
                break
            by_arm: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
            rep = 0
            pending = set(active)
            while pending:
                direct = {
                    p: gw.checked_direct(p, rate, args.direct_duration) for p in args.providers
                }
                for p in args.providers:
                    directs.append({**direct[p], "rep": rep, "workers": workers})
                for p in args.providers:
                    for arm in ARMS:
                        if (p, arm) not in pending:
                            continue
                        s = gw.checked_step(p, arm, rate, args.duration)
                        s["rep"] = rep
                        s["added"] = added(s, direct[p])
                        s["direct"] = direct[p]["lat"]
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
                    if len(runs) < args.reps:
                        continue
                    verdict = held_verdict(runs)
                    if verdict is None and len(runs) < args.reps + 1:
                        continue  # tie: one more repetition for this arm
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
                d = gw.checked_direct(p, rate, args.direct_duration)
                for arm in ARMS:
                    s = gw.checked_step(p, arm, rate, args.duration)
                    s["rep"] = rep
                    s["added"] = added(s, d)
                    s["direct"] = d["lat"]
                    half.append(s)
                    log(
                        f"w={workers} half-rate {rate:.1f} rep={rep} {p}-{arm}: "
                        f"added p50={fmt(s['added']['p50'], 2)} p99={fmt(s['added']['p99'], 2)}"
                    )
        profile = None
        if args.profile and workers == 1:
            profile = run_profiles(gw, args, held_max)
        hwm = hwm_bytes(gw.pids()) / 2**20
        return {
            "workers": workers,
            "proxy": info,
            "steps": steps,
            "directs": directs,
            "held_max": {f"{p}-{a}": v for (p, a), v in held_max.items()},
            "first_fail": {f"{p}-{a}": v for (p, a), v in first_fail.items()},
            "half": half,
            "profile": profile,
            "proxy_vmhwm_sum_mib": hwm,
        }
    finally:
        gw.stop_proxy()


# -- profiling ---------------------------------------------------------------------------------


def busiest_pid(gw: Gateway, seconds: float = 1.0) -> int:
    pids = gw.pids()
    before = {pid: cpu_seconds([pid]) for pid in pids}
    time.sleep(seconds)
    return max(pids, key=lambda pid: cpu_seconds([pid]) - before.get(pid, 0.0))


def run_profiles(
    gw: Gateway, args: argparse.Namespace, held_max: dict[tuple[str, str], float]
) -> dict[str, Any] | None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        log("py-spy not installed; skipping the profile (pip install py-spy)")
        return None
    out: dict[str, Any] = {}
    provider = args.providers[0]
    for arm in args.profile_arms:
        rate = max(25.0, 0.8 * held_max[(provider, arm)])
        body = json.dumps({"model": f"{provider}-{arm}", "messages": MESSAGES})
        secs = args.profile_seconds
        cmd = [
            sys.executable,
            str(BENCHES / "loadgen.py"),
            "--url",
            f"{gw.proxy.url}/chat/completions",
            "--body",
            body,
            "--rate",
            str(rate),
            "--duration",
            str(2 * secs + 6),
            "--timeout",
            "5",
            "--conns",
            "8",
            "--fifo",
            "--no-latencies",
            "-H",
            "Authorization: Bearer sk-test-master",
        ]
        load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            time.sleep(1.5)
            pid = busiest_pid(gw)
            svg = RESULTS / f"profile-{arm}.svg"
            raw = RESULTS / f"profile-{arm}.txt"
            log(f"py-spy: {arm} arm at {rate:.0f} req/s, worker pid {pid}, {secs:.0f}s x 2")
            for fmt_name, path in (("flamegraph", svg), ("raw", raw)):
                # --gil: only samples holding the GIL, i.e. where the worker's Python CPU goes
                # (the Rust runtime's threads never hold it). Blocking sampling, 100 Hz.
                subprocess.run(
                    [
                        py_spy,
                        "record",
                        "--pid",
                        str(pid),
                        "--duration",
                        str(int(secs)),
                        "--gil",
                        "--full-filenames",
                        "--nolineno",
                        "--format",
                        fmt_name,
                        "--output",
                        str(path),
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=secs + 60,
                )
            out[arm] = {
                "rate": rate,
                "pid": pid,
                "svg": svg.name,
                "raw": raw.name,
                **summarize_profile(raw),
            }
        except (subprocess.SubprocessError, OSError) as err:
            log(f"py-spy failed for the {arm} arm: {err!r}")
            out[arm] = {"error": repr(err)}
        finally:
            load.terminate()
            try:
                load.wait(10)
            except subprocess.TimeoutExpired:
                load.kill()
                load.wait()
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
        depth = 3 if parts[1] in _DEEP else 2
        return "/".join(parts[:depth]).removesuffix(".py")
    return parts[0].removesuffix(".py")


def _short(frame: str) -> str:
    """`fn (/venv/lib/python3.11/site-packages/pkg/mod.py)` -> `fn (pkg/mod.py)`."""
    for marker in ("site-packages/", "/lib/python3.11/", "/python/"):
        idx = frame.find(marker)
        if idx >= 0:
            start = frame.rfind("(", 0, idx) + 1
            return frame[:start] + frame[idx + len(marker) :]
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
        for f in set(frames):
            inclusive[f] += count
        for a in {_category(f) for f in frames}:
            area_incl[a] += count
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
        "top_inclusive_litellm": share(ours) if total else [],
        "top_self": share(own),
        "self_by_area": share(area_self),
        "inclusive_by_area": share(area_incl, top + 8),
    }


# -- reporting -------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    s = sorted(v for v in values if not math.isnan(v))
    if not s:
        return math.nan
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def summarize(run: dict[str, Any], providers: list[str]) -> dict[str, Any]:
    """Per provider: highest held rates, ratios, and the half-rate comparison."""
    out: dict[str, Any] = {}
    for p in providers:
        py_max = run["held_max"][f"{p}-python"]
        rs_max = run["held_max"][f"{p}-rust"]
        half = {
            arm: [s for s in run["half"] if s["provider"] == p and s["arm"] == arm] for arm in ARMS
        }
        half_added = {
            arm: {q: _median([s["added"][q] for s in half[arm]]) for q in ("p50", "p99", "p999")}
            for arm in ARMS
        }
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
            "half_cpu_per_1k": {
                arm: _median([s["proxy_cpu_s_per_1k"] for s in half[arm]]) for arm in ARMS
            },
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
        f"per rate (arms interleaved python/rust per provider), direct-to-mock baseline "
        f"{meta['direct_duration']} s per provider and repetition; p99 limit "
        f"{meta['p99_limit']} ms; request timeout {meta['timeout']} s; a step during which "
        f"other processes used > {meta['foreign_limit']} cores is rerun up to "
        f"{meta['contended_retries']} times. Proxy: "
        "`litellm --config` (real proxy, master key auth, no DB), "
        '`callbacks: ["litellm_fastpath.proxy.accelerator"]`, default logging.',
        "",
        "Load generator and mock capacity (separate processes, loopback):",
        "",
    ]
    cap = meta["capacity"]
    lines += [
        f"- mock + generator, closed loop 16 connections: "
        f"{cap['closed']['achieved_rps']:.0f} req/s (p99 {fmt(cap['closed']['p99_ms'], 2)} ms)",
        f"- generator open loop at {cap['open']['rate']:.0f} req/s against the mock: achieved "
        f"{cap['open']['achieved_rps']:.0f} req/s, p50 {fmt(cap['open']['p50_ms'], 2)} ms, "
        f"p99 {fmt(cap['open']['p99_ms'], 2)} ms, generator CPU "
        f"{cap['open']['gen_cpu_util'] * 100:.0f}% of one core, errors {cap['open']['errors']}",
        f"- highest generator CPU during any proxy step: {meta['gen_cpu_util_max'] * 100:.1f}% "
        "of one core",
        "",
    ]
    for run in data["runs"]:
        w = run["workers"]
        summ = run["summary"]
        all_steps = run["steps"] + run["half"]
        contended = sum(1 for s in all_steps if s["foreign_cores"] > meta["foreign_limit"])
        lines += [
            f"## {w} worker{'s' if w > 1 else ''}",
            "",
            f"Proxy startup {run['proxy']['startup_s']:.1f} s; sum of VmHWM over the proxy's "
            f"processes at the end: {run['proxy_vmhwm_sum_mib']:.0f} MiB; steps still "
            f"contended after reruns: {contended} of {len(all_steps)}.",
            "",
            "| provider | python max req/s | rust max req/s | rust/python | "
            "half rate | added p50 py ms | added p50 rust ms | rust/py p50 | "
            "added p99 py | added p99 rust | CPU s/1k py | CPU s/1k rust |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p, s in summ.items():
            capped = "≥" if s["rust_capped_by_rate_list"] else ""
            lines.append(
                f"| {p} | {s['python_max_rps']:.0f} | {capped}{s['rust_max_rps']:.0f} | "
                f"**{fmt(s['max_rate_ratio'], 2)}** | {s['half_rate']:.1f} | "
                f"{fmt(s['half_added']['python']['p50'], 2)} | "
                f"{fmt(s['half_added']['rust']['p50'], 2)} | "
                f"**{fmt(s['half_added_p50_ratio'], 2)}** | "
                f"{fmt(s['half_added']['python']['p99'], 2)} | "
                f"{fmt(s['half_added']['rust']['p99'], 2)} | "
                f"{fmt(s['half_cpu_per_1k']['python'], 1)} | "
                f"{fmt(s['half_cpu_per_1k']['rust'], 1)} |"
            )
        lines += [
            "",
            "Max req/s = highest offered rate held with p99 ≤ 50 ms and no errors (majority of "
            "repetitions); ≥ means the rate list ran out first. Added = proxied - direct-to-mock "
            "at the same percentile, same rate and repetition; half rate = 50% of the Python "
            "arm's max; values are medians over repetitions.",
            "",
            "<details><summary>All steps</summary>",
            "",
            "| rate | rep | arm | achieved | err | p50 | p99 | p99.9 | added p50 | added p99 | "
            "added p99.9 | CPU s/1k | proxy cores | foreign cores | peak RSS MiB |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in run["steps"] + run["half"]:
            err = f"{s['errors']}" + (f" ({s['first_error']})" if s["errors"] else "")
            lines.append(
                f"| {s['rate']:g} | {s['rep']} | {s['provider']}-{s['arm']} | "
                f"{s['achieved_rps']:.1f} | {err} | {fmt(s['lat']['p50'], 2)} | "
                f"{fmt(s['lat']['p99'], 2)} | {fmt(s['lat']['p999'], 2)} | "
                f"{fmt(s['added']['p50'], 2)} | {fmt(s['added']['p99'], 2)} | "
                f"{fmt(s['added']['p999'], 2)} | {s['proxy_cpu_s_per_1k']:.1f} | "
                f"{s['proxy_cores']:.2f} | {s['foreign_cores']:.2f} | "
                f"{s['proxy_peak_rss_mib']:.0f} |"
            )
        lines += ["", "</details>", ""]
        if run.get("profile"):
            lines += render_profile(run["profile"])
    lines += render_bars(data)
    return "\n".join(lines)


def render_profile(profile: dict[str, Any]) -> list[str]:
    lines = ["### py-spy profile of the busiest proxy worker (1 worker)", ""]
    for arm, prof in profile.items():
        if "error" in prof:
            lines += [f"- {arm}: failed ({prof['error']})", ""]
            continue
        lines += [
            f"**{arm} arm** at {prof['rate']:.0f} req/s, {prof['samples']} GIL-holding samples "
            f"(`{prof['svg']}`, raw stacks `{prof['raw']}`).",
            "",
            "| area (self time) | % | area (inclusive) | % |",
            "|---|---:|---|---:|",
        ]
        incl = [(a, v) for a, v in prof["inclusive_by_area"] if v < 95]
        for (a, v), (b, w) in zip(prof["self_by_area"], incl, strict=False):
            lines.append(f"| {a} | {v:.1f} | {b} | {w:.1f} |")
        lines += ["", "| top self frames | % |", "|---|---:|"]
        for f, v in prof["top_self"][:12]:
            lines.append(f"| `{f}` | {v:.1f} |")
        lines += ["", "| LiteLLM / fast-path frames, inclusive | % |", "|---|---:|"]
        for f, v in prof.get("top_inclusive_litellm", [])[:15]:
            lines.append(f"| `{f}` | {v:.1f} |")
        lines += [""]
    return lines


def render_bars(data: dict[str, Any]) -> list[str]:
    lines = ["## Bars (1 worker)", ""]
    one = next((r for r in data["runs"] if r["workers"] == 1), None)
    if one is None:
        return [*lines, "(no 1-worker run)", ""]
    for p, s in one["summary"].items():

        def verdict(v: bool | None) -> str:
            return "n/a (inconclusive)" if v is None else ("**met**" if v else "**NOT met**")

        lines.append(
            f"- {p}: added p50 at {s['half_rate']:.1f} req/s rust/python = "
            f"{fmt(s['half_added_p50_ratio'], 2)} (bar ≤ 0.7): {verdict(s['bar_p50'])}; "
            f"max rate at p99 ≤ 50 ms rust/python = {fmt(s['max_rate_ratio'], 2)} "
            f"(bar ≥ 1.3): {verdict(s['bar_rate'])}"
        )
    return [*lines, ""]


def plot(data: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed; no plot (pip install matplotlib)")
        return False
    runs = data["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(7 * len(runs), 5), squeeze=False)
    colors = {"openai": "tab:green", "anthropic": "tab:orange", "bedrock": "tab:blue"}
    for ax, run in zip(axes[0], runs, strict=False):
        for p in data["meta"]["providers"]:
            for arm in ARMS:
                pts = [s for s in run["steps"] if s["provider"] == p and s["arm"] == arm]
                if not pts:
                    continue
                style = "-" if arm == "rust" else "--"
                marker = "o" if arm == "rust" else "s"
                rates = sorted({s["rate"] for s in pts})
                med = [
                    _median([max(0.1, s["added"]["p99"]) for s in pts if s["rate"] == r])
                    for r in rates
                ]
                ax.plot(rates, med, style, color=colors.get(p), label=f"{p} {arm}")
                ax.scatter(
                    [s["rate"] for s in pts],
                    [max(0.1, s["added"]["p99"]) for s in pts],
                    marker=marker,
                    color=colors.get(p),
                    s=14,
                    alpha=0.6,
                )
        ax.axhline(data["meta"]["p99_limit"], color="red", lw=0.8, ls=":", label="50 ms")
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (req/s, open loop)")
        ax.set_ylabel("added p99 latency (ms, proxied - direct)")
        ax.set_title(f"LiteLLM proxy, {run['workers']} worker(s): python (dashed) vs rust")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# -- main --------------------------------------------------------------------------------------


def measure_capacity(mock: MockProvider, quick: bool) -> dict[str, Any]:
    body = upstream_body("openai")
    secs = 1.5 if quick else 3.0
    closed = run_loadgen(mock.url + "/chat/completions", body, 0, secs, closed=16)
    closed.pop("latencies_ms")
    rate = 2000.0
    opened = run_loadgen(mock.url + "/chat/completions", body, rate, secs)
    opened.pop("latencies_ms")
    return {"closed": closed, "open": opened}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        default=env_flag("BENCH_QUICK"),
        help="3 s steps, 1 worker, no profile (also BENCH_QUICK=1)",
    )
    p.add_argument("--workers", type=int, nargs="+", help="worker counts (default 1 / 1 2)")
    p.add_argument("--providers", nargs="+", choices=PROVIDERS, default=list(PROVIDERS))
    p.add_argument("--rates", type=float, nargs="+", default=list(DEFAULT_RATES))
    p.add_argument("--duration", type=float, help="seconds per step (default 3 / 6)")
    p.add_argument("--direct-duration", type=float, help="seconds per direct baseline step")
    p.add_argument("--reps", type=int, default=2, help="repetitions per rate (default 2)")
    p.add_argument("--p99-limit", type=float, default=P99_LIMIT_MS)
    p.add_argument("--timeout", type=float, default=5.0, help="per-request timeout (s)")
    prof = p.add_mutually_exclusive_group()
    prof.add_argument(
        "--profile",
        dest="profile",
        action="store_true",
        default=None,
        help="py-spy the 1-worker proxy under load (default in full mode)",
    )
    prof.add_argument("--no-profile", dest="profile", action="store_false")
    p.add_argument("--profile-arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--profile-seconds", type=float, default=10.0)
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=float(os.environ.get("BENCH_WAIT_QUIET", "0")),
        help="first wait up to N s for other processes to go idle (BENCH_WAIT_QUIET)",
    )
    p.add_argument(
        "--foreign-limit",
        type=float,
        default=0.35,
        help="a step during which other processes used more cores than this is contended",
    )
    p.add_argument(
        "--contended-retries",
        type=int,
        default=None,
        help="reruns of a contended step (default 1 quick / 2 full)",
    )
    p.add_argument("--no-write", action="store_true")
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
    info = machine()
    if args.wait_quiet > 0:
        log(f"waiting up to {args.wait_quiet:.0f}s for the machine to be idle")
        info["busy_cores_before"] = wait_quiet(args.wait_quiet)
    info["loadavg_start"] = loadavg()
    started = time.monotonic()
    runs = []
    with MockProvider() as mock:
        log(f"mock on {mock.url}; measuring generator/mock capacity")
        capacity = measure_capacity(mock, args.quick)
        gw = Gateway(args, mock)
        for w in args.workers:
            run = run_workers(gw, w, args)
            run["summary"] = summarize(run, args.providers)
            runs.append(run)
            if not args.no_write and w != args.workers[-1]:
                report(args, info, capacity, runs, started, final=False)
    return report(args, info, capacity, runs, started, final=True)


def report(
    args: argparse.Namespace,
    info: dict[str, Any],
    capacity: dict[str, Any],
    runs: list[dict[str, Any]],
    started: float,
    *,
    final: bool,
) -> int:
    """Writes (and on the final call prints) the report; earlier calls save partial results."""
    info["loadavg_end"] = loadavg()
    gen_max = max(
        (s["gen_cpu_util"] or 0.0 for r in runs for s in r["steps"] + r["half"]), default=0.0
    )
    meta = {
        "machine": info,
        "mode": "quick" if args.quick else "full",
        "duration": args.duration,
        "direct_duration": args.direct_duration,
        "reps": args.reps,
        "rates": args.rates,
        "providers": args.providers,
        "p99_limit": args.p99_limit,
        "timeout": args.timeout,
        "foreign_limit": args.foreign_limit,
        "contended_retries": args.contended_retries,
        "capacity": capacity,
        "gen_cpu_util_max": gen_max,
        "elapsed_s": time.monotonic() - started,
    }
    data = {"meta": meta, "runs": runs, "complete": final}
    markdown = render(data)
    if not final:
        markdown = "> Partial results: the run is still going.\n\n" + markdown
    else:
        print(markdown)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        write_results("gateway", markdown, data)
        if plot(data, RESULTS / "gateway.png"):
            with (RESULTS / "gateway.md").open("a") as fh:
                fh.write("\n![added p99 vs offered rate](gateway.png)\n")
        log(f"wrote {RESULTS}/gateway.md, gateway.json, gateway.png")
    if final:
        log(f"done in {meta['elapsed_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
