"""Media memory bench: a Bedrock Converse transcription body (16 x 64 MiB of audio) sent three ways.

Approaches (each sends byte-identical bodies to the same sink, `benches/media_sink.py`, which runs
in its own process, hashes every chunk and keeps nothing):

- `fastpath`: `_native.prepare_transcription(d, audio, "wav")` + `PreparedCall.start()` on an
  asyncio loop (what the proxy integration does). `audio` is the raw `bytes` (Rust encodes base64
  on the fly, once while hashing for SigV4 and once while sending) or an existing base64 `str`
  (sent as zero-copy slices).
- `buffered`: Python builds the whole body (`base64` + `json.dumps` + `.encode()`), Rust hashes,
  signs and sends it (`_native.prepare_converse_body(d, body).send_blocking()`, one thread per
  request).
- `python`: the same body, `botocore` SigV4 (`SigV4Auth` hashes it with hashlib) and
  `http.client`, one thread per request.
- `fastpath-blocking` (diagnostic, not run by default): `prepare_transcription(...).send_blocking()`
  from one Python thread per request.

Input kinds: `encoded` (each request's audio exists as a base64 `str`; python/buffered embed it in
the JSON, fastpath takes the str) and `raw` (`bytes`). Inputs are distinct per request, generated
from a seeded PRNG (so every fresh process makes the same data) and kept alive until the end.

One fresh worker process per measurement (approach x kind x size x concurrency x repetition):
it imports only what its approach needs (the extension is loaded without LiteLLM), creates its
inputs, sends one small warm-up request (runtime, pool, imports), then `gc.collect()` +
`malloc_trim(0)`, records VmRSS ("RSS after setup") and resets the kernel's RSS high-water
mark (`/proc/self/clear_refs` = 5), so the reported peak (VmHWM; `ru_maxrss` is kept in the JSON
but also counts the mm replaced at exec, i.e. the parent's RSS with vfork) is the peak of the
sending phase, not of input creation. The sending phase (body building
included) is timed for wall time, CPU seconds (`time.process_time()`, all threads) and wire
MiB/s (body bytes / wall). The sink's per-request (length, sha256) must equal a reference
computed independently by the parent (prefix + streamed base64 + suffix), for every approach:
any mismatch, error, chunked upload or unsigned request fails the run (exit 1).

    python benches/media.py            # full: 1/16/64 MiB x concurrency 1/16, 3 repetitions
    python benches/media.py --quick    # CI smoke: 1/16 MiB, 1 repetition (BENCH_QUICK=1)

Bars (64 MiB x 16, same run; quick mode checks them at 16 MiB x 16 for information):
fastpath peak RSS <= RSS after setup + 64 MiB (encoded and raw); fastpath wire MiB/s >= 1.5x
python (raw) and >= 1.2x (encoded); fastpath CPU seconds <= 0.7x python (both).
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parent
RESULTS = BENCHES / "results"
MODEL = "mistral.voxtral-mini-3b-2507"
REGION = "us-east-1"
ACCESS_KEY, SECRET_KEY = "AKID", "secret"
INSTRUCTION = "Transcribe the audio. Respond with only the transcript."
APPROACHES = ("fastpath", "buffered", "python")
ALL_APPROACHES = (*APPROACHES, "fastpath-blocking")
KINDS = ("encoded", "raw")
SIZES_FULL = (1, 16, 64)
SIZES_QUICK = (1, 16)
CONCURRENCY = (1, 16)
MIB = 1 << 20
WARMUP_BYTES = 3000
MEMORY_BAR_MIB = 64.0
WIRE_BARS = {"raw": 1.5, "encoded": 1.2}
CPU_BAR = 0.7


# -- the body --------------------------------------------------------------------------------


def converse_doc(b64: str) -> dict[str, Any]:
    """Exactly the document `_native.prepare_transcription(d, audio, "wav")` sends."""
    return {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"audio": {"format": "wav", "source": {"bytes": b64}}},
                    {"text": INSTRUCTION},
                ],
            }
        ],
        "inferenceConfig": {"maxTokens": 4096},
    }


def build_body(item: str | bytes) -> bytes:
    """What a Python caller does: base64 (raw input) + json.dumps + encode."""
    b64 = item if isinstance(item, str) else base64.b64encode(item).decode("ascii")
    return json.dumps(converse_doc(b64), separators=(",", ":")).encode()


def input_seed(size_mib: int, index: int) -> int:
    return size_mib * 1_000 + index


def raw_input(size_mib: int, index: int) -> bytes:
    return random.Random(input_seed(size_mib, index)).randbytes(size_mib * MIB)


def reference(size_mib: int, index: int) -> tuple[int, str]:
    """(length, sha256) of the body for this input, computed without building the body."""
    return body_reference(raw_input(size_mib, index))


def body_reference(raw: bytes) -> tuple[int, str]:
    """(length, sha256) of the Converse body for raw audio: prefix + streamed base64 + suffix."""
    template = json.dumps(converse_doc("\x00"), separators=(",", ":"))
    prefix, suffix = (part.encode() for part in template.split('"\\u0000"'))
    prefix += b'"'
    suffix = b'"' + suffix
    digest = hashlib.sha256(prefix)
    piece = 3 * MIB  # a multiple of 3: pieces concatenate to the one-shot encoding
    length = len(prefix) + len(suffix)
    for offset in range(0, len(raw), piece):
        encoded = base64.b64encode(raw[offset : offset + piece])
        digest.update(encoded)
        length += len(encoded)
    digest.update(suffix)
    return length, digest.hexdigest()


# -- worker: one measurement in a fresh process ---------------------------------------------


def load_native() -> Any:
    """The extension module; the package import is lazy, so this does not load LiteLLM."""
    from litellm_fastpath import _native

    return _native


def proc_status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            out[key] = int(value.split()[0])
    return out


def malloc_trim() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def reset_peak() -> bool:
    """Resets this process's RSS high-water mark (VmHWM, ru_maxrss) to the current RSS."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class Sampler(threading.Thread):
    """VmRSS and thread count every `interval` s, for the timeline and the peak's timing."""

    def __init__(self, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.stop_event = threading.Event()
        self.samples: list[tuple[float, int, int]] = []
        self.t0 = time.perf_counter()

    def run(self) -> None:
        while not self.stop_event.is_set():
            status = proc_status()
            self.samples.append((time.perf_counter() - self.t0, status["VmRSS"], status["Threads"]))
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def check_transcription(result: Any) -> None:
    body, _headers = result
    if body != {"text": "ok"}:
        raise RuntimeError(f"unexpected transcription result {body!r}")


class Senders:
    """The per-approach send functions (one request each) of a worker."""

    def __init__(self, approach: str, sink_url: str) -> None:
        self.approach = approach
        self.sink_url = sink_url
        host_port = sink_url.split("://", 1)[1]
        self.host, port = host_port.rsplit(":", 1)
        self.port = int(port)
        self.path = f"/model/{MODEL}/converse"
        self.native: Any = None
        self.deployment: Any = None
        if approach != "python":
            self.native = load_native()
            self.deployment = self.native.Deployment(
                "bedrock",
                MODEL,
                aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY,
                aws_region=REGION,
                aws_endpoint=sink_url,
                timeout=600.0,
            )
        else:
            import http.client

            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest
            from botocore.credentials import Credentials

            self.http_client = http.client
            self.sigv4 = SigV4Auth
            self.aws_request = AWSRequest
            self.credentials = Credentials(ACCESS_KEY, SECRET_KEY)

    # One request, blocking (threads) -------------------------------------------------------

    def send_one(self, item: str | bytes) -> None:
        if self.approach == "python":
            self._python(item)
        elif self.approach == "buffered":
            call = self.native.prepare_converse_body(self.deployment, build_body(item))
            check_transcription(call.send_blocking())
        elif self.approach == "fastpath-blocking":
            call = self.native.prepare_transcription(self.deployment, item, "wav")
            check_transcription(call.send_blocking())
        else:
            raise ValueError(self.approach)

    def _python(self, item: str | bytes) -> None:
        body = build_body(item)
        request = self.aws_request(
            method="POST",
            url=f"{self.sink_url}{self.path}",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        self.sigv4(self.credentials, "bedrock", REGION).add_auth(request)
        headers = dict(request.headers.items())
        del request
        conn = self.http_client.HTTPConnection(self.host, self.port, timeout=600)
        try:
            conn.request("POST", self.path, body=body, headers=headers)
            del body
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"sink answered {response.status}: {data[:200]!r}")
        text = json.loads(data)["output"]["message"]["content"][0]["text"]
        if text != "ok":
            raise RuntimeError(f"unexpected sink answer {data[:200]!r}")

    # All requests at once -------------------------------------------------------------------

    def run_async(self, inputs: list[Any]) -> None:
        """fastpath: every call started on one asyncio loop, as the proxy integration does."""
        import asyncio

        from litellm_fastpath.bridge import await_call

        async def main() -> None:
            calls = [
                await_call(self.native.prepare_transcription(self.deployment, item, "wav"))
                for item in inputs
            ]
            for result in await asyncio.gather(*calls):
                check_transcription(result)

        asyncio.run(main())


class ThreadBatch:
    """One started-but-waiting thread per input; `go()` releases them all and joins."""

    def __init__(self, send: Any, inputs: list[Any]) -> None:
        self.start_event = threading.Event()
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._target, args=(send, inputs, i), daemon=True)
            for i in range(len(inputs))
        ]
        for thread in self.threads:
            thread.start()

    def _target(self, send: Any, inputs: list[Any], index: int) -> None:
        self.start_event.wait()
        try:
            send(inputs[index])
        except BaseException as err:  # reported to the parent, which fails the run
            self.errors.append(f"request {index}: {err!r}")

    def go(self) -> None:
        self.start_event.set()
        for thread in self.threads:
            thread.join()
        if self.errors:
            raise RuntimeError("; ".join(self.errors))


