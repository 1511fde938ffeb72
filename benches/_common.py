"""Shared bench helpers: /proc accounting and sampling, stats, load generator runs, the proxy under
test, flags and reports. Stdlib only at import: media workers import only what they measure."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parent
ROOT = BENCHES.parent
RESULTS = BENCHES / "results"
MIB = 2**20
ARMS = ("python", "rust")
MESSAGES = [{"role": "user", "content": "Say hello."}]
AUTH = "Authorization: Bearer sk-test-master"  # tests.harness.MASTER_KEY
RUST_HEADER = "x-litellm-rust: true"

# Vector length the mock answers embeddings with in the benches (OpenAI's text-embedding-3-small).
EMBEDDING_DIMS = 1536


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


def workloads() -> dict[str, Workload]:
    """Chat per provider (named after it), `/v1/messages` (`messages`) and embeddings
    (`embed-*`, one input, 1,536 dims)."""
    from litellm_fastpath import mock_provider as mock

    def chat(provider: str) -> Callable[[str], dict[str, Any]]:
        return lambda url: mock.deployment_kwargs(provider, url)

    def embedding(kind: str) -> Callable[[str], dict[str, Any]]:
        return lambda url: mock.embedding_deployment_kwargs(kind, url)

    text = "Say hello."
    chat_body = {"messages": MESSAGES}
    embed_body = {"input": [text]}
    return {
        "openai": Workload(
            "openai",
            "/chat/completions",
            chat_body,
            chat("openai"),
            "/chat/completions",
            {"model": "gpt-4o-mini", "messages": MESSAGES},
        ),
        "anthropic": Workload(
            "anthropic",
            "/chat/completions",
            chat_body,
            chat("anthropic"),
            "/v1/messages",
            {"model": "claude-sonnet-4-5", "messages": MESSAGES, "max_tokens": 64000},
        ),
        "bedrock": Workload(
            "bedrock",
            "/chat/completions",
            chat_body,
            chat("bedrock"),
            f"/model/{mock.BEDROCK_MODEL_ID}/converse",
            {"messages": [{"role": "user", "content": [{"text": text}]}]},
        ),
        # The Anthropic Messages API (`/v1/messages`) on the same Anthropic deployment.
        "messages": Workload(
            "messages",
            "/v1/messages",
            {"messages": MESSAGES, "max_tokens": 64},
            chat("anthropic"),
            "/v1/messages",
            {"model": "claude-sonnet-4-5", "messages": MESSAGES, "max_tokens": 64},
        ),
        "embed-openai": Workload(
            "embed-openai",
            "/embeddings",
            embed_body,
            embedding("openai"),
            "/v1/embeddings",
            {"model": "text-embedding-3-small", "input": [text]},
        ),
        "embed-cohere": Workload(
            "embed-cohere",
            "/embeddings",
            embed_body,
            embedding("cohere"),
            "/model/cohere.embed-english-v3/invoke",
            {"input_type": "search_document", "texts": [text]},
        ),
        "embed-titan": Workload(
            "embed-titan",
            "/embeddings",
            embed_body,
            embedding("titan-v1"),
            "/model/amazon.titan-embed-text-v1/invoke",
            {"inputText": text},
        ),
    }


WORKLOAD_NAMES = (
    "openai",
    "anthropic",
    "bedrock",
    "messages",
    "embed-openai",
    "embed-cohere",
    "embed-titan",
)


# Every litellm import must see this, or it fetches the cost map from the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- /proc accounting ----------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


def process_tree(root: int) -> list[int]:
    from tests.harness import process_tree as tree  # lazily: it imports httpx and yaml

    return tree(root)


def proc_status(pids: Iterable[int]) -> dict[str, int]:
    """Sums over `pids` of VmRSS, VmHWM, RssAnon (bytes) and Threads (/proc/<pid>/status)."""
    out = dict.fromkeys(("VmRSS", "VmHWM", "RssAnon", "Threads"), 0)
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # exited meanwhile
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in out:
                out[key] += int(value.split()[0]) * (1 if key == "Threads" else 1024)
    return out


def cpu_seconds(pids: Iterable[int]) -> float:
    """utime+stime of the given processes (children that already exited are not included)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except OSError:
            pass  # exited meanwhile
    return total / _TICKS


def reset_hwm(pids: Iterable[int]) -> bool:
    """Resets each process's RSS high-water mark (VmHWM, ru_maxrss) to its current RSS."""
    ok = True
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


