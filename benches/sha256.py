"""SHA-256 throughput: the Rust body hasher vs Python's hashlib on the same machine, same run.

Usage: python benches/sha256.py  (builds and runs `cargo bench --bench sha256`)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import time
from pathlib import Path

SIZE = 64 * 1024 * 1024
ROUNDS = 5
ROOT = Path(__file__).resolve().parent.parent


def best_seconds(action: object) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        action()  # type: ignore[operator]
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    data = bytes(i * 2654435761 >> 13 & 0xFF for i in range(1024)) * (SIZE // 1024)
    encoded = base64.b64encode(data)
    rows = []
    seconds = best_seconds(lambda: hashlib.sha256(encoded).digest())
    rows.append(("hashlib, base64 text", len(encoded), seconds))
    seconds = best_seconds(lambda: hashlib.sha256(base64.b64encode(data)).digest())
    rows.append(("hashlib + base64.b64encode, raw bytes", len(encoded), seconds))
    out = subprocess.run(
        ["cargo", "bench", "--quiet", "--bench", "sha256"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            case = json.loads(line)
            rows.append(
                (f"rust: {case['case']}", int(case["body_mib"] * 1024 * 1024), case["best_s"])
            )
    print("| case | body MiB | best s | MiB/s |\n|---|---:|---:|---:|")
    for name, size, seconds in rows:
        mib = size / (1024 * 1024)
        print(f"| {name} | {mib:.0f} | {seconds:.4f} | {mib / seconds:.0f} |")


if __name__ == "__main__":
    main()