def make_inputs(kind: str, size_mib: int, concurrency: int) -> list[Any]:
    inputs: list[Any] = []
    for index in range(concurrency):
        raw = raw_input(size_mib, index)
        if kind == "encoded":
            inputs.append(base64.b64encode(raw).decode("ascii"))
            del raw
        else:
            inputs.append(raw)
    return inputs


def worker(args: argparse.Namespace) -> dict[str, Any]:
    cpu_start = time.process_time()
    approach, kind = args.approach, args.kind
    senders = Senders(approach, args.sink_url)
    inputs = make_inputs(kind, args.size_mib, args.concurrency)
    # Warm-up with a tiny input of the same kind: runtime threads, pool, lazy imports.
    warm = random.Random(0).randbytes(WARMUP_BYTES)
    warm_input: Any = base64.b64encode(warm).decode("ascii") if kind == "encoded" else warm
    if approach == "fastpath":
        senders.run_async([warm_input])
    else:
        senders.send_one(warm_input)
    del warm, warm_input
    from media_sink import reset as reset_sink

    reset_sink(args.sink_url)

    batch = None if approach == "fastpath" else ThreadBatch(senders.send_one, inputs)
    gc.collect()
    malloc_trim()
    setup = proc_status()
    peak_reset = reset_peak()
    sampler = Sampler()
    sampler.start()
    busy0, sink0 = system_busy_seconds(), cpu_seconds_of(args.sink_pid)
    cpu0, t0 = time.process_time(), time.perf_counter()
    if batch is None:
        senders.run_async(inputs)
    else:
        batch.go()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    sink_cpu = cpu_seconds_of(args.sink_pid) - sink0
    busy = system_busy_seconds() - busy0
    sampler.stop()
    end = proc_status()
    maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_at = max(sampler.samples, key=lambda s: s[1]) if sampler.samples else (0.0, 0, 0)
    alive = sum(len(x) for x in inputs)  # keeps every input alive until here
    return {
        "approach": approach,
        "kind": kind,
        "size_mib": args.size_mib,
        "concurrency": args.concurrency,
        "input_bytes": alive,
        "rss_setup_mib": setup["VmRSS"] / 1024,
        # VmHWM: this process's own high-water mark since the reset. ru_maxrss is also
        # max()ed with the RSS of the mm replaced at exec (the parent's, with vfork), so it
        # over-reports small workers; it is kept for reference.
        "peak_rss_mib": end["VmHWM"] / 1024,
        "ru_maxrss_mib": maxrss_kib / 1024,
        "rss_end_mib": end["VmRSS"] / 1024,
        "peak_reset": peak_reset,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_total_s": time.process_time() - cpu_start,
        "sink_cpu_s": sink_cpu,
        # CPU used by every other process on the machine during the sending phase (/proc/stat
        # busy time minus this worker and the sink); well above 0 means a shared, noisy box.
        "foreign_cores": max(0.0, busy - cpu - sink_cpu) / wall,
        "threads_setup": setup["Threads"],
        "threads_max": max((s[2] for s in sampler.samples), default=end["Threads"]),
        "sampled_peak_mib": peak_at[1] / 1024,
        "sampled_peak_at_s": peak_at[0],
        "timeline": [(round(t, 3), round(rss / 1024, 1)) for t, rss, _ in sampler.samples[::5]],
        "env": {
            k: os.environ[k]
            for k in ("LITELLM_FASTPATH_THREADS", "MALLOC_ARENA_MAX")
            if k in os.environ
        },
    }


