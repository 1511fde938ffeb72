"""Media memory bench: a Bedrock transcription body sent `fastpath`/`buffered`/`python`, one fresh
process per measurement, to the hashing sink; with `--proxy`, 16 concurrent 16 MiB uploads through
the real proxy, LiteLLM's own route vs `rust: true`. Every body verified (method:
benches/README.md, with the commands). Extra environment (`LITELLM_FASTPATH_THREADS=4`,
`MALLOC_ARENA_MAX=2`, `MALLOC_MMAP_THRESHOLD_=1048576`) reaches the workers and the proxy."""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import hashlib
import itertools
import json
import os
import random
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from benches._common import (
    ROOT,
    arg_parser,
    cells,
    failed,
    fetch_json,
    finish,
    machine,
    machine_line,
    median,
    start_proxy,
    table,
    wait_quiet,
)
from devtools.processes import ServerProcess
from devtools.procfs import (
    MIB,
    Sampler,
    cpu_seconds,
    proc_status,
    process_tree,
    reset_hwm,
    system_busy_seconds,
)

MODEL = "mistral.voxtral-mini-3b-2507"
REGION = "us-east-1"
ACCESS_KEY, SECRET_KEY = "AKID", "secret"
INSTRUCTION = "Transcribe the audio. Respond with only the transcript."
APPROACHES = ("fastpath", "buffered", "python")
KINDS = ("encoded", "raw")
CELL = ("approach", "kind", "size_mib", "concurrency")  # one measurement's coordinates
WARMUP_BYTES = 3000
MEMORY_BAR_MIB = 64.0
WIRE_BARS = {"raw": 1.5, "encoded": 1.2}
CPU_BAR = 0.7
ENV = ("LITELLM_FASTPATH_THREADS", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")


def converse_doc(b64: str) -> dict[str, Any]:
    """Exactly the document `_native.prepare_transcription(d, audio, "wav")` sends."""
    content = [{"audio": {"format": "wav", "source": {"bytes": b64}}}, {"text": INSTRUCTION}]
    turn = {"role": "user", "content": content}
    return {"messages": [turn], "inferenceConfig": {"maxTokens": 4096}}


def build_body(item: str | bytes) -> bytes:
    """What a Python caller does: base64 (raw input) + json.dumps + encode."""
    b64 = item if isinstance(item, str) else base64.b64encode(item).decode("ascii")
    return json.dumps(converse_doc(b64), separators=(",", ":")).encode()


def raw_input(size_mib: int, index: int) -> bytes:
    """Distinct per request, the same in every process (seeded)."""
    return random.Random(size_mib * 1_000 + index).randbytes(size_mib * MIB)


def body_reference(raw: bytes) -> tuple[int, str]:
    """(length, sha256) of the Converse body for raw audio: prefix + streamed base64 + suffix."""
    template = json.dumps(converse_doc("\x00"), separators=(",", ":"))
    prefix, suffix = (part.encode() for part in template.split('"\\u0000"'))
    prefix, suffix = prefix + b'"', b'"' + suffix
    digest, length = hashlib.sha256(prefix), len(prefix) + len(suffix)
    piece = 3 * MIB  # a multiple of 3: pieces concatenate to the one-shot encoding
    for offset in range(0, len(raw), piece):
        encoded = base64.b64encode(raw[offset : offset + piece])
        digest.update(encoded)
        length += len(encoded)
    digest.update(suffix)
    return length, digest.hexdigest()


def check_transcription(result: Any) -> None:
    if result[0] != {"text": "ok"}:
        raise RuntimeError(f"unexpected transcription result {result[0]!r}")


def python_send(sink_url: str) -> Callable[[str | bytes], None]:
    """One request: the body built in Python, botocore SigV4 (hashlib), `http.client`."""
    import http.client

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    credentials = Credentials(ACCESS_KEY, SECRET_KEY)
    host, port = sink_url.split("://", 1)[1].rsplit(":", 1)
    path = f"/model/{MODEL}/converse"

    def send(item: str | bytes) -> None:
        body = build_body(item)
        headers = {"Content-Type": "application/json"}
        request = AWSRequest(method="POST", url=f"{sink_url}{path}", data=body, headers=headers)
        SigV4Auth(credentials, "bedrock", REGION).add_auth(request)
        headers = dict(request.headers.items())
        del request
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        try:
            conn.request("POST", path, body=body, headers=headers)
            del body
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"sink answered {response.status}: {data[:200]!r}")
        if json.loads(data)["output"]["message"]["content"][0]["text"] != "ok":
            raise RuntimeError(f"unexpected sink answer {data[:200]!r}")

    return send


