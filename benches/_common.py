"""Shared bench helpers: flags, machine info and reports, stats, `loadgen.py` runs, the proxies
under test and one load step against one of their models. Stdlib only at import: media workers
import only what they measure."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from devtools.procfs import MIB, cpu_seconds, proc_status, process_tree, system_busy_seconds

BENCHES = Path(__file__).resolve().parent
ROOT = BENCHES.parent
RESULTS = BENCHES / "results"
ARMS = ("python", "rust")
MESSAGES = [{"role": "user", "content": "Say hello."}]
AUTH = "Authorization: Bearer sk-test-master"  # devtools.processes.MASTER_KEY
# What loadgen.py requires of each arm's answers: LiteLLM's own native routes (`LITELLM_RUST=1`)
# tag theirs `x-litellm-rust: true` too; the fast path's also carry `x-litellm-fastpath`.
CHECKS = {
    "python": ("--forbid-header", "x-litellm-rust"),
    "native": ("--expect-header", "x-litellm-rust: true", "--forbid-header", "x-litellm-fastpath"),
    "rust": ("--expect-header", "x-litellm-rust: true", "--expect-header", "x-litellm-fastpath:"),
}
WARMUP = 20  # unrecorded requests before each load step (`run_loadgen`)
# The mock provider the gateway and in-process benches use: embeddings of 1,536 dimensions
# (OpenAI's text-embedding-3-small).
MOCK_ARGS = ("--embedding-dims", "1536")

# Every litellm import must see this, or it fetches the cost map from the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- flags, machine, reports -----------------------------------------------------------------


def arg_parser(doc: str, quick: str, wait: str = "first") -> argparse.ArgumentParser:
    """A parser with the flags every bench has: --quick, --wait-quiet, --no-write."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    env_quick = os.environ.get("BENCH_QUICK", "").strip().lower() in ("1", "true", "yes", "on")
    p.add_argument("--quick", action="store_true", default=env_quick, help=quick)
    wait_s = float(os.environ.get("BENCH_WAIT_QUIET") or 0)
    wait = f"{wait}, wait up to S s for other processes to go idle (BENCH_WAIT_QUIET)"
    p.add_argument("--wait-quiet", type=float, default=wait_s, metavar="S", help=wait)
    p.add_argument("--no-write", action="store_true", help="print only; keep results/ as is")
    return p


def wait_quiet(max_wait: float, threshold: float = 0.3, window: float = 2.0) -> float:
    """Waits (at most `max_wait` s) until the machine is idle: busy < `threshold` cores over
    `window` s. Returns the busy cores of the last window (other builds/tests skew results)."""
    deadline = time.monotonic() + max_wait
    while True:
        b0, t0 = system_busy_seconds(), time.monotonic()
        time.sleep(window)
        busy = (system_busy_seconds() - b0) / (time.monotonic() - t0)
        if busy < threshold or time.monotonic() >= deadline:
            if busy >= threshold:
                log(f"warning: machine still busy ({busy:.2f} cores) after {max_wait:.0f}s")
            return busy


def machine(wait_quiet_s: float = 0.0) -> dict[str, Any]:
    """The machine and versions; first waits up to `wait_quiet_s` for an idle machine."""
    from importlib.metadata import PackageNotFoundError, version

    info: dict[str, Any] = {}
    if wait_quiet_s > 0:
        log(f"waiting up to {wait_quiet_s:.0f}s for the machine to be idle")
        info["busy_cores_before"] = wait_quiet(wait_quiet_s)
    models = [x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("model n")]
    info |= {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "cpu": models[0].split(":", 1)[1].strip() if models else "unknown",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    for name in ("litellm", "litellm-fastpath"):
        try:
            info[name.replace("-", "_")] = version(name)
        except PackageNotFoundError:
            pass
    return info


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"Machine: nproc={info['nproc']} (affinity {info['affinity']}), CPU `{info['cpu']}`, "
        f"Python {info['python']}, litellm {info.get('litellm', '?')}, "
        f"litellm-fastpath {info.get('litellm_fastpath', '?')}, {info['date']}"
    )