# -- parent: runs the matrix, verifies, reports ----------------------------------------------


def cpu_seconds_of(pid: int) -> float:
    if pid <= 0:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def system_busy_seconds() -> float:
    """CPU seconds all processes on the machine have spent busy (from /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_quiet(max_wait: float, threshold: float = 0.3, window: float = 1.0) -> float:
    """Waits (at most `max_wait` s) until other processes use < `threshold` cores."""
    deadline = time.monotonic() + max_wait
    while True:
        b0, t0 = system_busy_seconds(), time.monotonic()
        time.sleep(window)
        busy = (system_busy_seconds() - b0) / (time.monotonic() - t0)
        if busy < threshold or time.monotonic() >= deadline:
            return busy


def verify(records: list[dict[str, Any]], expected: list[tuple[int, str]]) -> tuple[list[str], int]:
    """Problems with the sink's view of one measurement, and how many requests matched."""
    problems = []
    for record in records:
        if record.get("error"):
            problems.append(f"sink: {record['error']}")
        if record.get("chunked"):
            problems.append("chunked transfer encoding")
        if not record.get("sigv4"):
            problems.append("request without SigV4 headers")
        if record.get("received") != record.get("content_length"):
            problems.append(
                f"received {record.get('received')} != Content-Length "
                f"{record.get('content_length')}"
            )
        if record.get("content_type") != "application/json":
            problems.append(f"content-type {record.get('content_type')!r}")
    got = sorted((r.get("received"), r.get("sha256")) for r in records)
    want = sorted(expected)
    if got != want:
        problems.append(
            f"bodies differ from the reference: got {len(got)} "
            f"(length, sha256) pairs, {len(set(got) & set(want))} of {len(want)} match"
        )
    return sorted(set(problems)), len(got) if got == want else 0


