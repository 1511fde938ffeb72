"""Proxy media bench: concurrent 16 MiB transcription uploads through the real LiteLLM proxy,
LiteLLM's own route vs `rust: true`: peak RSS, CPU, bodies verified (method: benches/README.md).

    python -m benches.proxy_media             # 2 repetitions per arm
    python -m benches.proxy_media --quick     # 1 repetition per arm (BENCH_QUICK=1)
"""

from __future__ import annotations

import asyncio
import random
import statistics
import struct
import sys
import time
from typing import Any

import httpx

from benches._common import (
    arg_parser,
    cells,
    failed,
    fetch_json,
    finish,
    machine,
    machine_line,
    start_proxy,
    table,
    wait_quiet,
)
from benches.media import ACCESS_KEY, MODEL, REGION, SECRET_KEY, body_reference, verify
from devtools.processes import MASTER_KEY, ServerProcess
from devtools.procfs import (
    MIB,
    Sampler,
    cpu_seconds,
    proc_status,
    process_tree,
    reset_hwm,
    system_busy_seconds,
)

ARMS = {"plain": "plain-voxtral", "rust": "rust-voxtral"}
BAR = 0.5


def wav(size: int, seed: int) -> bytes:
    """A 16 kHz mono 16-bit PCM WAV of exactly `size` bytes, random samples."""
    data_len = size - 44
    header = b"RIFF" + struct.pack("<I", 36 + data_len) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    return header + b"data" + struct.pack("<I", data_len) + random.Random(seed).randbytes(data_len)


async def burst(
    url: str, model: str, files: list[bytes], timeout: float
) -> tuple[list[Any], float]:
    limits = httpx.Limits(max_connections=len(files) + 4, max_keepalive_connections=len(files))
    client = httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits, trust_env=False)

    async def one(index: int) -> dict[str, Any]:
        started = time.perf_counter()
        response = await client.post(
            "/v1/audio/transcriptions",
            headers={"Authorization": f"Bearer {MASTER_KEY}"},
            files={"file": ("a.wav", files[index], "audio/wav")},
            data={"model": model},
        )
        ok = response.status_code == 200
        return {
            "index": index,
            "status": response.status_code,
            "seconds": time.perf_counter() - started,
            "x-litellm-rust": response.headers.get("x-litellm-rust"),
            "x-litellm-fastpath": response.headers.get("x-litellm-fastpath"),
            "text": response.json().get("text") if ok else None,
            "error": None if ok else response.text[:500],
        }

    async with client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(len(files))))
        return list(results), time.perf_counter() - started


def header_problems(arm: str, result: dict[str, Any]) -> list[str]:
    if result["status"] != 200:
        return [f"HTTP {result['status']}: {result['error']}"]
    problems = (
        []
        if result["x-litellm-rust"] == "true"
        else [f"x-litellm-rust={result['x-litellm-rust']!r}"]
    )
    if (arm == "rust") != bool(result["x-litellm-fastpath"]):
        without = "without" if arm == "rust" else "with"
        problems.append(f"{arm} arm answered {without} x-litellm-fastpath")
    return problems + ([] if result["text"] == "ok" else [f"text={result['text']!r}"])


