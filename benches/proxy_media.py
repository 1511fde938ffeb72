"""Proxy media bench: 16 concurrent 16 MiB audio uploads through the real LiteLLM proxy.

`POST /v1/audio/transcriptions` (multipart, `file=("a.wav", data, "audio/wav")`) to a fresh
proxy (1 worker) per arm and repetition, with two Bedrock Voxtral models pointing at the hashing
sink (`benches/media_sink.py`, its own process):

- `plain`: `plain-voxtral` (LiteLLM 1.106.12's own route; it is native too and answers with
  `x-litellm-rust: true`, but never with `x-litellm-fastpath`);
- `rust`: `rust-voxtral` (`rust: true`: our fast path; must answer with both headers).

Per arm: start the proxy, one small warm-up upload (lazy imports, pools), reset the RSS
high-water mark of every process of the proxy tree (`/proc/<pid>/clear_refs` = 5), take the idle
RSS, then the burst, sampling the tree's RSS every ~20 ms. Reported: peak increase over idle
(from the samples and from the reset VmHWM), RSS retained after the burst, proxy CPU seconds,
wall time and per-request latency. Every upstream body is checked at the sink: the rust arm's must
equal (length, sha256) the reference Converse body of its file; a wrong header, a non-200 or a
sink error fails the run (exit 1). Arms alternate (plain, rust, rust, plain, ...).

    python benches/proxy_media.py                # 2 repetitions per arm
    python benches/proxy_media.py --reps 1       # quicker

Bar: rust arm's peak increase <= 0.5x the plain arm's (medians over repetitions).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from media import body_reference, system_busy_seconds
from media_sink import SinkProcess

BENCHES = Path(__file__).resolve().parent
ROOT = BENCHES.parent
RESULTS = BENCHES / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.harness import MASTER_KEY, ProxyProcess, process_tree  # noqa: E402

MIB = 1 << 20
MODEL = "bedrock/mistral.voxtral-mini-3b-2507"
ARMS = {"plain": "plain-voxtral", "rust": "rust-voxtral"}
BAR = 0.5
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def wav(size: int, seed: int) -> bytes:
    """A 16 kHz mono 16-bit PCM WAV of exactly `size` bytes, random samples."""
    data_len = size - 44
    header = b"RIFF" + struct.pack("<I", 36 + data_len) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    header += b"data" + struct.pack("<I", data_len)
    return header + random.Random(seed).randbytes(data_len)


def model_list(sink_url: str) -> list[dict[str, Any]]:
    params = {
        "model": MODEL,
        "aws_access_key_id": "AKID",
        "aws_secret_access_key": "secret",
        "aws_region_name": "us-east-1",
        "api_base": sink_url,
    }
    return [
        {"model_name": "plain-voxtral", "litellm_params": dict(params)},
        {"model_name": "rust-voxtral", "litellm_params": {**params, "rust": True}},
    ]


# -- /proc ------------------------------------------------------------------------------------


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def hwm_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def reset_hwm(pids: list[int]) -> bool:
    ok = True
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


class TreeSampler(threading.Thread):
    """RSS of the proxy's process tree every `interval` s (tree re-listed every ~1 s)."""

    def __init__(self, root: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval = interval
        self.stop_event = threading.Event()
        self.samples: list[tuple[float, int]] = []
        self.t0 = time.perf_counter()

    def run(self) -> None:
        pids = process_tree(self.root)
        listed = time.perf_counter()
        while not self.stop_event.is_set():
            now = time.perf_counter()
            if now - listed > 1.0:
                pids, listed = process_tree(self.root), now
            self.samples.append((now - self.t0, rss_bytes(pids)))
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


# -- one arm -------------------------------------------------------------------------------


async def burst(
    url: str, model: str, files: list[bytes], timeout: float
) -> tuple[list[dict[str, Any]], float]:
    limits = httpx.Limits(max_connections=len(files) + 4, max_keepalive_connections=len(files))
    async with httpx.AsyncClient(
        base_url=url, timeout=timeout, limits=limits, trust_env=False
    ) as client:

        async def one(index: int) -> dict[str, Any]:
            started = time.perf_counter()
            response = await client.post(
                "/v1/audio/transcriptions",
                headers={"Authorization": f"Bearer {MASTER_KEY}"},
                files={"file": ("a.wav", files[index], "audio/wav")},
                data={"model": model},
            )
            return {
                "index": index,
                "status": response.status_code,
                "seconds": time.perf_counter() - started,
                "x-litellm-rust": response.headers.get("x-litellm-rust"),
                "x-litellm-fastpath": response.headers.get("x-litellm-fastpath"),
                "text": response.json().get("text") if response.status_code == 200 else None,
                "error": None if response.status_code == 200 else response.text[:500],
            }

        started = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(len(files))))
        return list(results), time.perf_counter() - started