def run_one(
    sink: Any,
    approach: str,
    kind: str,
    size_mib: int,
    concurrency: int,
    expected: list[tuple[int, str]],
    env: dict[str, str],
    timeout: float,
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--approach",
        approach,
        "--kind",
        kind,
        "--size-mib",
        str(size_mib),
        "--concurrency",
        str(concurrency),
        "--sink-url",
        sink.url,
        "--sink-pid",
        str(sink.pid),
    ]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **env},
            cwd=str(BENCHES),
        )
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        stdout, stderr, code = str(err.stdout or ""), str(err.stderr or ""), -1
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if code != 0 or not lines:
        return {
            "approach": approach,
            "kind": kind,
            "size_mib": size_mib,
            "concurrency": concurrency,
            "problems": [f"worker exited {code}: {stderr.strip()[-1500:]}"],
        }
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    sink_view = sink.results()
    records = sink_view["requests"]
    problems, matched = verify(records, expected)
    body_bytes = sum(r.get("received") or 0 for r in records)
    result.update(
        {
            "body_bytes": body_bytes,
            "wire_mib_s": body_bytes / MIB / result["wall_s"],
            "peak_minus_setup_mib": result["peak_rss_mib"] - result["rss_setup_mib"],
            "sink_max_inflight": sink_view["max_inflight"],
            "verified_requests": matched,
            "problems": problems,
        }
    )
    return result


def median(values: list[float]) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def aggregate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for run in runs:
        if run.get("problems") and "wall_s" not in run:
            continue
        key = (run["approach"], run["kind"], run["size_mib"], run["concurrency"])
        cells.setdefault(key, []).append(run)
    rows = []
    for (approach, kind, size, conc), group in cells.items():
        rows.append(
            {
                "approach": approach,
                "kind": kind,
                "size_mib": size,
                "concurrency": conc,
                "reps": len(group),
                "rss_setup_mib": median([r["rss_setup_mib"] for r in group]),
                "peak_rss_mib": median([r["peak_rss_mib"] for r in group]),
                "peak_minus_setup_mib": median([r["peak_minus_setup_mib"] for r in group]),
                "peak_minus_setup_max_mib": max(r["peak_minus_setup_mib"] for r in group),
                "cpu_s": median([r["cpu_s"] for r in group]),
                "cpu_total_s": median([r["cpu_total_s"] for r in group]),
                "wall_s": median([r["wall_s"] for r in group]),
                "wire_mib_s": median([r["wire_mib_s"] for r in group]),
                "sink_cpu_s": median([r["sink_cpu_s"] for r in group]),
                "foreign_cores": max(r["foreign_cores"] for r in group),
                "sink_max_inflight": min(r["sink_max_inflight"] for r in group),
                "threads_max": max(r["threads_max"] for r in group),
            }
        )
    order = {a: i for i, a in enumerate(ALL_APPROACHES)}
    rows.sort(key=lambda r: (r["size_mib"], r["concurrency"], r["kind"], order[r["approach"]]))
    return rows


