"""Open-loop HTTP/1.1 load generator (asyncio + uvloop, raw keep-alive connections).

Runs in its own process and prints one JSON object on stdout.

Open loop (default): request *i* is scheduled at ``t0 + i / rate`` whatever happened to the
earlier ones; its latency is measured from that *scheduled* time to the last byte of the
response, so queueing inside the generator (no idle connection, event loop late) counts against
the server — the coordinated-omission correction. Connections come from a pool that grows on
demand up to ``--max-conns``; a request that has not completed ``--timeout`` seconds after its
scheduled time is an error. Everything is bounded: ``rate * duration`` requests at most, and a
drain of at most ``--timeout`` seconds afterwards.

Closed loop (``--closed N``): N connections each send back to back for ``--duration`` seconds;
used to measure the capacity of the generator and the mock.

    python benches/loadgen.py --url http://127.0.0.1:8000/chat/completions --rate 100 \
        --duration 5 --body '{"model": "m", "messages": []}' -H 'Authorization: Bearer sk-x' \
        --expect-header 'x-litellm-rust: true'
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


class HttpError(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _parse_response(buf: bytearray) -> tuple[int, bytes, int, bool] | None:
    """(status, lowercased head, bytes consumed, keep_alive) of one complete response."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buf[:end]).lower()
    try:
        status = int(head[9:12])
    except ValueError as err:
        raise HttpError("bad_status_line") from err
    start = end + 4
    keep_alive = b"\r\nconnection: close" not in head
    idx = head.find(b"\r\ncontent-length:")
    if idx >= 0:
        eol = head.find(b"\r\n", idx + 2)
        length = int(head[idx + 17 : eol if eol >= 0 else len(head)].strip())
        if len(buf) < start + length:
            return None
        return status, head, start + length, keep_alive
    if b"\r\ntransfer-encoding: chunked" in head:
        pos = start
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip() or b"0", 16)
            pos = eol + 2
            if size == 0:
                trailer_end = buf.find(b"\r\n", pos)
                if trailer_end < 0:
                    return None
                while trailer_end != pos:  # skip trailer fields
                    pos = trailer_end + 2
                    trailer_end = buf.find(b"\r\n", pos)
                    if trailer_end < 0:
                        return None
                return status, head, pos + 2, keep_alive
            if len(buf) < pos + size + 2:
                return None
            pos += size + 2
    if status in (204, 304) or 100 <= status < 200:
        return status, head, start, keep_alive
    raise HttpError("no_length")  # read-until-close bodies are not supported


class Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:
            parsed = _parse_response(self.buf)
        except (HttpError, ValueError) as err:
            waiter.set_exception(err if isinstance(err, HttpError) else HttpError("parse"))
            return
        if parsed is None:
            return
        status, head, consumed, keep_alive = parsed
        del self.buf[:consumed]
        self.waiter = None
        waiter.set_result((status, head, keep_alive))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(HttpError("connection_lost"))

    def send(self, data: bytes) -> asyncio.Future[tuple[int, bytes, bool]]:
        assert self.transport is not None
        fut: asyncio.Future[tuple[int, bytes, bool]] = asyncio.get_running_loop().create_future()
        self.waiter = fut
        self.buf.clear()
        self.transport.write(data)
        return fut

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Pool:
    def __init__(self, host: str, port: int, max_conns: int, fifo: bool) -> None:
        self.host, self.port, self.max_conns = host, port, max_conns
        # FIFO reuse spreads requests over every open connection (and so over every worker
        # process that accepted one); LIFO keeps the fewest connections hot.
        self.fifo = fifo
        self.idle: collections.deque[Conn] = collections.deque()
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.opened = 0
        self.total_opened = 0
        self.peak_open = 0

    async def _open(self) -> Conn:
        self.opened += 1
        self.total_opened += 1
        self.peak_open = max(self.peak_open, self.opened)
        try:
            _, conn = await asyncio.get_running_loop().create_connection(Conn, self.host, self.port)
        except BaseException:
            self._gone()
            raise
        return conn

    async def acquire(self) -> Conn:
        while True:
            while self.idle:
                conn = self.idle.popleft() if self.fifo else self.idle.pop()
                if not conn.closed:
                    return conn
                self._gone()
            if self.opened < self.max_conns:
                return await self._open()
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self.waiters:
                    self.waiters.remove(fut)
                raise

    def _wake(self) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _gone(self) -> None:
        self.opened -= 1
        self._wake()

    def release(self, conn: Conn, reusable: bool) -> None:
        if reusable and not conn.closed:
            self.idle.append(conn)
            self._wake()
        else:
            conn.close()
            self._gone()

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        url = urlsplit(args.url)
        if url.scheme != "http" or url.hostname not in ("127.0.0.1", "localhost", "::1"):
            sys.exit("loadgen targets plain http on loopback only")
        self.host = url.hostname
        self.port = url.port or 80
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        body = args.body.encode() if args.body is not None else b""
        if args.body is not None and args.body.startswith("@"):
            with open(args.body[1:], "rb") as fh:
                body = fh.read()
        method = args.method or ("POST" if args.body is not None else "GET")
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        if args.body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        lines += args.header
        self.request = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        self.expect: list[bytes] = []
        for spec in args.expect_header:
            name, _, value = spec.partition(":")
            self.expect.append(f"\r\n{name.strip().lower()}: {value.strip().lower()}".encode())
        self.timeout = args.timeout
        self.pool = Pool(self.host, self.port, args.max_conns, args.fifo)
        self.forbid: list[bytes] = []
        for name in args.forbid_header:
            self.forbid.append(f"\r\n{name.strip().lower()}:".encode())
        self.latencies: list[float] = []  # seconds, successful responses only
        self.send_lag: list[float] = []  # seconds between scheduled time and write
        self.errors: collections.Counter[str] = collections.Counter()
        self.statuses: collections.Counter[int] = collections.Counter()
        self.last_done = 0.0
        self.first_error: str | None = None

    def _error(self, kind: str, detail: str = "") -> None:
        self.errors[kind] += 1
        if self.first_error is None:
            self.first_error = f"{kind} {detail}".strip()

    async def one(self, scheduled: float) -> None:
        try:
            await asyncio.wait_for(self._exchange(scheduled), self._remaining(scheduled))
        except TimeoutError:
            self._error("timeout")
        except HttpError as err:
            self._error(err.kind)
        except OSError as err:
            self._error("os_error", repr(err))

    def _remaining(self, scheduled: float) -> float:
        return max(0.001, scheduled + self.timeout - time.perf_counter())

    async def _exchange(self, scheduled: float) -> None:
        conn = await self.pool.acquire()
        reusable = False
        try:
            self.send_lag.append(time.perf_counter() - scheduled)
            status, head, keep_alive = await conn.send(self.request)
            done = time.perf_counter()
            reusable = keep_alive
        finally:
            self.pool.release(conn, reusable)
        self.statuses[status] += 1
        self.last_done = max(self.last_done, done)
        if not 200 <= status < 300:
            self._error(f"http_{status}")
            return
        for needle in self.expect:
            if needle not in head:
                self._error("missing_header", needle.decode().strip())
                return
        for needle in self.forbid:
            if needle in head:
                self._error("forbidden_header", needle.decode().strip())
                return
        self.latencies.append(done - scheduled)

    async def warm(self, n: int, conns: int) -> None:
        """n unrecorded requests, `conns` at a time, to open connections and warm the server."""
        n = max(n, conns)
        if n <= 0:
            return
        saved = (self.latencies, self.send_lag, self.errors, self.statuses)
        self.latencies, self.send_lag = [], []
        self.errors, self.statuses = collections.Counter(), collections.Counter()
        width = max(1, min(n, conns or 8, self.pool.max_conns))
        for start in range(0, n, width):
            now = time.perf_counter()
            await asyncio.gather(*(self.one(now) for _ in range(min(width, n - start))))
        self.latencies, self.send_lag, self.errors, self.statuses = saved

    async def open_loop(self, rate: float, duration: float) -> dict[str, Any]:
        n = min(MAX_REQUESTS, max(1, round(rate * duration)))
        tasks: list[asyncio.Task[None]] = []
        t0 = time.perf_counter() + 0.02
        interval = 1.0 / rate
        for i in range(n):
            target = t0 + i * interval
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
        end = max(self.last_done, t0 + n * interval)
        return {
            "mode": "open",
            "rate": rate,
            "scheduled": n,
            "sched_s": sent_end - t0,
            "window_s": end - t0,
        }

    async def closed_loop(self, workers: int, duration: float) -> dict[str, Any]:
        stop_at = time.perf_counter() + duration
        count = 0

        async def worker() -> None:
            nonlocal count
            while time.perf_counter() < stop_at:
                await self.one(time.perf_counter())
                count += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(workers)))
        return {
            "mode": "closed",
            "workers": workers,
            "scheduled": count,
            "window_s": time.perf_counter() - t0,
        }


