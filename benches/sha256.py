"""SHA-256 throughput: the Rust body hasher (`cargo bench --bench sha256`) vs Python's hashlib,
same machine, same run: `python -m benches.sha256`."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import time

from benches._common import ROOT
from devtools.procfs import MIB

SIZE = 64 * MIB


def best_seconds(action: object, rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    data = bytes(i * 2654435761 >> 13 & 0xFF for i in range(1024)) * (SIZE // 1024)
    encoded = base64.b64encode(data)
    rows = [
        ("hashlib, base64 text", len(encoded), best_seconds(lambda: hashlib.sha256(encoded))),
        (
            "hashlib + base64.b64encode, raw bytes",
            len(encoded),
            best_seconds(lambda: hashlib.sha256(base64.b64encode(data))),
        ),
    ]
    bench = ["cargo", "bench", "--quiet", "--bench", "sha256"]
    out = subprocess.run(bench, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for case in (json.loads(line) for line in out.splitlines() if line.startswith("{")):
        rows.append((f"rust: {case['case']}", int(case["body_mib"] * MIB), case["best_s"]))
    print("| case | body MiB | best s | MiB/s |\n|---|---:|---:|---:|")
    for name, size, seconds in rows:
        print(f"| {name} | {size / MIB:.0f} | {seconds:.4f} | {size / MIB / seconds:.0f} |")


if __name__ == "__main__":
    main()