def find(rows: list[dict[str, Any]], approach: str, kind: str, size: int, conc: int) -> Any:
    for row in rows:
        if (row["approach"], row["kind"], row["size_mib"], row["concurrency"]) == (
            approach,
            kind,
            size,
            conc,
        ):
            return row
    return None


def ratios(rows: list[dict[str, Any]], size: int, conc: int) -> list[dict[str, Any]]:
    out = []
    for kind in KINDS:
        base = find(rows, "python", kind, size, conc)
        if base is None:
            continue
        for approach in ALL_APPROACHES:
            row = find(rows, approach, kind, size, conc)
            if row is None or approach == "python":
                continue
            out.append(
                {
                    "approach": approach,
                    "kind": kind,
                    "peak_minus_setup": row["peak_minus_setup_mib"]
                    / max(base["peak_minus_setup_mib"], 1e-9),
                    "cpu": row["cpu_s"] / base["cpu_s"],
                    "wire": row["wire_mib_s"] / base["wire_mib_s"],
                }
            )
    return out


def bars(rows: list[dict[str, Any]], size: int, conc: int) -> list[dict[str, Any]]:
    out = []
    for kind in KINDS:
        fast = find(rows, "fastpath", kind, size, conc)
        base = find(rows, "python", kind, size, conc)
        if fast is None or base is None:
            continue
        worst = fast["peak_minus_setup_max_mib"]
        out.append(
            {
                "bar": f"fastpath peak RSS <= RSS after setup + {MEMORY_BAR_MIB:.0f} MiB ({kind})",
                "value": f"peak - setup {worst:.1f} MiB (worst of {fast['reps']})",
                "met": worst <= MEMORY_BAR_MIB,
            }
        )
        wire = fast["wire_mib_s"] / base["wire_mib_s"]
        out.append(
            {
                "bar": f"fastpath wire MiB/s >= {WIRE_BARS[kind]}x python ({kind})",
                "value": f"{fast['wire_mib_s']:.0f} vs {base['wire_mib_s']:.0f} MiB/s "
                f"= {wire:.2f}x",
                "met": wire >= WIRE_BARS[kind],
            }
        )
        cpu = fast["cpu_s"] / base["cpu_s"]
        out.append(
            {
                "bar": f"fastpath CPU s <= {CPU_BAR}x python ({kind})",
                "value": f"{fast['cpu_s']:.2f} vs {base['cpu_s']:.2f} s = {cpu:.2f}x",
                "met": cpu <= CPU_BAR,
            }
        )
    return out