def system_busy_seconds() -> float:
    """CPU seconds all processes on the machine have spent busy (from /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / _TICKS


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


class Sampler(threading.Thread):
    """Samples a process (with `tree`, also its descendants, re-listed about every second) on a
    fixed grid until stopped: t, RSS, RssAnon, threads, processes and CPU seconds."""

    def __init__(self, root: int, interval: float, tree: bool = True, max_samples: int = 10**6):
        super().__init__(daemon=True)
        self.root, self.interval, self.tree, self.max_samples = root, interval, tree, max_samples
        self.relist_every = max(1, round(1 / interval))
        self.pids = [root]
        self.samples: list[dict[str, float]] = []
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def sample(self, relist: bool = True) -> dict[str, float]:
        if self.tree and relist:
            self.pids = process_tree(self.root)
        st = proc_status(self.pids)
        s = {
            "t": round(time.monotonic() - self.t0, 3),
            "rss_mib": st["VmRSS"] / MIB,
            "anon_mib": st["RssAnon"] / MIB,
            "threads": st["Threads"],
            "procs": len(self.pids),
            "cpu_s": cpu_seconds(self.pids),
        }
        self.samples.append(s)
        return s

    def run(self) -> None:
        for k in range(self.max_samples):
            self.sample(relist=k % self.relist_every == 0)
            if self.stop_event.wait(max(0.0, self.t0 + (k + 1) * self.interval - time.monotonic())):
                break

    def stop(self, final_sample: bool = False) -> None:
        self.stop_event.set()
        self.join(10)
        if final_sample:
            self.sample()


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


def loadgen_cmd(
    url: str, body: str, rate: float, secs: float, *flags: str, warm: bool = True
) -> list[str]:
    """`benches/loadgen.py` at `rate` for `secs` with a FIFO pool, after (`warm`) 20 unrecorded
    requests on 8 connections; `flags` add to or override these (`--closed 16`, `--timeout 9`)."""
    cmd = [sys.executable, "-m", "benches.loadgen", "--url", url, "--body", body, "--fifo"]
    cmd += ["--rate", str(rate), "--duration", str(secs), "--timeout", "5", "--max-conns", "512"]
    return cmd + (["--conns", "8", "--warmup", "20"] if warm else []) + list(flags)


def run_loadgen(
    url: str,
    body: str,
    rate: float,
    secs: float,
    *flags: str,
    warm: bool = True,
    watch: Sequence[int] = (),
) -> dict[str, Any]:
    """Runs `loadgen_cmd(...)` and returns its JSON, plus the peak RSS of the `watch` processes
    sampled every 0.2 s meanwhile."""
    peak = 0
    with tempfile.TemporaryFile() as out:
        cmd = loadgen_cmd(url, body, rate, secs, *flags, warm=warm)
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


class BenchProxy:
    """The real LiteLLM proxy (`tests.harness.ProxyProcess`) with `<provider>-python` and
    `<provider>-rust` (`rust: true`) models on the mock provider, and one load step against it."""

    def __init__(self, args: argparse.Namespace, mock: Any) -> None:
        self.args, self.mock = args, mock
        self.proxy: Any = None
        self.workers = 0

    def start(self, workers: int) -> dict[str, Any]:
        from tests.harness import ProxyProcess

        url, all_workloads = self.mock.url, workloads()
        model_list = [
            {"model_name": f"{p}-{arm}", "litellm_params": {**all_workloads[p].params(url), **rust}}
            for p in self.args.providers
            for arm, rust in (("python", {}), ("rust", {"rust": True}))
        ]
        settings = {"callbacks": ["litellm_fastpath.proxy.accelerator"]}
        self.proxy = ProxyProcess(model_list, settings, workers=workers, startup_timeout=120)
        self.proxy.__enter__()
        self.workers = workers
        time.sleep(1.0 if workers == 1 else 3.0)  # let every worker finish its startup
        info = {"workers": workers, "startup_s": self.proxy.startup_s, "pids": self.pids()}
        info["verify"] = self.verify()
        return info

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.__exit__(None, None, None)
            self.proxy = None

    def pids(self) -> list[int]:
        return process_tree(self.proxy.pid)

    def verify(self) -> dict[str, Any]:
        """One request per model: status and whether the Rust headers came back."""
        out, all_workloads = {}, workloads()
        for p, arm in ((p, arm) for p in self.args.providers for arm in ARMS):
            model, work = f"{p}-{arm}", all_workloads[p]
            r = self.proxy.post(work.route, json={"model": model, **work.body})
            out[model] = {"status": r.status_code}
            out[model] |= {h: r.headers.get(h) for h in ("x-litellm-rust", "x-litellm-fastpath")}
            if r.status_code != 200 or (r.headers.get("x-litellm-rust") == "true") != (
                model.endswith("-rust")
            ):
                log(f"WARNING verify {model}: {out[model]} {r.text[:300]}")
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

    def step(
        self, provider: str, arm: str, rate: float, duration: float, warm: bool = True
    ) -> dict[str, Any]:
        """Open-loop load on one arm's model: latency, errors, proxy CPU and peak RSS, and the
        cores used by everything else; the raw latencies are under `latencies_ms`."""
        work = workloads()[provider]
        body = json.dumps({"model": f"{provider}-{arm}", **work.body})
        pids = self.pids()
        m0, c0 = cpu_seconds([self.mock.pid]), cpu_seconds(pids)
        b0, w0 = system_busy_seconds(), time.monotonic()
        check = (
            ("--expect-header", RUST_HEADER)
            if arm == "rust"
            else ("--forbid-header", "x-litellm-rust")
        )
        flags = ("-H", AUTH, *check, "--timeout", str(self.args.timeout))
        # Without warm-up no request goes unrecorded (soak.py counts every one).
        url = f"{self.proxy.url}{work.route}"
        res = run_loadgen(url, body, rate, duration, *flags, warm=warm, watch=pids)
        wall = time.monotonic() - w0
        proxy_cpu = cpu_seconds(self.pids()) - c0
        busy = system_busy_seconds() - b0
        mock_cpu = cpu_seconds([self.mock.pid]) - m0
        keep = ("scheduled", "ok", "errors", "error_kinds", "first_error", "achieved_rps")
        keep += ("sched_s", "window_s", "gen_cpu_util", "conns_peak", "send_lag_p99_ms")
        return {
            "provider": provider,
            "arm": arm,
            "rate": rate,
            "workers": self.workers,
            **{k: res[k] for k in keep},
            "wall_s": wall,
            "error_rate": res["errors"] / max(1, res["scheduled"]),
            "lat": lat_stats(res["latencies_ms"]),
            "proxy_cpu_s": proxy_cpu,
            "proxy_cpu_s_per_1k": proxy_cpu / max(1, res["ok"]) * 1000,
            "proxy_cores": proxy_cpu / wall,
            "machine_busy_cores": busy / wall,
            # Everything else on the machine (builds, tests): > ~0.2 means a contended step.
            "foreign_cores": max(0.0, (busy - proxy_cpu - mock_cpu - res["gen_cpu_s"]) / wall),
            "proxy_peak_rss_mib": res["peak_rss_bytes"] / MIB,
            "latencies_ms": res["latencies_ms"],
        }


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def arg_parser(doc: str, quick: str, wait: str = "first") -> argparse.ArgumentParser:
    """A parser with the flags every bench has: --quick, --wait-quiet, --no-write."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--quick", action="store_true", default=env_flag("BENCH_QUICK"), help=quick)
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=float(os.environ.get("BENCH_WAIT_QUIET") or 0),
        metavar="S",
        help=f"{wait}, wait up to S s for other processes to go idle (BENCH_WAIT_QUIET)",
    )
    p.add_argument("--no-write", action="store_true", help="print only; keep results/ as is")
    return p


def machine(wait_quiet_s: float = 0.0) -> dict[str, Any]:
    """The machine and versions; first waits up to `wait_quiet_s` for an idle machine."""
    info: dict[str, Any] = {}
    if wait_quiet_s > 0:
        log(f"waiting up to {wait_quiet_s:.0f}s for the machine to be idle")
        info["busy_cores_before"] = wait_quiet(wait_quiet_s)
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    info |= {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "loadavg_start": loadavg(),
    }
    from importlib.metadata import PackageNotFoundError, version

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


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


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


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch_json(url: str, post: bool = False) -> Any:
    """GET (or an empty POST) on loopback, never through an outer HTTP proxy; the JSON answer."""
    request = urllib.request.Request(url, data=b"" if post else None)
    with _NO_PROXY.open(request, timeout=10) as response:
        return json.loads(response.read())