def table(head: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    """A markdown table: one `align` letter per column (l, r, c), by default the first column
    left and the others right."""
    align = align or "l" + "r" * (len(head) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def cells(row: dict[str, Any], *specs: str) -> list[str]:
    """Table cells of `row`: one `key:format` spec each (`wall_s:.2f`; `key` as is)."""
    return [format(row[key], f) for key, _, f in (spec.partition(":") for spec in specs)]


def write_results(
    name: str, markdown: str, data: Any, indent: int = 2, plot: Any = None, alt: str = ""
) -> None:
    """results/<name>.md and .json, and <name>.png of the figure `plot(pyplot)` draws (linked
    from the .md when `alt` is given) if matplotlib is installed."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    png = RESULTS / f"{name}.png"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
        log("matplotlib not installed; no plot (pip install matplotlib)")
    if plot is not None and plt is not None:
        fig = plot(plt)
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        plt.close(fig)
        markdown += f"\n![{alt}]({png.name})\n" if alt else ""
    (RESULTS / f"{name}.md").write_text(markdown)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=indent, default=str) + "\n")
    log(f"wrote {RESULTS / name}.md, .json" + (", .png" if plot and plt else ""))


def finish(args: Any, name: str, markdown: str, data: Any, **results: Any) -> None:
    """Prints the report and, unless `--no-write`, writes it (`write_results`' keywords)."""
    print(markdown)
    if not args.no_write:
        write_results(name, markdown, data, **results)


def failed(problems: Sequence[str]) -> int:
    """The exit status of a bench that verifies what it measures: 1 (the problems on stderr)
    if anything failed verification."""
    if problems:
        print(f"FAILED: {len(problems)} problem(s)", file=sys.stderr)
        print("\n".join(f"  {p}" for p in problems[:20]), file=sys.stderr)
    return 1 if problems else 0


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch_json(url: str, post: bool = False) -> Any:
    """GET (or an empty POST) on loopback, never through an outer HTTP proxy; the JSON answer."""
    request = urllib.request.Request(url, data=b"" if post else None)
    with _NO_PROXY.open(request, timeout=10) as response:
        return json.loads(response.read())


# -- stats -----------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sequence; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def median(values: Iterable[float]) -> float:
    """Median of the values that are not NaN; NaN when there are none."""
    s = sorted(v for v in values if not math.isnan(v))
    if not s:
        return math.nan
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def lat_stats(latencies: list[float]) -> dict[str, float]:
    s = sorted(latencies)
    return {"p50": percentile(s, 50), "p99": percentile(s, 99), "p999": percentile(s, 99.9)}


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def interleaved(runs: dict[Any, Callable[[], dict[str, Any]]], reps: int) -> dict[Any, list]:
    """Each run once per repetition, in order, arms interleaved: its results per key."""
    out: dict[Any, list[dict[str, Any]]] = {key: [] for key in runs}
    for rep in range(reps):
        for key, run in runs.items():
            out[key].append(run())
            log(f"  rep {rep} {key}: p50 {out[key][-1]['lat']['p50']:.2f} ms")
    return out


def added(steps: dict[Any, list[dict[str, Any]]], direct: Any, arms: Iterable[Any]) -> dict:
    """Median p50 and p99 of the direct steps, and each arm's medians over them."""
    base = {q: median(s["lat"][q] for s in steps[direct]) for q in ("p50", "p99")}
    return {
        "direct": base,
        "added": {
            a: {q: median(s["lat"][q] for s in steps[a]) - base[q] for q in base} for a in arms
        },
    }


# -- load ------------------------------------------------------------------------------------


def run_loadgen(
    url: str, body: str, rate: float, secs: float, *flags: str, watch: Sequence[int] = ()
) -> dict[str, Any]:
    """`benches/loadgen.py` at `rate` for `secs`, after WARMUP unrecorded requests on 8
    connections (`flags` add to or override its options): its JSON, plus the peak RSS of the
    `watch` processes sampled every 0.2 s meanwhile."""
    peak = 0
    with tempfile.TemporaryFile() as out:
        cmd = [sys.executable, "-m", "benches.loadgen", "--url", url, "--body", body]
        cmd += ["--rate", str(rate), "--duration", str(secs), "--timeout", "5"]
        cmd += ["--conns", "8", "--warmup", str(WARMUP), *flags]
        proc = subprocess.Popen(cmd, stdout=out, stdin=subprocess.DEVNULL, cwd=ROOT)
        deadline = time.monotonic() + secs + 120
        while proc.poll() is None and time.monotonic() < deadline:
            peak = max(peak, proc_status(watch)["VmRSS"])
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise RuntimeError("load generator overran its time budget")
        out.seek(0)
        text = out.read()
    if proc.returncode != 0 or not text:
        raise RuntimeError(f"load generator failed with {proc.returncode}")
    return {**json.loads(text), "peak_rss_bytes": peak}


def load_step(
    proxy: Any,
    route: str,
    body: dict[str, Any],
    checks: Sequence[str],
    rate: float,
    secs: float,
    *,
    headers: Sequence[str] = ("-H", AUTH),
    mock_pid: int | None = None,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """Open-loop load on one model of `proxy`: latency, errors, proxy CPU and peak RSS, and the
    cores used by everything else (with `mock_pid`, the mock's are not); the raw latencies are
    under `latencies_ms`."""
    pids = process_tree(proxy.pid)
    mock = [mock_pid] if mock_pid else []
    m0, c0 = cpu_seconds(mock), cpu_seconds(pids)
    b0, w0 = system_busy_seconds(), time.monotonic()
    flags = (*headers, *checks, "--timeout", str(timeout))
    res = run_loadgen(f"{proxy.url}{route}", json.dumps(body), rate, secs, *flags, watch=pids)
    wall = time.monotonic() - w0
    proxy_cpu = cpu_seconds(process_tree(proxy.pid)) - c0
    busy = system_busy_seconds() - b0
    others = proxy_cpu + cpu_seconds(mock) - m0 + res["gen_cpu_s"]
    keep = ("scheduled", "ok", "errors", "error_kinds", "first_error", "achieved_rps")
    keep += ("sched_s", "window_s", "gen_cpu_util", "conns_peak", "send_lag_p99_ms")
    return {
        "rate": rate,
        **{k: res[k] for k in keep},
        "wall_s": wall,
        "error_rate": res["errors"] / max(1, res["scheduled"]),
        "lat": lat_stats(res["latencies_ms"]),
        "proxy_cpu_s": proxy_cpu,
        "proxy_cpu_s_per_1k": proxy_cpu / max(1, res["ok"]) * 1000,
        "proxy_cores": proxy_cpu / wall,
        "gen_cores": res["gen_cpu_s"] / wall,
        "mock_cores": (cpu_seconds(mock) - m0) / wall if mock else None,
        "machine_busy_cores": busy / wall,
        # Everything else on the machine (builds, tests): > ~0.2 means a contended step.
        "foreign_cores": max(0.0, (busy - others) / wall),
        "proxy_peak_rss_mib": res["peak_rss_bytes"] / MIB,
        "latencies_ms": res["latencies_ms"],
    }


def direct_step(
    url: str, body: dict[str, Any], rate: float, secs: float, *flags: str, watch: Sequence[int] = ()
) -> dict[str, Any]:
    """The same load straight at the mock: the baseline a proxy's latency is compared with, and
    the cores every other process used meanwhile (the `watch`ed ones count as ours)."""
    c0, b0, w0 = cpu_seconds(watch), system_busy_seconds(), time.monotonic()
    res = run_loadgen(url, json.dumps(body), rate, secs, *flags)
    wall, ours = time.monotonic() - w0, cpu_seconds(watch) - c0 + res["gen_cpu_s"]
    step = {"rate": rate, **{k: res[k] for k in ("ok", "errors", "gen_cpu_util")}}
    step["foreign_cores"] = max(0.0, (system_busy_seconds() - b0 - ours) / wall)
    return step | {"lat": lat_stats(res["latencies_ms"])}


# -- the proxies under test ------------------------------------------------------------------


def start_proxy(
    models: list[dict[str, Any]],
    *,
    lane: bool = False,
    workers: int = 1,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
    settings_extra: dict[str, Any] | None = None,
    callbacks: Sequence[str] = (),
    **kwargs: Any,
) -> Any:
    """The real proxy with the accelerator (and with `log_path`, `devtools.proxy_logger`'s
    recorder), started; `lane` turns the fast lane on; `settings_extra`: more `litellm_settings`;
    `callbacks`: more callbacks. The caller stops it."""
    from devtools.processes import ProxyProcess
    from devtools.proxy_logger import RECORDER, recorder_env

    settings: dict[str, Any] = {"callbacks": ["litellm_fastpath.proxy.accelerator"]}
    if log_path is not None:
        settings["callbacks"].append(RECORDER)
        env = {**recorder_env(log_path), **(env or {})}
    settings["callbacks"].extend(callbacks)
    if lane:
        settings["fastpath_lane"] = True
    settings.update(settings_extra or {})
    proxy = ProxyProcess(
        models, settings, workers=workers, extra_env=env, startup_timeout=120, **kwargs
    )
    proxy.__enter__()
    time.sleep(1.0 if workers == 1 else 3.0)  # let every worker finish its startup
    return proxy


@dataclass(frozen=True)
class Workload:
    """One kind of request the gateway benches send: the proxy route and body (each arm adds its
    model), the deployment, and the same request sent straight to the mock (the baseline)."""

    name: str
    route: str
    body: dict[str, Any]
    params: Callable[[str], dict[str, Any]]
    upstream_path: str
    upstream_body: dict[str, Any]


WORKLOAD_NAMES = ("openai", "anthropic", "bedrock", "messages")
WORKLOAD_NAMES += ("embed-openai", "embed-cohere", "embed-titan")


def workloads() -> dict[str, Workload]:
    """Chat per provider (named after it), `/v1/messages` (`messages`) and embeddings
    (`embed-*`, one input, 1,536 dims)."""
    from devtools.deployments import BEDROCK_MODEL_ID, deployment_kwargs
    from devtools.deployments import embedding_deployment_kwargs as embedding

    chat, embed = partial(partial, deployment_kwargs), partial(partial, embedding)
    text, chats, msgs, embeds = "Say hello.", "/chat/completions", "/v1/messages", "/embeddings"
    asked, inputs, short = {"messages": MESSAGES}, {"input": [text]}, {"max_tokens": 64}
    claude = {"model": "claude-sonnet-4-5", **asked}
    ids = {"cohere": "cohere.embed-english-v3", "titan": "amazon.titan-embed-text-v1"}

    def invoke(kind: str) -> str:
        return f"/model/{ids[kind]}/invoke"

    converse = {"messages": [{"role": "user", "content": [{"text": text}]}]}
    cohere = {"input_type": "search_document", "texts": [text]}
    openai_embed = {"model": "text-embedding-3-small", **inputs}
    rows = [  # name, route, body, deployment, the same request to the mock: path, body
        ("openai", chats, asked, chat("openai"), chats, {"model": "gpt-4o-mini", **asked}),
        ("anthropic", chats, asked, chat("anthropic"), msgs, {**claude, "max_tokens": 64000}),
        ("bedrock", chats, asked, chat("bedrock"), f"/model/{BEDROCK_MODEL_ID}/converse", converse),
        # The Anthropic Messages API (`/v1/messages`) on the same Anthropic deployment.
        ("messages", msgs, asked | short, chat("anthropic"), msgs, claude | short),
        ("embed-openai", embeds, inputs, embed("openai"), "/v1/embeddings", openai_embed),
        ("embed-cohere", embeds, inputs, embed("cohere"), invoke("cohere"), cohere),
        ("embed-titan", embeds, inputs, embed("titan-v1"), invoke("titan"), {"inputText": text}),
    ]
    return {row[0]: Workload(*row) for row in rows}


class BenchProxy:
    """The real LiteLLM proxy with `<workload>-python` and `<workload>-rust` (`rust: true`)
    models on the mock provider, and one load step against one of them."""

    def __init__(self, args: argparse.Namespace, mock: Any) -> None:
        self.args, self.mock = args, mock
        self.proxy: Any = None
        self.workers = 0

    def start(self, workers: int) -> dict[str, Any]:
        url, all_workloads = self.mock.url, workloads()
        model_list = [
            {"model_name": f"{p}-{arm}", "litellm_params": {**all_workloads[p].params(url), **rust}}
            for p in self.args.providers
            for arm, rust in (("python", {}), ("rust", {"rust": True}))
        ]
        self.proxy, self.workers = start_proxy(model_list, workers=workers), workers
        return {"workers": workers, "startup_s": self.proxy.startup_s, "pids": self.pids()}

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.__exit__(None, None, None)
            self.proxy = None

    def pids(self) -> list[int]:
        return process_tree(self.proxy.pid)

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

    def step(self, provider: str, arm: str, rate: float, duration: float) -> dict[str, Any]:
        """`load_step` on one arm's model of one workload."""
        work = workloads()[provider]
        body = {"model": f"{provider}-{arm}", **work.body}
        step = load_step(
            self.proxy,
            work.route,
            body,
            CHECKS[arm],
            rate,
            duration,
            mock_pid=self.mock.pid,
            timeout=self.args.timeout,
        )
        return {"provider": provider, "arm": arm, "workers": self.workers, **step}