def run_arm(
    arm: str, sink: Any, files: list[bytes], expected: list[Any], args: Any
) -> dict[str, Any]:
    params = {"model": f"bedrock/{MODEL}", "aws_access_key_id": ACCESS_KEY, "api_base": sink.url}
    params |= {"aws_secret_access_key": SECRET_KEY, "aws_region_name": REGION}
    models = [
        {"model_name": "plain-voxtral", "litellm_params": params},
        {"model_name": "rust-voxtral", "litellm_params": {**params, "rust": True}},
    ]
    env = dict(item.split("=", 1) for item in args.proxy_env)
    with start_proxy(models, env=env) as proxy:
        warm = asyncio.run(burst(proxy.url, ARMS[arm], [wav(64 * 1024, 999)], args.timeout))[0][0]
        problems = [f"warm-up: {p}" for p in header_problems(arm, warm)]
        time.sleep(args.settle)
        pids = process_tree(proxy.pid)
        hwm_reset = reset_hwm(pids)
        idle_samples = []
        for _ in range(5):
            idle_samples.append(proc_status(pids)["VmRSS"])
            time.sleep(0.1)
        idle = statistics.median(idle_samples)
        fetch_json(f"{sink.url}/reset", post=True)
        cpu0, busy0 = cpu_seconds(pids), system_busy_seconds()
        sampler = Sampler(proxy.pid, args.sample_ms / 1000)
        sampler.start()
        results, wall = asyncio.run(burst(proxy.url, ARMS[arm], files, args.timeout))
        sampler.stop()
        pids = process_tree(proxy.pid)
        cpu, busy = cpu_seconds(pids) - cpu0, system_busy_seconds() - busy0
        end = proc_status(pids)
        hwm, after = end["VmHWM"], end["VmRSS"]
        time.sleep(2.0)
        after_2s = proc_status(pids)["VmRSS"]
        sink_view = fetch_json(f"{sink.url}/results")
    for result in results:
        problems += [f"request {result['index']}: {p}" for p in header_problems(arm, result)]
    records = sink_view["requests"]
    # LiteLLM's own route (the plain arm) builds its body its own way: only the rust arm's must
    # be the reference.
    sink_problems, matched = verify(records, expected, bodies=arm == "rust")
    problems += [f"sink: {p}" for p in sink_problems]
    bodies_match = matched == len(expected)
    peak = max(sampler.samples, key=lambda s: s["rss_mib"])
    return {
        "arm": arm,
        "model": ARMS[arm],
        "idle_rss_mib": idle / MIB,
        "peak_rss_sampled_mib": peak["rss_mib"],
        "peak_rss_hwm_mib": hwm / MIB,
        "increase_sampled_mib": peak["rss_mib"] - idle / MIB,
        "increase_hwm_mib": (hwm - idle) / MIB if hwm_reset else None,
        "rss_after_mib": after / MIB,
        "rss_after_2s_mib": after_2s / MIB,
        "retained_after_2s_mib": (after_2s - idle) / MIB,
        "peak_at_s": peak["t"],
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
        "timeline": [(round(s["t"], 2), round(s["rss_mib"], 1)) for s in sampler.samples[::5]],
        "startup_s": proxy.startup_s,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        out[arm] = {
            "increase_mib": statistics.median(
                r["increase_sampled_mib"]
                if r["increase_hwm_mib"] is None
                else r["increase_hwm_mib"]
                for r in mine
            ),
            **{
                k: statistics.median(r[k] for r in mine)
                for k in ("increase_sampled_mib", "proxy_cpu_s", "wall_s")
            },
        }
    out["ratio"] = out["rust"]["increase_mib"] / max(out["plain"]["increase_mib"], 1e-9)
    out["bar_met"] = out["ratio"] <= BAR
    out["rust_bodies_match"] = all(r["bodies_match_reference"] for r in runs if r["arm"] == "rust")
    return out


RUN_HEAD = ["rep", "arm", "idle RSS MiB", "peak increase MiB (HWM)"]
RUN_HEAD += ["peak increase MiB (sampled)", "retained after 2 s MiB", "proxy CPU s", "wall s"]
RUN_HEAD += ["median latency s", "upstream body MiB", "body = reference", "sink max in-flight"]


def markdown(report: dict[str, Any]) -> str:
    conc, size, s = report["concurrency"], report["size_mib"], report["summary"]
    runs = []
    for r in report["runs"]:
        hwm = "-" if r["increase_hwm_mib"] is None else f"{r['increase_hwm_mib']:.0f}"
        row = [*cells(r, "rep", "arm", "idle_rss_mib:.0f"), hwm]
        row += cells(r, "increase_sampled_mib:.0f", "retained_after_2s_mib:.0f", "proxy_cpu_s:.2f")
        row += cells(r, "wall_s:.2f", "latency_median_s:.2f", "upstream_body_mib:.2f")
        row += ["yes" if r["bodies_match_reference"] else "no", r["sink_max_inflight"]]
        runs.append([*row, "**no**" if r["problems"] else "yes"])
    per_request = {arm: {"per_request": s[arm]["increase_mib"] / conc, **s[arm]} for arm in ARMS}
    summary_row = ("increase_mib:.0f", "per_request:.1f", "proxy_cpu_s:.2f", "wall_s:.2f")
    arms = [[arm, *cells(per_request[arm], *summary_row)] for arm in ARMS]
    problems = ["## Problems", "", *[f"- {p}" for p in report["problems"]], ""]
    return "\n".join(
        [
            f"# Proxy media: {conc} concurrent {size} MiB transcription uploads through the "
            "LiteLLM proxy",
            "",
            f"Generated by `benches/proxy_media.py`. {report['machine']}",
            "",
            f"{conc} concurrent `POST /v1/audio/transcriptions` (multipart, distinct {size} MiB "
            "WAV files) per arm; a fresh proxy (1 worker) per arm and repetition; upstream = "
            "hashing sink in its own process. *Increase* = peak RSS of the proxy process tree - "
            "idle RSS after one warm-up upload (reset VmHWM, and ~20 ms samples); *retained* = "
            "RSS 2 s after the burst - idle; method: benches/README.md (*Media memory*).",
            "",
            *table([*RUN_HEAD, "headers ok"], runs, "rl" + "r" * 8 + "lrl"),
            "",
            "## Summary (medians over repetitions)",
            "",
            *table(["arm", "peak increase MiB", "per request MiB", "proxy CPU s", "wall s"], arms),
            "",
            f"Bar: rust peak increase <= {BAR}x plain: {s['ratio']:.2f}x — "
            + ("**met**." if s["bar_met"] else "**missed**."),
            "",
            f"Each upload is {size} MiB of audio (base64: {size * 4 / 3:.1f} MiB). The rust arm's "
            "upstream bodies were compared (length, sha256) with the reference Converse body of "
            "each file: " + ("equal." if s["rust_bodies_match"] else "**different**."),
            "",
            *(problems if report["problems"] else []),
        ]
    )


def main() -> int:
    p = arg_parser(__doc__, "1 repetition per arm (also BENCH_QUICK=1)", "before each arm")
    p.add_argument("--reps", type=int, help="repetitions per arm (default 2, 1 with --quick)")
    p.add_argument("--size-mib", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--sample-ms", type=float, default=20.0)
    p.add_argument("--settle", type=float, default=1.0, help="idle seconds after warm-up")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=list(ARMS))
    p.add_argument(
        "--proxy-env",
        action="append",
        default=[],
        metavar="K=V",
        help="extra env for the proxy, e.g. MALLOC_MMAP_THRESHOLD_=1048576",
    )
    args = p.parse_args()
    args.reps = args.reps or (1 if args.quick else 2)
    started = time.monotonic()
    files = [wav(args.size_mib * MIB, 7_000 + i) for i in range(args.concurrency)]
    expected = [body_reference(f) for f in files]
    runs: list[dict[str, Any]] = []
    with ServerProcess("devtools.media_sink") as sink:
        for rep in range(args.reps):
            for arm in args.arms if rep % 2 == 0 else reversed(args.arms):
                if args.wait_quiet > 0:
                    wait_quiet(args.wait_quiet)
                runs.append(run := {**run_arm(arm, sink, files, expected, args), "rep": rep})
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
    report: dict[str, Any] = {
        "machine": machine_line(machine()) + ".",
        **{k: getattr(args, k) for k in ("size_mib", "concurrency", "reps", "proxy_env")},
        "elapsed_s": time.monotonic() - started,
        "summary": summary(runs) if set(args.arms) == set(ARMS) else {},
        "problems": problems,
        "runs": runs,
    }
    if report["summary"]:
        finish(args, "proxy_media", markdown(report), report, indent=1)
    return failed(problems)


if __name__ == "__main__":
    sys.exit(main())