def _summary(run: Run, meta: dict[str, Any], cpu_s: float, wall_s: float) -> dict[str, Any]:
    lat = sorted(run.latencies)
    lag = sorted(run.send_lag)

    def pct(values: list[float], q: float) -> float | None:
        if not values:
            return None
        return values[min(len(values), max(1, math.ceil(q / 100 * len(values)))) - 1] * 1000

    ok = len(lat)
    window = meta["window_s"]
    return {
        **meta,
        "ok": ok,
        "errors": sum(run.errors.values()),
        "error_kinds": dict(run.errors),
        "first_error": run.first_error,
        "statuses": {str(k): v for k, v in run.statuses.items()},
        "achieved_rps": ok / window if window > 0 else 0.0,
        "p50_ms": pct(lat, 50),
        "p90_ms": pct(lat, 90),
        "p99_ms": pct(lat, 99),
        "p999_ms": pct(lat, 99.9),
        "max_ms": lat[-1] * 1000 if lat else None,
        "mean_ms": sum(lat) / ok * 1000 if ok else None,
        "send_lag_p99_ms": pct(lag, 99),
        "conns_opened": run.pool.total_opened,
        "conns_peak": run.pool.peak_open,
        "gen_cpu_s": cpu_s,
        "gen_wall_s": wall_s,
        "gen_cpu_util": cpu_s / wall_s if wall_s > 0 else None,
        "latencies_ms": [round(v * 1000, 4) for v in run.latencies],
    }


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    run = Run(args)
    await run.warm(args.warmup, args.conns)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.perf_counter()
    if args.closed:
        meta = await run.closed_loop(args.closed, args.duration)
    else:
        meta = await run.open_loop(args.rate, args.duration)
    wall = time.perf_counter() - w0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    run.pool.close()
    return _summary(run, meta, cpu, wall)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="open-loop HTTP/1.1 load generator (loopback only)")
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, default=100.0, help="requests per second (open loop)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds of scheduled sends")
    p.add_argument("--closed", type=int, default=0, help="closed loop with N connections")
    p.add_argument("--method", default=None)
    p.add_argument("--body", default=None, help="request body, or @file")
    p.add_argument("-H", "--header", action="append", default=[])
    p.add_argument(
        "--expect-header",
        action="append",
        default=[],
        help="'name: value' every successful response must carry (else an error)",
    )
    p.add_argument(
        "--forbid-header",
        action="append",
        default=[],
        help="header name no successful response may carry (else an error)",
    )
    p.add_argument("--max-conns", type=int, default=512)
    p.add_argument("--conns", type=int, default=0, help="connections opened during warm-up")
    p.add_argument("--fifo", action="store_true", help="reuse idle connections round-robin")
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds after a request's scheduled time before it counts as an error",
    )
    p.add_argument("--warmup", type=int, default=0, help="unrecorded requests first")
    p.add_argument("--no-latencies", action="store_true", help="omit the raw latency list")
    p.add_argument("--no-uvloop", action="store_true")
    args = p.parse_args(argv)
    if not 0 < args.duration <= MAX_DURATION_S:
        p.error(f"--duration must be in (0, {MAX_DURATION_S}]")
    if not args.closed and args.rate <= 0:
        p.error("--rate must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    runner: Any = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    result = runner(_main(args))
    result["uvloop"] = runner is not asyncio.run
    if args.no_latencies:
        result.pop("latencies_ms")
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