def thread_batch(send: Callable[[Any], None], inputs: list[Any]) -> Callable[[], None]:
    """One started thread per input, waiting; the returned `go()` releases them all and joins."""
    start, errors = threading.Event(), []

    def target(index: int) -> None:
        start.wait()
        try:
            send(inputs[index])
        except BaseException as err:  # reported to the parent, which fails the run
            errors.append(f"request {index}: {err!r}")

    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(len(inputs))]
    for thread in threads:
        thread.start()

    def go() -> None:
        start.set()
        for thread in threads:
            thread.join()
        if errors:
            raise RuntimeError("; ".join(errors))

    return go


def sender(approach: str, sink_url: str) -> Callable[[list[Any]], Callable[[], None]]:
    """For a list of inputs, its sending phase ready to go: every call started on one asyncio
    loop (fastpath, as the proxy integration does) or one waiting thread per request (buffered:
    Python builds the body, Rust signs and sends it)."""
    if approach == "python":
        send = python_send(sink_url)
        return lambda inputs: thread_batch(send, inputs)
    from litellm_fastpath import _native  # the package import is lazy: no LiteLLM

    keys = {"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}
    d = _native.Deployment("bedrock", MODEL, **keys, aws_region=REGION, aws_endpoint=sink_url)
    if approach == "fastpath":
        from litellm_fastpath.bridge import await_call

        async def run_all(inputs: list[Any]) -> None:
            calls = [await_call(_native.prepare_transcription(d, x, "wav")) for x in inputs]
            for result in await asyncio.gather(*calls):
                check_transcription(result)

        return lambda inputs: lambda: asyncio.run(run_all(inputs))

    def send_blocking(item: str | bytes) -> None:
        check_transcription(_native.prepare_converse_body(d, build_body(item)).send_blocking())

    return lambda inputs: thread_batch(send_blocking, inputs)


def as_kind(raw: bytes, kind: str) -> str | bytes:
    return base64.b64encode(raw).decode("ascii") if kind == "encoded" else raw


def worker(args: Any) -> dict[str, Any]:
    prepare = sender(args.approach, args.sink_url)
    inputs = [as_kind(raw_input(args.size_mib, i), args.kind) for i in range(args.concurrency)]
    # Warm-up with a tiny input of the same kind: runtime threads, pool, lazy imports.
    prepare([as_kind(random.Random(0).randbytes(WARMUP_BYTES), args.kind)])()
    fetch_json(f"{args.sink_url}/reset", post=True)
    go = prepare(inputs)
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    me = [os.getpid()]
    setup = proc_status(me)
    peak_reset = reset_hwm(me)
    busy0, sink0 = system_busy_seconds(), cpu_seconds([args.sink_pid])
    cpu0, t0 = time.process_time(), time.perf_counter()
    go()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    sink_cpu = cpu_seconds([args.sink_pid]) - sink0
    busy = system_busy_seconds() - busy0
    end = proc_status(me)
    return {
        "input_bytes": sum(len(x) for x in inputs),  # keeps every input alive until here
        "rss_setup_mib": setup["VmRSS"] / MIB,
        # VmHWM: this process's own high-water mark since the reset (ru_maxrss would also count
        # the RSS of the mm replaced at exec: the parent's, with vfork).
        "peak_rss_mib": end["VmHWM"] / MIB,
        "peak_reset": peak_reset,
        "wall_s": wall,
        "cpu_s": cpu,
        "sink_cpu_s": sink_cpu,
        # CPU used by every other process on the machine during the sending phase (/proc/stat
        # busy time minus this worker and the sink); well above 0 means a shared, noisy box.
        "foreign_cores": max(0.0, busy - cpu - sink_cpu) / wall,
    }


def verify(
    records: list[dict[str, Any]], expected: list[tuple[int, str]], bodies: bool = True
) -> tuple[list[str], int]:
    """Problems with the sink's view of one measurement (with `bodies`, every body must be a
    reference one), and how many requests matched the reference bodies."""
    problems = [f"sink saw {len(records)} requests, expected {len(expected)}"]
    problems = problems if len(records) != len(expected) else []
    for r in records:
        problems += [f"sink: {r['error']}"] if r.get("error") else []
        problems += ["chunked transfer encoding"] if r.get("chunked") else []
        problems += [] if r.get("sigv4") else ["request without SigV4 headers"]
        if r.get("received") != r.get("content_length"):
            problems.append(f"received {r.get('received')} != Content-Length {r['content_length']}")
        if r.get("content_type") != "application/json":
            problems.append(f"content-type {r.get('content_type')!r}")
    got, want = sorted((r.get("received"), r.get("sha256")) for r in records), sorted(expected)
    if got != want and bodies:
        problems.append(
            f"bodies differ from the reference: got {len(got)} "
            f"(length, sha256) pairs, {len(set(got) & set(want))} of {len(want)} match"
        )
    return sorted(set(problems)), len(got) if got == want else 0


def run_one(
    sink: Any, cell: tuple[str, str, int, int], expected: list[tuple[int, str]], args: Any
) -> dict[str, Any]:
    result: dict[str, Any] = dict(zip(CELL, cell, strict=True))
    worker = json.dumps({**result, "sink_url": sink.url, "sink_pid": sink.pid})
    cmd = [sys.executable, "-m", "benches.media", "--worker", worker]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        stdout, stderr, code = str(err.stdout or ""), str(err.stderr or ""), -1
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if code != 0 or not lines:
        return {**result, "problems": [f"worker exited {code}: {stderr.strip()[-1500:]}"]}
    result |= json.loads(lines[-1][len("RESULT ") :])
    sink_view = fetch_json(f"{sink.url}/results")
    problems, matched = verify(sink_view["requests"], expected)
    result["body_bytes"] = sum(r.get("received") or 0 for r in sink_view["requests"])
    result["wire_mib_s"] = result["body_bytes"] / MIB / result["wall_s"]
    result["peak_minus_setup_mib"] = result["peak_rss_mib"] - result["rss_setup_mib"]
    result["sink_max_inflight"] = sink_view["max_inflight"]
    return {**result, "verified_requests": matched, "problems": problems}


MEDIANS = ("rss_setup_mib", "peak_rss_mib", "peak_minus_setup_mib", "cpu_s", "wall_s")
MEDIANS += ("wire_mib_s", "sink_cpu_s")


def aggregate(runs: list[dict[str, Any]]) -> dict[tuple[str, str, int, int], dict[str, Any]]:
    """One row per cell (approach, kind, size, concurrency): medians over repetitions."""
    cells: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for run in runs:
        if "wall_s" in run:
            cells.setdefault(tuple(run[k] for k in CELL), []).append(run)
    order = {a: i for i, a in enumerate(APPROACHES)}
    rows = {}
    for key, group in sorted(cells.items(), key=lambda kv: (*kv[0][2:], kv[0][1], order[kv[0][0]])):
        rows[key] = {
            **dict(zip(CELL, key, strict=True)),
            "reps": len(group),
            **{k: median(r[k] for r in group) for k in MEDIANS},
            "peak_minus_setup_max_mib": max(r["peak_minus_setup_mib"] for r in group),
            "foreign_cores": max(r["foreign_cores"] for r in group),
            "sink_max_inflight": min(r["sink_max_inflight"] for r in group),
        }
    return rows


def bars(rows: dict[Any, Any], size: int, conc: int) -> list[dict[str, Any]]:
    """The fastpath bars at `size` x `conc`, against python in the same run."""
    out = []
    for kind in KINDS:
        base, row = rows.get(("python", kind, size, conc)), rows.get(("fastpath", kind, size, conc))
        if base is None or row is None:
            continue
        cpu, wire = row["cpu_s"] / base["cpu_s"], row["wire_mib_s"] / base["wire_mib_s"]
        worst = row["peak_minus_setup_max_mib"]
        memory = f"peak - setup {worst:.1f} MiB (worst of {row['reps']})"
        wires = f"{row['wire_mib_s']:.0f} vs {base['wire_mib_s']:.0f} MiB/s = {wire:.2f}x"
        cpus = f"{row['cpu_s']:.2f} vs {base['cpu_s']:.2f} s = {cpu:.2f}x"
        for bar, value, met in (
            (
                f"peak RSS <= RSS after setup + {MEMORY_BAR_MIB:.0f} MiB",
                memory,
                worst <= MEMORY_BAR_MIB,
            ),
            (f"wire MiB/s >= {WIRE_BARS[kind]}x python", wires, wire >= WIRE_BARS[kind]),
            (f"CPU s <= {CPU_BAR}x python", cpus, cpu <= CPU_BAR),
        ):
            out.append({"bar": f"fastpath {bar} ({kind})", "value": value, "met": met})
    return out


ROW_HEAD = ["approach", "kind", "size MiB", "concurrency", "RSS after setup MiB", "peak RSS MiB"]
ROW_HEAD += ["peak - setup MiB", "CPU s", "wire MiB/s", "wall s", "sink CPU s"]
ROW_HEAD += ["sink max in-flight", "foreign cores"]
ROW = (*CELL, "rss_setup_mib:.0f", "peak_rss_mib:.0f", "peak_minus_setup_mib:.1f", "cpu_s:.2f")
ROW += ("wire_mib_s:.0f", "wall_s:.2f", "sink_cpu_s:.2f", "sink_max_inflight", "foreign_cores:.2f")


def markdown(report: dict[str, Any]) -> str:
    size, conc = report["bar_size_mib"], report["bar_concurrency"]
    rows = [cells(r, *ROW) for r in report["rows"]]
    bars = [[b["bar"], b["value"], "yes" if b["met"] else "**no**"] for b in report["bars"]]
    quick = " --quick" if report["quick"] else ""
    failed = " — **FAILED**, see problems below." if report["problems"] else "."
    return "\n".join(
        [
            "# Media memory: Bedrock transcription body, fastpath vs buffered vs Python",
            "",
            f"Generated by `benches/media.py{quick}`. {report['machine']}",
            "",
            f"One fresh worker process per measurement, {report['reps']} repetition(s) per cell "
            "(medians; the memory bar uses the worst repetition); method and columns: "
            "benches/README.md (*Media memory*). *Foreign cores*: worst repetition.",
            "",
            f"Env: `{json.dumps(report['env'])}`. Verified: "
            f"{report['verified_requests']} requests, every (length, sha256) equal to the "
            f"independently computed reference body{failed}",
            "",
            *table(ROW_HEAD, rows, "llrrrrrrrrrrr"),
            "",
            f"## Bars ({size} MiB x {conc})",
            "",
            *table(["bar", "measured", "met"], bars, "lll"),
            *(
                ["", "## Problems", "", *[f"- {p}" for p in report["problems"]]]
                * bool(report["problems"])
            ),
            "",
        ]
    )


def parent(args: Any) -> int:
    sizes = args.sizes or ((1, 16) if args.quick else (1, 16, 64))
    concurrency = args.concurrency or (1, 16)
    reps = args.reps or (1 if args.quick else 3)
    started = time.monotonic()
    expected = {
        s: [body_reference(raw_input(s, i)) for i in range(max(concurrency))] for s in sizes
    }
    print(f"references ready in {time.monotonic() - started:.1f}s", flush=True)
    runs: list[dict[str, Any]] = []
    problems: list[str] = []
    matrix = itertools.product(range(reps), sizes, concurrency, KINDS)
    with ServerProcess("devtools.media_sink") as sink:
        for rep, size, conc, kind in matrix:
            shift = rep % len(APPROACHES)  # rotate which approach goes first
            for approach in [*APPROACHES[shift:], *APPROACHES[:shift]]:
                if args.wait_quiet > 0:
                    wait_quiet(args.wait_quiet, window=1.0)
                cell = (approach, kind, size, conc)
                runs.append(run := {**run_one(sink, cell, expected[size][:conc], args), "rep": rep})
                tag = f"{approach}/{kind}/{size}MiB/x{conc}/rep{rep}"
                problems += [f"{tag}: {problem}" for problem in run["problems"]]
                done = " ".join(cells(run, *ROW[4:])) if "wall_s" in run else "FAILED"
                print(tag, done, "PROBLEMS" * bool(run["problems"]), flush=True)
    rows = aggregate(runs)
    bar_size, bar_conc = 64 if 64 in sizes else max(sizes), max(concurrency)
    report: dict[str, Any] = {
        "quick": args.quick,
        "machine": machine_line(machine()) + ".",
        "reps": reps,
        "env": {k: os.environ[k] for k in ENV if k in os.environ},
        "elapsed_s": time.monotonic() - started,
        "bar_size_mib": bar_size,
        "bar_concurrency": bar_conc,
        "verified_requests": sum(r.get("verified_requests", 0) for r in runs),
        "rows": list(rows.values()),
        "bars": bars(rows, bar_size, bar_conc),
        "problems": problems,
        "runs": runs,
    }
    name = "media-quick" if args.quick else "media"
    finish(args, name, markdown(report), report, indent=1)
    return failed(problems)


# -- through the proxy (`--proxy`) ---------------------------------------------------------------

PROXY_ARMS = {"plain": "plain-voxtral", "rust": "rust-voxtral"}
PROXY_BAR = 0.5
UPLOAD_MIB, UPLOADS = 16, 16


def wav(size: int, seed: int) -> bytes:
    """A 16 kHz mono 16-bit PCM WAV of exactly `size` bytes, random samples."""
    data_len = size - 44
    header = b"RIFF" + struct.pack("<I", 36 + data_len) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    return header + b"data" + struct.pack("<I", data_len) + random.Random(seed).randbytes(data_len)


async def upload(url: str, arm: str, files: list[bytes]) -> tuple[list[list[str]], float]:
    """The files uploaded side by side to `arm`'s model: each answer's problems, and the wall
    time. Every answer must carry `x-litellm-rust`, and `x-litellm-fastpath` on the rust arm
    only (LiteLLM's own route tags its answers too)."""
    import httpx

    from devtools.processes import MASTER_KEY

    limits = httpx.Limits(max_connections=len(files) + 4)
    client = httpx.AsyncClient(base_url=url, timeout=300, limits=limits, trust_env=False)

    async def one(data: bytes) -> list[str]:
        response = await client.post(
            "/v1/audio/transcriptions",
            headers={"Authorization": f"Bearer {MASTER_KEY}"},
            files={"file": ("a.wav", data, "audio/wav")},
            data={"model": PROXY_ARMS[arm]},
        )
        if response.status_code != 200:
            return [f"HTTP {response.status_code}: {response.text[:300]}"]
        problems = [] if response.json().get("text") == "ok" else [f"text {response.text[:100]}"]
        if response.headers.get("x-litellm-rust") != "true":
            problems.append("answered without x-litellm-rust")
        if (arm == "rust") != bool(response.headers.get("x-litellm-fastpath")):
            problems.append(f"answered {'without' if arm == 'rust' else 'with'} x-litellm-fastpath")
        return problems

    async with client:
        started = time.perf_counter()
        problems = await asyncio.gather(*(one(f) for f in files))
        return list(problems), time.perf_counter() - started


def proxy_arm(arm: str, sink: Any, files: list[bytes], expected: list[Any]) -> dict[str, Any]:
    """One burst of uploads through a fresh proxy (1 worker): the peak RSS of its process tree
    over its idle RSS after a warm-up upload (from the reset VmHWM, cross-checked with 20 ms
    samples), what it still holds 2 s later, its CPU, and the sink's view."""
    params = {"model": f"bedrock/{MODEL}", "aws_access_key_id": ACCESS_KEY, "api_base": sink.url}
    params |= {"aws_secret_access_key": SECRET_KEY, "aws_region_name": REGION}
    models = [
        {"model_name": PROXY_ARMS["plain"], "litellm_params": params},
        {"model_name": PROXY_ARMS["rust"], "litellm_params": {**params, "rust": True}},
    ]
    with start_proxy(models) as proxy:
        warm = asyncio.run(upload(proxy.url, arm, [wav(64 * 1024, 999)]))[0][0]
        time.sleep(1.0)
        pids = process_tree(proxy.pid)
        hwm_reset = reset_hwm(pids)
        idle = proc_status(pids)["VmRSS"] / MIB
        fetch_json(f"{sink.url}/reset", post=True)
        cpu0, sampler = cpu_seconds(pids), Sampler(proxy.pid, 0.02)
        sampler.start()
        answers, wall = asyncio.run(upload(proxy.url, arm, files))
        sampler.stop()
        pids = process_tree(proxy.pid)
        cpu, hwm = cpu_seconds(pids) - cpu0, proc_status(pids)["VmHWM"] / MIB
        time.sleep(2.0)
        after = proc_status(pids)["VmRSS"] / MIB
        sink_view = fetch_json(f"{sink.url}/results")
    problems = [f"warm-up: {p}" for p in warm]
    problems += [f"upload {i}: {p}" for i, found in enumerate(answers) for p in found]
    # LiteLLM's own route (the plain arm) builds its body its own way: only the rust arm's must
    # be the reference.
    sink_problems, matched = verify(sink_view["requests"], expected, bodies=arm == "rust")
    sampled = max(s["rss_mib"] for s in sampler.samples) - idle
    return {
        "arm": arm,
        "idle_rss_mib": idle,
        "increase_mib": hwm - idle if hwm_reset else sampled,
        "increase_sampled_mib": sampled,
        "retained_after_2s_mib": after - idle,
        "proxy_cpu_s": cpu,
        "wall_s": wall,
        "bodies_match": matched == len(expected),
        "sink_max_inflight": sink_view["max_inflight"],
        "problems": problems + [f"sink: {p}" for p in sink_problems],
    }


PROXY_HEAD = ["rep", "arm", "idle RSS MiB", "peak increase MiB", "sampled MiB"]
PROXY_HEAD += ["retained after 2 s MiB", "proxy CPU s", "wall s", "sink max in-flight"]
PROXY_ROW = ("rep", "arm", "idle_rss_mib:.0f", "increase_mib:.0f", "increase_sampled_mib:.0f")
PROXY_ROW += ("retained_after_2s_mib:.0f", "proxy_cpu_s:.2f", "wall_s:.2f", "sink_max_inflight")


def proxy(args: Any) -> int:
    reps = args.reps or (1 if args.quick else 2)
    files = [wav(UPLOAD_MIB * MIB, 7_000 + i) for i in range(UPLOADS)]
    expected = [body_reference(f) for f in files]
    runs: list[dict[str, Any]] = []
    with ServerProcess("devtools.media_sink") as sink:
        for rep in range(reps):
            for arm in PROXY_ARMS if rep % 2 == 0 else reversed(PROXY_ARMS):
                if args.wait_quiet > 0:
                    wait_quiet(args.wait_quiet)
                runs.append(run := {**proxy_arm(arm, sink, files, expected), "rep": rep})
                print(" ".join(cells(run, *PROXY_ROW)), len(run["problems"]), flush=True)
    keys = ("increase_mib", "increase_sampled_mib", "proxy_cpu_s", "wall_s")
    arms = {a: {k: median(r[k] for r in runs if r["arm"] == a) for k in keys} for a in PROXY_ARMS}
    ratio = arms["rust"]["increase_mib"] / max(arms["plain"]["increase_mib"], 1e-9)
    equal = all(r["bodies_match"] for r in runs if r["arm"] == "rust")
    problems = [f"rep {r['rep']} {r['arm']}: {p}" for r in runs for p in r["problems"]]
    summary = [
        [a, *cells(v, "increase_mib:.0f", "proxy_cpu_s:.2f", "wall_s:.2f")] for a, v in arms.items()
    ]
    markdown = "\n".join(
        [
            f"# Media through the proxy: {UPLOADS} concurrent {UPLOAD_MIB} MiB uploads",
            "",
            f"Generated by `benches/media.py --proxy`. {machine_line(machine())}.",
            "",
            f"{UPLOADS} concurrent `POST /v1/audio/transcriptions` (multipart, distinct "
            f"{UPLOAD_MIB} MiB WAV files) per arm; a fresh proxy (1 worker) per arm and "
            "repetition. *Increase* = peak RSS of the proxy's process tree (reset VmHWM) - idle "
            "RSS after one warm-up upload; *sampled*: the same from 20 ms samples; *retained* = "
            "RSS 2 s after the burst - idle. Method: benches/README.md (*Media memory*). Env: "
            f"`{json.dumps({k: os.environ[k] for k in ENV if k in os.environ})}`.",
            "",
            *table(PROXY_HEAD, [cells(r, *PROXY_ROW) for r in runs], "rl" + "r" * 7),
            "",
            "Medians over repetitions:",
            "",
            *table(["arm", "peak increase MiB", "proxy CPU s", "wall s"], summary),
            "",
            f"Bar: rust peak increase ≤ {PROXY_BAR}x plain: {ratio:.2f}x — "
            + ("**met**." if ratio <= PROXY_BAR else "**missed**."),
            f"The rust arm's upstream bodies against the reference Converse body of each file "
            f"(length, sha256): {'equal' if equal else '**different**'}.",
            *(["", "## Problems", "", *[f"- {p}" for p in problems]] if problems else []),
            "",
        ]
    )
    data = {"reps": reps, "arms": arms, "ratio": ratio, "problems": problems, "runs": runs}
    finish(args, "proxy_media", markdown, data, indent=1)
    return failed(problems)


def main() -> int:
    p = arg_parser(__doc__, "1/16 MiB, 1 repetition (also BENCH_QUICK=1)", "before each run")
    p.add_argument("--proxy", action="store_true", help="uploads through the proxy")
    p.add_argument("--sizes", type=int, nargs="+", help="MiB per input (default 1 16 64)")
    p.add_argument("--concurrency", type=int, nargs="+", help="default 1 16")
    p.add_argument("--reps", type=int, help="fresh processes per cell (3 full, 1 quick)")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one measurement (JSON)
    args = p.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(argparse.Namespace(**json.loads(args.worker)))))
        return 0
    return proxy(args) if args.proxy else parent(args)


if __name__ == "__main__":
    sys.exit(main())
