"""Shared bits of the benchmarks: the mock provider subprocess, /proc accounting, stats, output."""

from __future__ import annotations

import json
import math
import os
import platform
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

BENCHES = Path(__file__).resolve().parent
ROOT = BENCHES.parent
RESULTS = BENCHES / "results"

# `tests.harness` / `tests.conftest` live at the repo root; make them importable however the
# bench is started (`python benches/x.py` puts benches/ first on sys.path, not the root).
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Every litellm import must see this, or it fetches the cost map from the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")

PROVIDERS = ("openai", "anthropic", "bedrock")
HOST = "127.0.0.1"


class ChildServer:
    """A benchmark server script in its own process and session (killed as a group); the script
    prints `READY <port>` once it listens."""

    name = "server"

    def __init__(self, script: Path, args: Sequence[str], startup_timeout: float = 15.0) -> None:
        self.script = script
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Self:
        self.proc = subprocess.Popen(
            [sys.executable, str(self.script), *self.args],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + self.startup_timeout
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        if not line.startswith(b"READY "):
            self.stop()
            raise RuntimeError(f"{self.name} did not start (got {line!r})")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class MockProvider(ChildServer):
    """`benches/mock_provider.py`: fixed OpenAI, Anthropic and Bedrock answers."""

    name = "mock provider"

    def __init__(self, port: int = 0, startup_timeout: float = 15.0) -> None:
        super().__init__(BENCHES / "mock_provider.py", ["--port", str(port)], startup_timeout)


def deployment_kwargs(provider: str, upstream_url: str) -> dict[str, Any]:
    """litellm_params per provider, exactly as the test suite's (`tests/conftest.py`)."""
    from tests.conftest import deployment_kwargs as from_tests

    return from_tests(provider, upstream_url)


# -- /proc accounting ----------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def process_tree(root: int) -> list[int]:
    from tests.harness import process_tree as tree

    return tree(root)


def cpu_seconds(pids: Iterable[int]) -> float:
    """utime+stime of the given processes (children that already exited are not included)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / _TICKS


def rss_bytes(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass
    return total


def hwm_bytes(pids: Iterable[int]) -> int:
    """Sum of VmHWM (each process's own peak RSS since it started)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


# -- stats ---------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sequence; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    if not s:
        return math.nan
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def fmt(value: float, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


# -- environment -----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    try:
        from importlib.metadata import version

        info["litellm"] = version("litellm")
        info["litellm_fastpath"] = version("litellm-fastpath")
    except Exception:
        pass
    return info


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"Machine: nproc={info['nproc']} (affinity {info['affinity']}), CPU `{info['cpu']}`, "
        f"Python {info['python']}, litellm {info.get('litellm', '?')}, "
        f"litellm-fastpath {info.get('litellm_fastpath', '?')}, {info['date']}"
    )


def write_results(name: str, markdown: str, data: dict[str, Any]) -> tuple[Path, Path]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    md_path = RESULTS / f"{name}.md"
    json_path = RESULTS / f"{name}.json"
    md_path.write_text(markdown)
    json_path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    return md_path, json_path


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
                print(
                    f"warning: machine still busy ({busy:.2f} cores) after {max_wait:.0f}s",
                    file=sys.stderr,
                )
            return busy


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