def header_problems(arm: str, result: dict[str, Any]) -> list[str]:
    problems = []
    if result["status"] != 200:
        problems.append(f"HTTP {result['status']}: {result['error']}")
        return problems
    if result["x-litellm-rust"] != "true":
        problems.append(f"x-litellm-rust={result['x-litellm-rust']!r}")
    if arm == "rust" and not result["x-litellm-fastpath"]:
        problems.append("rust arm answered without x-litellm-fastpath")
    if arm == "plain" and result["x-litellm-fastpath"]:
        problems.append("plain arm answered with x-litellm-fastpath")
    if result["text"] != "ok":
        problems.append(f"text={result['text']!r}")
    return problems


def run_arm(
    arm: str,
    sink: SinkProcess,
    files: list[bytes],
    expected: list[tuple[int, str]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    model = ARMS[arm]
    proxy = ProxyProcess(
        model_list(sink.url),
        litellm_settings={"callbacks": ["litellm_fastpath.proxy.accelerator"]},
        workers=1,
        extra_env=dict(item.split("=", 1) for item in args.proxy_env),
    )
    with proxy:
        warm = wav(64 * 1024, 999)
        warm_result, _ = asyncio.run(burst(proxy.url, model, [warm], args.timeout))
        problems = [f"warm-up: {p}" for p in header_problems(arm, warm_result[0])]
        time.sleep(args.settle)
        pids = process_tree(proxy.pid)
        hwm_reset = reset_hwm(pids)
        idle_samples = []
        for _ in range(5):
            idle_samples.append(rss_bytes(pids))
            time.sleep(0.1)
        idle = statistics.median(idle_samples)
        sink.reset()
        cpu0, busy0 = cpu_seconds(pids), system_busy_seconds()
        sampler = TreeSampler(proxy.pid, args.sample_ms / 1000)
        sampler.start()
        results, wall = asyncio.run(burst(proxy.url, model, files, args.timeout))
        sampler.stop()
        pids = process_tree(proxy.pid)
        cpu = cpu_seconds(pids) - cpu0
        busy = system_busy_seconds() - busy0
        hwm = hwm_bytes(pids)
        after = rss_bytes(pids)
        time.sleep(2.0)
        after_2s = rss_bytes(pids)
        sink_view = sink.results()
    for result in results:
        problems += [f"request {result['index']}: {p}" for p in header_problems(arm, result)]
    records = sink_view["requests"]
    for record in records:
        if record.get("error") or record.get("chunked") or not record.get("sigv4"):
            problems.append(f"sink: {record}")
    got = sorted((r.get("received"), r.get("sha256")) for r in records)
    bodies_match = got == sorted(expected)
    if arm == "rust" and not bodies_match:
        problems.append(f"rust arm's upstream bodies differ from the reference ({len(got)} seen)")
    if len(records) != len(files):
        problems.append(f"sink saw {len(records)} requests, expected {len(files)}")
    peak_sampled = max((rss for _, rss in sampler.samples), default=0)
    peak_at = max(sampler.samples, key=lambda s: s[1])[0] if sampler.samples else 0.0
    return {
        "arm": arm,
        "model": model,
        "idle_rss_mib": idle / MIB,
        "peak_rss_sampled_mib": peak_sampled / MIB,
        "peak_rss_hwm_mib": hwm / MIB,
        "increase_sampled_mib": (peak_sampled - idle) / MIB,
        "increase_hwm_mib": (hwm - idle) / MIB if hwm_reset else None,
        "rss_after_mib": after / MIB,
        "rss_after_2s_mib": after_2s / MIB,
        "retained_after_2s_mib": (after_2s - idle) / MIB,
        "peak_at_s": peak_at,
        "wall_s": wall,
        "proxy_cpu_s": cpu,
        "foreign_cores": max(0.0, busy - cpu) / wall,  # includes this client and the sink
        "latency_median_s": statistics.median(r["seconds"] for r in results),
        "latency_max_s": max(r["seconds"] for r in results),
        "upload_mib_s": sum(len(f) for f in files) / MIB / wall,
        "sink_requests": len(records),
        "sink_max_inflight": sink_view["max_inflight"],
        "upstream_body_mib": statistics.median([r.get("received") or 0 for r in records] or [0])
        / MIB,
        "bodies_match_reference": bodies_match,
        "processes": len(pids),
        "hwm_reset": hwm_reset,
        "problems": problems,
        "timeline": [(round(t, 2), round(rss / MIB, 1)) for t, rss in sampler.samples[::5]],
        "startup_s": proxy.startup_s,
    }


# -- report ----------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Proxy media: {report['concurrency']} concurrent {report['size_mib']} MiB transcription "
        "uploads through the LiteLLM proxy",
        "",
        f"Generated by `benches/proxy_media.py`. {report['machine']}",
        "",
        f"{report['concurrency']} concurrent `POST /v1/audio/transcriptions` (multipart, distinct "
        f"{report['size_mib']} MiB WAV files) per arm; a fresh proxy (1 worker) per arm and "
        "repetition; upstream = hashing sink in its own process. Idle RSS after one warm-up "
        "upload; *increase* = peak RSS of the proxy process tree - idle, from the reset VmHWM "
        "(exact high-water mark) and from ~20 ms samples. *Retained* = RSS 2 s after the burst "
        "- idle. Proxy CPU = utime+stime of the tree during the burst.",
        "",
        "| rep | arm | idle RSS MiB | peak increase MiB (HWM) | peak increase MiB (sampled) "
        "| retained after 2 s MiB | proxy CPU s | wall s | median latency s "
        "| upstream body MiB | body = reference | sink max in-flight | headers ok |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for run in report["runs"]:
        hwm = run["increase_hwm_mib"]
        lines.append(
            f"| {run['rep']} | {run['arm']} | {run['idle_rss_mib']:.0f} "
            f"| {'-' if hwm is None else f'{hwm:.0f}'} | {run['increase_sampled_mib']:.0f} "
            f"| {run['retained_after_2s_mib']:.0f} | {run['proxy_cpu_s']:.2f} "
            f"| {run['wall_s']:.2f} | {run['latency_median_s']:.2f} "
            f"| {run['upstream_body_mib']:.2f} "
            f"| {'yes' if run['bodies_match_reference'] else 'no'} | {run['sink_max_inflight']} "
            f"| {'yes' if not run['problems'] else '**no**'} |"
        )
    s = report["summary"]
    lines += [
        "",
        "## Summary (medians over repetitions)",
        "",
        "| arm | peak increase MiB | per request MiB | proxy CPU s | wall s |",
        "|---|---:|---:|---:|---:|",
    ]
    for arm in ARMS:
        a = s[arm]
        lines.append(
            f"| {arm} | {a['increase_mib']:.0f} | {a['increase_mib'] / report['concurrency']:.1f} "
            f"| {a['proxy_cpu_s']:.2f} | {a['wall_s']:.2f} |"
        )
    lines += [
        "",
        f"Bar: rust peak increase <= {BAR}x plain: {s['ratio']:.2f}x — "
        + ("**met**." if s["bar_met"] else "**missed**."),
        "",
        f"Each upload is {report['size_mib']} MiB of audio (base64: "
        f"{report['size_mib'] * 4 / 3:.1f} MiB). The rust arm's upstream bodies were compared "
        "(length, sha256) with the reference Converse body of each file: "
        + ("equal." if s["rust_bodies_match"] else "**different**."),
        "",
    ]
    if report["problems"]:
        lines += ["## Problems", ""] + [f"- {p}" for p in report["problems"]] + [""]
    return "\n".join(lines)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        increase = [
            r["increase_hwm_mib"]
            if r["increase_hwm_mib"] is not None
            else r["increase_sampled_mib"]
            for r in mine
        ]
        out[arm] = {
            "increase_mib": statistics.median(increase),
            "increase_sampled_mib": statistics.median(r["increase_sampled_mib"] for r in mine),
            "proxy_cpu_s": statistics.median(r["proxy_cpu_s"] for r in mine),
            "wall_s": statistics.median(r["wall_s"] for r in mine),
        }
    out["ratio"] = out["rust"]["increase_mib"] / max(out["plain"]["increase_mib"], 1e-9)
    out["bar_met"] = out["ratio"] <= BAR
    out["rust_bodies_match"] = all(r["bodies_match_reference"] for r in runs if r["arm"] == "rust")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--size-mib", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sample-ms", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=1.0, help="idle seconds after warm-up")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=list(ARMS))
    parser.add_argument(
        "--proxy-env",
        action="append",
        default=[],
        metavar="K=V",
        help="extra env for the proxy, e.g. MALLOC_MMAP_THRESHOLD_=1048576",
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    started = time.monotonic()
    files = [wav(args.size_mib * MIB, 7_000 + i) for i in range(args.concurrency)]
    expected = [body_reference(f) for f in files]
    runs: list[dict[str, Any]] = []
    with SinkProcess() as sink:
        for rep in range(args.reps):
            order = list(args.arms) if rep % 2 == 0 else list(reversed(args.arms))
            for arm in order:
                run = run_arm(arm, sink, files, expected, args)
                run["rep"] = rep
                runs.append(run)
                hwm = run["increase_hwm_mib"]
                print(
                    f"rep {rep} {arm:5s} idle {run['idle_rss_mib']:6.0f} MiB  increase "
                    f"{'-' if hwm is None else f'{hwm:.0f}'} MiB (sampled "
                    f"{run['increase_sampled_mib']:.0f})  retained "
                    f"{run['retained_after_2s_mib']:.0f} MiB  cpu {run['proxy_cpu_s']:.2f}s  "
                    f"wall {run['wall_s']:.2f}s  problems {len(run['problems'])}",
                    flush=True,
                )
    problems = [f"rep {r['rep']} {r['arm']}: {p}" for r in runs for p in r["problems"]]
    from media import machine_line

    report: dict[str, Any] = {
        "machine": machine_line(),
        "size_mib": args.size_mib,
        "concurrency": args.concurrency,
        "reps": args.reps,
        "proxy_env": args.proxy_env,
        "elapsed_s": time.monotonic() - started,
        "summary": summary(runs) if set(args.arms) == set(ARMS) else {},
        "problems": problems,
        "runs": runs,
    }
    if report["summary"]:
        text = markdown(report)
        print(text)
        if not args.no_write:
            RESULTS.mkdir(parents=True, exist_ok=True)
            (RESULTS / "proxy_media.md").write_text(text)
            (RESULTS / "proxy_media.json").write_text(json.dumps(report, indent=1) + "\n")
            print(f"wrote {RESULTS / 'proxy_media'}.{{md,json}}")
    if problems:
        print(f"FAILED: {len(problems)} problem(s)", file=sys.stderr)
        for problem in problems[:20]:
            print(f"  {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