def markdown(report: dict[str, Any]) -> str:
    rows, size, conc = report["rows"], report["bar_size_mib"], report["bar_concurrency"]
    lines = [
        "# Media memory: Bedrock transcription body, fastpath vs buffered vs Python",
        "",
        f"Generated by `benches/media.py{' --quick' if report['quick'] else ''}`. "
        + report["machine"],
        "",
        f"One fresh worker process per measurement, {report['reps']} repetition(s) per cell "
        "(medians; the memory bar uses the worst repetition). Sink in its own process "
        "(`benches/media_sink.py`), hashing each chunk. *RSS after setup* is measured after the "
        "inputs exist (kept alive to the end), a warm-up request, `gc.collect()` and "
        "`malloc_trim(0)`; the RSS high-water mark is then reset (`/proc/self/clear_refs`), so "
        "*peak RSS* (VmHWM) is the peak of the sending phase (`ru_maxrss`, in the JSON, also "
        "counts the parent's RSS inherited at exec). CPU s = `time.process_time()` over the "
        "sending phase (body building, hashing, sending; all threads). "
        "Wire MiB/s = body bytes / wall time. *Foreign cores*: CPU used by other processes "
        "during the sending phase (worst repetition); well above 0 = noisy shared machine.",
        "",
        f"Worker env: `{json.dumps(report['worker_env'])}`. Verified: "
        f"{report['verified_requests']} requests, every (length, sha256) equal to the "
        "independently computed reference body"
        + (" — **FAILED**, see problems below." if report["problems"] else "."),
        "",
        "| approach | kind | size MiB | concurrency | RSS after setup MiB | peak RSS MiB "
        "| peak - setup MiB | CPU s | wire MiB/s | wall s | sink CPU s | sink max in-flight "
        "| foreign cores |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['approach']} | {r['kind']} | {r['size_mib']} | {r['concurrency']} "
            f"| {r['rss_setup_mib']:.0f} | {r['peak_rss_mib']:.0f} "
            f"| {r['peak_minus_setup_mib']:.1f} | {r['cpu_s']:.2f} | {r['wire_mib_s']:.0f} "
            f"| {r['wall_s']:.2f} | {r['sink_cpu_s']:.2f} | {r['sink_max_inflight']} "
            f"| {r['foreign_cores']:.2f} |"
        )
    lines += [
        "",
        f"## {size} MiB x {conc}: ratios to python (same run)",
        "",
        "| approach | kind | peak - setup | CPU s | wire MiB/s |",
        "|---|---|---:|---:|---:|",
    ]
    for r in report["ratios"]:
        lines.append(
            f"| {r['approach']}/python | {r['kind']} | {r['peak_minus_setup']:.3f} "
            f"| {r['cpu']:.2f} | {r['wire']:.2f} |"
        )
    lines += ["", f"## Bars ({size} MiB x {conc})", "", "| bar | measured | met |", "|---|---|---|"]
    for b in report["bars"]:
        lines.append(f"| {b['bar']} | {b['value']} | {'yes' if b['met'] else '**no**'} |")
    if report["problems"]:
        lines += ["", "## Problems", ""]
        lines += [f"- {p}" for p in report["problems"]]
    lines += [
        "",
        "Raw per-run numbers (every repetition, RSS timeline every ~0.1 s, thread counts, sink "
        "CPU) are in `media.json`; the plot is `media.png`.",
        "",
    ]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return False
    rows, size, conc = report["rows"], report["bar_size_mib"], report["bar_concurrency"]
    approaches = [a for a in ALL_APPROACHES if any(r["approach"] == a for r in rows)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    metrics = [
        ("peak_minus_setup_mib", "peak RSS - RSS after setup (MiB)", "%.0f"),
        ("wire_mib_s", "wire MiB/s", "%.0f"),
        ("cpu_s", "CPU seconds (sending phase)", "%.2f"),
    ]
    width = 0.8 / max(len(approaches), 1)
    for ax, (key, label, label_fmt) in zip(axes, metrics, strict=True):
        for i, approach in enumerate(approaches):
            values = []
            for kind in KINDS:
                row = find(rows, approach, kind, size, conc)
                values.append(row[key] if row else 0.0)
            xs = [k + (i - (len(approaches) - 1) / 2) * width for k in range(len(KINDS))]
            bars_ = ax.bar(xs, values, width, label=approach)
            ax.bar_label(bars_, fmt=label_fmt, fontsize=8)
        ax.set_xticks(range(len(KINDS)), KINDS)
        ax.set_title(label, fontsize=10)
        if key == "peak_minus_setup_mib":
            ax.axhline(MEMORY_BAR_MIB, color="red", linestyle="--", linewidth=1)
            ax.text(-0.45, MEMORY_BAR_MIB * 1.05, "bar: 64 MiB", color="red", fontsize=8)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Bedrock transcription body, {size} MiB x {conc} concurrent, "
        f"fresh process per measurement (medians of {report['reps']})",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def machine_line() -> str:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    try:
        from importlib.metadata import version

        versions = f"litellm-fastpath {version('litellm-fastpath')}"
    except Exception:
        versions = ""
    return (
        f"Machine: nproc={os.cpu_count()}, CPU `{cpu}`, Python {sys.version.split()[0]}, "
        f"{versions}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}."
    )


def parent(args: argparse.Namespace) -> int:
    from media_sink import SinkProcess

    sizes = args.sizes or (SIZES_QUICK if args.quick else SIZES_FULL)
    concurrency = args.concurrency or CONCURRENCY
    approaches = args.approaches or APPROACHES
    kinds = args.kinds or KINDS
    reps = args.reps or (1 if args.quick else 3)
    env = dict(item.split("=", 1) for item in args.worker_env)
    top = max(concurrency)
    expected: dict[int, list[tuple[int, str]]] = {}
    started = time.monotonic()
    for size in sizes:
        expected[size] = [reference(size, i) for i in range(top)]
    print(f"references ready in {time.monotonic() - started:.1f}s", flush=True)
    runs: list[dict[str, Any]] = []
    problems: list[str] = []
    with SinkProcess() as sink:
        for rep in range(reps):
            for size in sizes:
                for conc in concurrency:
                    for kind in kinds:
                        shift = rep % len(approaches)
                        for approach in [*approaches[shift:], *approaches[:shift]]:
                            if args.wait_quiet > 0:
                                wait_quiet(args.wait_quiet)
                            run = run_one(
                                sink,
                                approach,
                                kind,
                                size,
                                conc,
                                expected[size][:conc],
                                env,
                                args.timeout,
                            )
                            run["rep"] = rep
                            runs.append(run)
                            tag = f"{approach}/{kind}/{size}MiB/x{conc}/rep{rep}"
                            for problem in run["problems"]:
                                problems.append(f"{tag}: {problem}")
                            if "wall_s" in run:
                                print(
                                    f"{tag:34s} setup {run['rss_setup_mib']:7.0f} MiB  "
                                    f"peak-setup {run['peak_minus_setup_mib']:7.1f} MiB  "
                                    f"cpu {run['cpu_s']:6.2f}s  wire "
                                    f"{run['wire_mib_s']:6.0f} MiB/s  "
                                    f"inflight {run['sink_max_inflight']:2d}  "
                                    f"foreign {run['foreign_cores']:.2f}"
                                    + ("  PROBLEMS" if run["problems"] else ""),
                                    flush=True,
                                )
                            else:
                                print(f"{tag}: FAILED {run['problems']}", flush=True)
    rows = aggregate(runs)
    bar_size = 64 if 64 in sizes else max(sizes)
    bar_conc = max(concurrency)
    report: dict[str, Any] = {
        "quick": args.quick,
        "machine": machine_line(),
        "reps": reps,
        "worker_env": env,
        "elapsed_s": time.monotonic() - started,
        "bar_size_mib": bar_size,
        "bar_concurrency": bar_conc,
        "verified_requests": sum(r.get("verified_requests", 0) for r in runs),
        "rows": rows,
        "ratios": ratios(rows, bar_size, bar_conc),
        "bars": bars(rows, bar_size, bar_conc),
        "problems": problems,
        "runs": runs,
    }
    text = markdown(report)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        name = args.out or ("media-quick" if args.quick else "media")
        (RESULTS / f"{name}.md").write_text(text)
        (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
        plot(report, RESULTS / f"{name}.png")
        print(f"wrote {RESULTS / name}.{{md,json,png}}")
    if problems:
        print(f"FAILED: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", default=_env_flag("BENCH_QUICK"))
    parser.add_argument("--sizes", type=int, nargs="+", help="MiB per input (default 1 16 64)")
    parser.add_argument("--concurrency", type=int, nargs="+", help="default 1 16")
    parser.add_argument("--approaches", nargs="+", choices=ALL_APPROACHES)
    parser.add_argument("--kinds", nargs="+", choices=KINDS)
    parser.add_argument("--reps", type=int, help="fresh processes per cell (3 full, 1 quick)")
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="K=V",
        help="extra env for workers, e.g. LITELLM_FASTPATH_THREADS=4 or MALLOC_ARENA_MAX=2",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per worker process (s)")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=float(os.environ.get("BENCH_WAIT_QUIET", "0") or 0),
        metavar="S",
        help="before each measurement, wait up to S s for the machine to be idle",
    )
    parser.add_argument("--out", help="results name under benches/results (default media)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    # Internal: one measurement.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--approach", choices=ALL_APPROACHES, help=argparse.SUPPRESS)
    parser.add_argument("--kind", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--size-mib", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sink-url", help=argparse.SUPPRESS)
    parser.add_argument("--sink-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.concurrency = args.concurrency[0]
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return 0
    return parent(args)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


if __name__ == "__main__":
    sys.exit(main())
