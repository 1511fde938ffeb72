"""Readers of Linux `/proc`: process trees and states, memory, CPU time, and a sampler thread.

Stdlib only: the media bench's worker processes import this and nothing else they do not measure.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

MIB = 2**20
_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_stats() -> Iterator[tuple[int, str, int, int]]:
    """(pid, state, ppid, pgrp) for every process, parsed from /proc/<pid>/stat."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited while we were listing
        # comm (field 2) may contain spaces and parens; fields after the last ')' are safe.
        state, ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        yield int(entry.name), state, int(ppid), int(pgrp)


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (zombies are dead, just not reaped yet)."""
    return [pid for pid, state, _, pgrp in _proc_stats() if pgrp == pgid and state != "Z"]


def proc_state(pid: int) -> str | None:
    """The /proc state letter ("R", "S", "Z", ...), or None once the pid is gone entirely."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def process_tree(root: int) -> list[int]:
    """`root` plus every transitive child, from /proc/<pid>/stat parent links."""
    children: dict[int, list[int]] = {}
    for pid, _, ppid, _ in _proc_stats():
        children.setdefault(ppid, []).append(pid)
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


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
