"""Open-loop HTTP/1.1 load generator (asyncio + uvloop, raw keep-alive connections); one JSON
object on stdout.

Open loop (default): request *i* is scheduled at ``t0 + i / rate`` whatever happened to the
earlier ones, and its latency runs from that *scheduled* time to the last byte of the response,
so queueing inside the generator counts against the server (coordinated-omission correction).
Connections come from a pool that grows up to ``--max-conns``; a request not complete
``--timeout`` s after its scheduled time is an error. Bounded: at most ``rate * duration``
requests, then a drain of at most ``--timeout`` s. `_common.run_loadgen` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import resource
import sys
import time
from typing import Any
from urllib.parse import urlsplit

MAX_REQUESTS = 2_000_000  # hard bound on rate * duration
MAX_DURATION_S = 600.0
Response = tuple[int, bytes, bool]  # status, lowercased head, keep-alive


class HttpError(Exception):
    """An HTTP-level failure; its argument is the kind of error counted."""


def parse_response(buf: bytearray) -> tuple[Response, int] | None:
    """One complete response at the start of `buf` and its length in bytes, or None if partial."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buf[:end]).lower()
    try:
        status = int(head[9:12])
    except ValueError as err:
        raise HttpError("bad_status_line") from err
    pos = end + 4
    response = (status, head, b"\r\nconnection: close" not in head)
    idx = head.find(b"\r\ncontent-length:")
    if idx >= 0:
        eol = head.find(b"\r\n", idx + 2)
        pos += int(head[idx + 17 : eol if eol >= 0 else len(head)])
        return (response, pos) if len(buf) >= pos else None
    if b"\r\ntransfer-encoding: chunked" not in head:
        if status in (204, 304) or 100 <= status < 200:
            return response, pos
        raise HttpError("no_length")  # read-until-close bodies are not supported
    while True:  # chunks, then trailer fields up to an empty line
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip() or b"0", 16)
        pos = eol + 2 + size + (2 if size else 0)
        if size == 0:
            while (eol := buf.find(b"\r\n", pos)) > pos:
                pos = eol + 2
            return (response, eol + 2) if eol == pos else None
        if len(buf) < pos:
            return None


class Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[Response] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:
            parsed = parse_response(self.buf)
        except (HttpError, ValueError) as err:
            waiter.set_exception(err if isinstance(err, HttpError) else HttpError("parse"))
            return
        if parsed is not None:
            del self.buf[: parsed[1]]
            self.waiter = None
            waiter.set_result(parsed[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(HttpError("connection_lost"))

    def send(self, data: bytes) -> asyncio.Future[Response]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.buf.clear()
        self.transport.write(data)
        return self.waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Keep-alive connections opened on demand, at most `max_conns` (one request each at a
    time), reused first in, first out: requests spread over every open connection (and so over
    every worker process that accepted one)."""

    def __init__(self, host: str, port: int, max_conns: int) -> None:
        self.host, self.port = host, port
        self.slots = asyncio.Semaphore(max_conns)
        self.idle: collections.deque[Conn] = collections.deque()
        self.open = self.peak_open = 0

    async def acquire(self) -> Conn:
        await self.slots.acquire()
        while self.idle:
            conn = self.idle.popleft()
            if not conn.closed:
                return conn
            self.open -= 1
        try:
            loop = asyncio.get_running_loop()
            conn = (await loop.create_connection(Conn, self.host, self.port))[1]
        except BaseException:
            self.slots.release()
            raise
        self.open += 1
        self.peak_open = max(self.peak_open, self.open)
        return conn

    def release(self, conn: Conn, reusable: bool) -> None:
        if reusable and not conn.closed:
            self.idle.append(conn)
        else:
            conn.close()
            self.open -= 1
        self.slots.release()


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        url = urlsplit(args.url)
        if url.scheme != "http" or url.hostname not in ("127.0.0.1", "localhost", "::1"):
            sys.exit("loadgen targets plain http on loopback only")
        host, port = url.hostname, url.port or 80
        body, path = args.body.encode(), (url.path or "/") + (f"?{url.query}" if url.query else "")
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
        lines.append(f"Content-Length: {len(body)}")
        self.request = ("\r\n".join(lines + args.header) + "\r\n\r\n").encode() + body
        self.expect = [
            f"\r\n{n.strip().lower()}: {v.strip().lower()}".encode()
            for n, _, v in (spec.partition(":") for spec in args.expect_header)
        ]
        self.forbid = [f"\r\n{name.strip().lower()}:".encode() for name in args.forbid_header]
        self.timeout = args.timeout
        self.pool, self.max_conns = Pool(host, port, args.max_conns), args.max_conns
        self.latencies: list[float] = []  # seconds, successful responses only
        self.send_lag: list[float] = []  # seconds between scheduled time and write
        self.errors: collections.Counter[str] = collections.Counter()
        self.last_done = 0.0
        self.first_error: str | None = None

    def _error(self, kind: str, detail: str = "") -> None:
        self.errors[kind] += 1
        if self.first_error is None:
            self.first_error = f"{kind} {detail}".strip()

    async def one(self, scheduled: float) -> None:
        remaining = max(0.001, scheduled + self.timeout - time.perf_counter())
        try:
            await asyncio.wait_for(self._exchange(scheduled), remaining)
        except TimeoutError:
            self._error("timeout")
        except HttpError as err:
            self._error(err.args[0])
        except OSError as err:
            self._error("os_error", repr(err))

    async def _exchange(self, scheduled: float) -> None:
        conn = await self.pool.acquire()
        reusable = False
        try:
            self.send_lag.append(time.perf_counter() - scheduled)
            status, head, reusable = await conn.send(self.request)
            done = time.perf_counter()
        finally:
            self.pool.release(conn, reusable)
        self.last_done = max(self.last_done, done)
        missing = [n for n in self.expect if n not in head]
        forbidden = [n for n in self.forbid if n in head]
        if not 200 <= status < 300:
            self._error(f"http_{status}")
        elif missing or forbidden:
            kind = "missing_header" if missing else "forbidden_header"
            self._error(kind, (missing or forbidden)[0].decode().strip())
        else:
            self.latencies.append(done - scheduled)

    async def warm(self, n: int, conns: int) -> None:
        """n unrecorded requests, `conns` at a time, to open connections and warm the server."""
        n = max(n, conns)
        width = max(1, min(n, conns or 8, self.max_conns))
        for start in range(0, n, width):
            now = time.perf_counter()
            await asyncio.gather(*(self.one(now) for _ in range(min(width, n - start))))
        self.latencies, self.send_lag = [], []
        self.errors = collections.Counter()

    async def open_loop(self, rate: float, duration: float) -> dict[str, Any]:
        n = min(MAX_REQUESTS, max(1, round(rate * duration)))
        tasks: list[asyncio.Task[None]] = []
        t0 = time.perf_counter() + 0.02
        for i in range(n):
            target = t0 + i / rate
            delay = target - time.perf_counter()
            if delay > 0.0005:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.one(target)))
        sent_end = time.perf_counter()
        # Every task carries its own deadline (scheduled + timeout), so this is bounded.
        await asyncio.wait(tasks, timeout=self.timeout + 5)
        for task in tasks:
            if not task.done():
                task.cancel()
                self._error("unfinished")
        window = max(self.last_done, t0 + n / rate) - t0
        return dict(mode="open", rate=rate, scheduled=n, sched_s=sent_end - t0, window_s=window)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    run = Run(args)
    if args.warmup or args.conns:
        await run.warm(args.warmup, args.conns)
    ru0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    meta = await run.open_loop(args.rate, args.duration)
    wall = time.perf_counter() - w0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    for conn in run.pool.idle:
        conn.close()
    lat, lag = sorted(run.latencies), sorted(run.send_lag)

    def pct(values: list[float], q: float) -> float | None:
        rank = math.ceil(q / 100 * len(values))
        return values[min(len(values), max(1, rank)) - 1] * 1000 if values else None

    ok, window = len(lat), meta["window_s"]
    return {
        **meta,
        "ok": ok,
        "errors": sum(run.errors.values()),
        "error_kinds": dict(run.errors),
        "first_error": run.first_error,
        "achieved_rps": ok / window if window > 0 else 0.0,
        **{f"p{q}_ms": pct(lat, q) for q in (50, 99)},
        "send_lag_p99_ms": pct(lag, 99),
        "conns_peak": run.pool.peak_open,
        "gen_cpu_s": cpu,
        "gen_wall_s": wall,
        "gen_cpu_util": cpu / wall if wall > 0 else None,
        "latencies_ms": [round(v * 1000, 4) for v in run.latencies],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="open-loop HTTP/1.1 load generator (loopback only)")
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, default=100.0, help="requests per second (open loop)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds of scheduled sends")
    p.add_argument("--body", required=True, help="the JSON body POSTed")
    p.add_argument("-H", "--header", action="append", default=[])
    p.add_argument("--expect-header", action="append", default=[], help="'name: value' required")
    p.add_argument("--forbid-header", action="append", default=[], help="header name forbidden")
    p.add_argument("--max-conns", type=int, default=512)
    p.add_argument("--conns", type=int, default=0, help="connections opened during warm-up")
    p.add_argument("--timeout", type=float, default=10.0, help="s after the scheduled time")
    p.add_argument("--warmup", type=int, default=0, help="unrecorded requests first")
    args = p.parse_args(argv)
    if not 0 < args.duration <= MAX_DURATION_S:
        p.error(f"--duration must be in (0, {MAX_DURATION_S}]")
    if args.rate <= 0:
        p.error("--rate must be positive")
    import uvloop  # the proxy's loop, and ~1 ms timers

    json.dump(uvloop.run(measure(args)), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
