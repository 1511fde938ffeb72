"""Realtime (`/v1/realtime`) through one proxy worker: the session phase (upgrade sent ->
`session.created`) of LiteLLM's own dial (`plain-realtime`), `rust: true` with the pool
(`rust-realtime`), the same behind the fast lane on a second proxy (`rust+lane`) and the floor
(`plain-instant`), arms interleaved; then the relay, LiteLLM's (`plain`) against the lane's
(`rust+lane`): CPU per frame and an echo's round trip (what each arm is, the method:
benches/README.md)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from benches._common import (
    arg_parser,
    finish,
    fmt,
    lat_stats,
    log,
    machine,
    machine_line,
    start_proxy,
    table,
)
from devtools.polling import wait_until
from devtools.processes import MASTER_KEY, ServerProcess
from devtools.procfs import cpu_seconds, process_tree, system_busy_seconds
from devtools.realtime import RealtimeUpstream, quiet_refused_requests

T = TypeVar("T")
HANDSHAKE_S = 0.3
POOL = 32
HOLD_S = 1.0
# Session-phase arms: (proxy, model). `off` has the lane off, `lane` on (its own 300 ms mock).
ARMS = {
    "plain": ("off", "plain-realtime"),
    "rust+pool": ("off", "rust-realtime"),
    "rust+lane": ("lane", "rust-realtime"),
    "floor": ("off", "plain-instant"),
}
# Relay arms: long sessions against an echoing mock in its own process; `direct` skips the proxy.
RELAY = {"direct": ("mock", ""), "plain": ("off", "plain-echo"), "rust+lane": ("lane", "rust-echo")}
AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
BARS = {"ratio": 0.1, "hits": 0.9, "cpu": 0.25, "echo_p99": 0.25}
AUDIO_BYTES = 4_500  # an `input_audio_buffer.append` of ~6 KiB (base64), echoed as ~6 KiB
WINDOW = 4  # frames a CPU-step session has in flight (sent, echo not yet back)
ECHO_WARMUP = 10  # unrecorded round trips at the start of each echo session
FOREIGN_MAX = 0.35  # a relay step while other processes used more cores runs again (twice at most)


def _frames(count: int = 16) -> list[tuple[bytes, str]]:
    """Distinct `input_audio_buffer.append` events of seeded random audio: (frame, audio)."""
    rng, frames = random.Random(25), []
    for index in range(count):
        audio = base64.b64encode(rng.randbytes(AUDIO_BYTES)).decode()
        event = {"type": "input_audio_buffer.append", "event_id": f"evt_{index}", "audio": audio}
        frames.append((json.dumps(event).encode(), audio))
    return frames


FRAMES = _frames()


def _is_rust(ws: Any) -> bool:
    """Whether the handshake's 101 said `x-litellm-rust: true`."""
    return bool(ws.response.headers.get("x-litellm-rust") == "true")


async def _session(url: str, hold_s: float) -> tuple[float, bool]:
    """One session: its session phase in ms, and whether Rust answered the upgrade."""
    from websockets.asyncio.client import connect

    started = time.perf_counter()
    async with connect(url, additional_headers=AUTH, open_timeout=30) as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), 30))
        phase_ms = (time.perf_counter() - started) * 1000
        if first.get("type") != "session.created":
            raise RuntimeError(f"first event {first.get('type')!r}")
        await ws.send(json.dumps({"type": "response.create"}))
        while json.loads(await asyncio.wait_for(ws.recv(), 30)).get("type") != "response.done":
            pass
        await asyncio.sleep(hold_s)
        await ws.close()
    return phase_ms, _is_rust(ws)


async def _step(url: str, clients: int, sessions: int) -> list[tuple[float, bool]]:
    """`sessions` sessions by `clients` clients, each running its share back to back."""
    phases: list[tuple[float, bool]] = []
    hold_s = HOLD_S if clients > 1 else 0.0

    async def client(count: int) -> None:
        for _ in range(count):
            phases.append(await _session(url, hold_s))

    shares = [sessions // clients + (i < sessions % clients) for i in range(clients)]
    await asyncio.gather(*(client(n) for n in shares))
    return phases


def _settled_counts(log_path: Path, sessions_logged: int, strict: bool = True) -> dict[str, int]:
    """The pool counts once every session so far has logged its event (not `strict`: after 20 s
    the latest counts, with a warning)."""
    from devtools.proxy_logger import read_events

    try:
        wait_until(
            lambda: len(read_events(log_path)) >= sessions_logged, timeout=60 if strict else 20
        )
    except AssertionError:
        if strict:
            raise
        log(f"warning: {log_path.name} has fewer events than sessions; its counts may lag")
    events = read_events(log_path)
    return next((e["realtime_pool"] for e in reversed(events) if e.get("realtime_pool")), {})


# -- the relay: long sessions against the echoing mock ---------------------------------------


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """`coro` on a fresh event loop (uvloop when installed: the client's cost is in the floor)."""
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


async def _open(url: str) -> Any:
    """A session that has had its `session.created`."""
    from websockets.asyncio.client import connect

    ws = await connect(
        url, additional_headers=AUTH, open_timeout=30, max_size=None, compression=None
    )
    first = json.loads(await asyncio.wait_for(ws.recv(), 30))
    if first.get("type") != "session.created":
        raise RuntimeError(f"first event {first.get('type')!r}")
    return ws


def _handshakes(sockets: list[Any]) -> dict[str, int]:
    """How many handshakes Rust answered and how many agreed on permessage-deflate."""
    extensions = [ws.response.headers.get("Sec-WebSocket-Extensions", "") for ws in sockets]
    return {
        "sessions": len(sockets),
        "rust": sum(_is_rust(ws) for ws in sockets),
        "deflate": sum("permessage-deflate" in agreed for agreed in extensions),
    }


async def _echoed(ws: Any) -> bytes:
    """The next `mock.echo` frame, undecoded."""
    while True:
        message = await asyncio.wait_for(ws.recv(decode=False), 30)
        if b"mock.echo" in message:
            return bytes(message)


async def _pump(ws: Any, count: int) -> int:
    """`count` frames sent, at most WINDOW unanswered, and their echoes read: the largest echo."""
    credit, largest = asyncio.Semaphore(WINDOW), 0

    async def send() -> None:
        for index in range(count):
            await credit.acquire()
            await ws.send(FRAMES[index % len(FRAMES)][0], text=True)

    sender = asyncio.create_task(send())
    try:
        for _ in range(count):
            largest = max(largest, len(await _echoed(ws)))
            credit.release()
        await sender
    finally:
        sender.cancel()
    return largest


def _mark(ours: list[int]) -> tuple[float, float, float]:
    return cpu_seconds(ours), system_busy_seconds(), time.perf_counter()


def _foreign(mark: tuple[float, float, float], ours: list[int]) -> float:
    """The cores processes other than `ours` used since `mark`."""
    used, busy, started = mark
    other = system_busy_seconds() - busy - (cpu_seconds(ours) - used)
    return max(0.0, other / (time.perf_counter() - started))


async def _relay_load(url: str, sessions: int, frames: int, proxy: int, ours: list[int]) -> dict:
    """`sessions` sessions at once, each `frames` frames echoed, then closed: the CPU of the
    proxy's tree, the mock (`ours[-2]`) and this client (its loop's thread) over whole sessions,
    from before they open until the proxy idles after the closes. A session's cost outside its
    frames is the relay's too, wherever it falls: LiteLLM authenticates and routes before the
    first frame and logs after the last, the lane replays the session's record after it ended.
    `in_session_cpu_s`: from the last `session.created` to the last echo."""
    pids, mock = process_tree(proxy), ours[-2:-1]
    p0, m0, c0, mark = cpu_seconds(pids), cpu_seconds(mock), time.thread_time(), _mark(ours)
    sockets = list(await asyncio.gather(*(_open(url) for _ in range(sessions))))
    opened = cpu_seconds(pids)
    largest = await asyncio.gather(*(_pump(ws, frames) for ws in sockets))
    step = {"frames": 2 * sessions * frames, "relay_wall_s": time.perf_counter() - mark[2]}
    step |= {"in_session_cpu_s": cpu_seconds(pids) - opened, "mock_cpu_s": cpu_seconds(mock) - m0}
    step |= {"client_cpu_s": time.thread_time() - c0}
    await asyncio.gather(*(ws.close() for ws in sockets))
    _settle(pids)
    step |= {"proxy_cpu_s": cpu_seconds(pids) - p0, "wall_s": time.perf_counter() - mark[2]}
    step |= {"foreign_cores": _foreign(mark, ours), "largest_echo_bytes": max(largest)}
    return step | _handshakes(sockets)


async def _echo_session(url: str, count: int) -> dict[str, Any]:
    """One session, `count` round trips (after ECHO_WARMUP): send a frame, wait for its echo.
    The round trips in ms (`rtts`), each echo checked to carry the audio sent."""
    ws, rtts = await _open(url), []
    try:
        for index in range(ECHO_WARMUP + count):
            frame, audio = FRAMES[index % len(FRAMES)]
            started = time.perf_counter()
            await ws.send(frame, text=True)
            echo = await _echoed(ws)
            elapsed = (time.perf_counter() - started) * 1000
            if json.loads(echo)["event"]["audio"] != audio:
                raise RuntimeError("an echo did not carry the audio sent")
            rtts += [elapsed] if index >= ECHO_WARMUP else []
    finally:
        await ws.close()
    return {"rtts": rtts, **_handshakes([ws])}


async def _echo_block(urls: dict[str, str], count: int, ours: list[int]) -> dict[str, Any]:
    """An echo session per arm, in the order of `urls`, each once the proxies and the mock idle
    (the last session logged, its pool refilled); and the cores other processes used."""
    mark, sessions = _mark(ours), {}
    for arm, url in urls.items():
        _settle(ours[:-1])
        sessions[arm] = await _echo_session(url, count)
    return {"sessions": sessions, "foreign_cores": _foreign(mark, ours)}


def _settle(pids: list[int], budget: float = 15.0) -> None:
    """Waits (at most `budget` s) until `pids` burn < 5% of a core: the last sessions logged,
    the pools refilled."""
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        used = cpu_seconds(pids)
        time.sleep(0.5)
        if cpu_seconds(pids) - used < 0.025:
            return


def _quietest(run: Callable[[], Coroutine[Any, Any, dict]], ours: list[int]) -> dict[str, Any]:
    """`run()` on a fresh loop once the proxies and the mock have settled, and again (twice at
    most) while other processes used more than FOREIGN_MAX cores meanwhile: the quietest try."""
    tries: list[dict[str, Any]] = []
    while len(tries) < 3 and (not tries or tries[-1]["foreign_cores"] > FOREIGN_MAX):
        _settle(ours[:-1])
        tries.append(_run(run()))
    return min(tries, key=lambda t: t["foreign_cores"]) | {"tries": len(tries)}


def _add(total: dict[str, Any], step: dict[str, Any]) -> None:
    """Sums a step into `total` (the highest of `foreign_cores` and `largest_echo_bytes`)."""
    for key, value in step.items():
        peak = key.startswith(("foreign", "largest"))
        total[key] = max(total.get(key, 0), value) if peak else total.get(key, 0) + value


# -- the run ---------------------------------------------------------------------------------


def measure(quick: bool) -> dict[str, Any]:
    serial_n, burst_n, reps = (10, 60, 1) if quick else (30, 200, 2)
    idle_window_s = 35.0 if quick else 65.0
    relay_sessions, relay_frames = (10, 500) if quick else (20, 600)
    relay_reps, echo_blocks = (1, 3) if quick else (2, 5)
    echo_n = 150 if quick else 300
    workdir = Path(tempfile.mkdtemp(prefix="bench-realtime-"))
    logs = {"off": workdir / "events.jsonl", "lane": workdir / "lane-events.jsonl"}
    for path in logs.values():
        path.touch()
    quiet_refused_requests()  # the warmer's `OPTIONS /` at the in-process mocks
    with ExitStack() as stack:
        upstream = stack.enter_context(RealtimeUpstream(handshake_delay_s=HANDSHAKE_S))
        # The lane proxy's pool has a mock of its own, the same: each pool's sessions count apart.
        lane_upstream = stack.enter_context(RealtimeUpstream(handshake_delay_s=HANDSHAKE_S))
        instant = stack.enter_context(RealtimeUpstream())
        # No permessage-deflate on the relay's sessions (neither the client nor this mock
        # takes it): with it, client and mock spend ~0.2 ms of zlib per frame each.
        echo = stack.enter_context(ServerProcess("devtools.realtime", ("--no-compression",)))
        params: dict[str, Any] = {"model": "openai/gpt-realtime", "api_key": "sk-upstream"}
        rust = {**params, "rust": True}
        models: dict[str, list[tuple[str, dict[str, Any]]]] = {
            "off": [
                ("plain-realtime", {**params, "api_base": upstream.url}),
                ("rust-realtime", {**rust, "api_base": upstream.url}),
                ("plain-instant", {**params, "api_base": instant.url}),
                ("plain-echo", {**params, "api_base": echo.url}),
            ],
            "lane": [
                ("rust-realtime", {**rust, "api_base": lane_upstream.url}),
                ("rust-echo", {**rust, "api_base": echo.url}),
            ],
        }
        proxies: dict[str, Any] = {}
        for name, deployments in models.items():
            model_list = [{"model_name": n, "litellm_params": p} for n, p in deployments]
            settings = {"fastpath_realtime_pool": POOL}
            proxy = start_proxy(
                model_list, lane=name == "lane", log_path=logs[name], settings_extra=settings
            )
            stack.callback(proxy.__exit__, None, None, None)
            proxies[name] = proxy
        ws_base = {name: p.url.replace("http://", "ws://") for name, p in proxies.items()}
        ws_base["mock"] = echo.url.replace("http://", "ws://")
        urls = {arm: f"{ws_base[p]}/v1/realtime?model={m}" for arm, (p, m) in ARMS.items()}
        logged = dict.fromkeys(logs, 0)
        lane_refills = [True]  # False once the lane's pool did not refill within 20 s

        def refilled() -> None:
            wait_until(lambda: len(upstream.idle_sessions()) >= POOL, timeout=60)
            if lane_refills[0]:
                try:
                    wait_until(lambda: len(lane_upstream.idle_sessions()) >= POOL, timeout=20)
                except AssertionError:
                    log(f"warning: the lane's pool holds < {POOL} idle sessions; not waiting again")
                    lane_refills[0] = False

        def counts(arm: str) -> dict[str, int]:
            name = ARMS[arm][0]
            return _settled_counts(logs[name], logged[name], strict=name == "off")

        # Each arm's first sessions (imports, the pool's first dials) are not measured.
        for arm, url in urls.items():
            asyncio.run(_step(url, 1, 1))
            logged[ARMS[arm][0]] += 1
        refilled()
        steps: dict[str, dict[str, list[float]]] = {"1": {}, "20": {}}
        hits = {arm: [0, 0] for arm in ("rust+pool", "rust+lane")}  # at 20 clients: hits, sessions
        rust_seen = {arm: [0, 0] for arm in ARMS}  # handshakes Rust answered, sessions
        for rep in range(reps):
            for clients, count in ((1, serial_n), (20, burst_n)):
                for arm, url in urls.items():
                    before = counts(arm)
                    sessions = asyncio.run(_step(url, clients, count))
                    logged[ARMS[arm][0]] += count
                    phases = [phase for phase, _ in sessions]
                    steps[str(clients)].setdefault(arm, []).extend(phases)
                    rust_seen[arm][0] += sum(by_rust for _, by_rust in sessions)
                    rust_seen[arm][1] += len(sessions)
                    after = counts(arm)
                    if arm in hits and clients == 20 and "hits" in after:
                        hit = after["hits"] - before.get("hits", 0)
                        miss = after["misses"] - before.get("misses", 0)
                        hits[arm] = [hits[arm][0] + hit, hits[arm][1] + hit + miss]
                    log(f"rep {rep} c={clients} {arm}: p50 {lat_stats(phases)['p50']:.1f} ms")
                    refilled()  # the pools refill before the next step
        relay_urls = {arm: f"{ws_base[p]}/v1/realtime?model={m}" for arm, (p, m) in RELAY.items()}
        # Both proxies' trees, the mock, this process (the in-process mocks' threads too).
        ours = [pid for p in proxies.values() for pid in process_tree(p.pid)]
        ours += [echo.pid, os.getpid()]
        for url in relay_urls.values():  # a first session per relay arm, not measured
            _run(_echo_session(url, 10))
        cpu: dict[str, dict[str, Any]] = {arm: {} for arm in ("plain", "rust+lane")}
        for rep in range(relay_reps):
            for arm, total in cpu.items():
                url, proxy = relay_urls[arm], proxies[RELAY[arm][0]].pid
                load = partial(_relay_load, url, relay_sessions, relay_frames, proxy, ours)
                step = _quietest(load, ours)
                _add(total, step)
                per_frame = step["proxy_cpu_s"] / step["frames"] * 1e6
                log(f"rep {rep} relay CPU {arm}: {per_frame:.1f} us/frame, {step['wall_s']:.1f} s")
        rtts: dict[str, list[float]] = {arm: [] for arm in RELAY}
        echoes: dict[str, dict[str, Any]] = {arm: {} for arm in RELAY}
        for block in range(echo_blocks):  # each arm first in turn
            arms = list(RELAY)[block % len(RELAY) :] + list(RELAY)[: block % len(RELAY)]
            order = {arm: relay_urls[arm] for arm in arms}
            done = _quietest(partial(_echo_block, order, echo_n, ours), ours)
            for arm, session in done["sessions"].items():
                rtts[arm] += session.pop("rtts")
                _add(echoes[arm], session | {k: done[k] for k in ("foreign_cores", "tries")})
            p50s = ", ".join(f"{a} {lat_stats(rtts[a][-echo_n:])['p50']:.2f}" for a in arms)
            log(f"block {block} echo p50 (ms): {p50s}")
        warm_at_mock = {"off": len(upstream.idle_sessions())}
        warm_at_mock["lane"] = len(lane_upstream.idle_sessions())
        log(f"zero traffic: counting the pools' dials for {idle_window_s:.0f} s")
        trees = {name: process_tree(p.pid) for name, p in proxies.items()}
        dials_before = (upstream.dials, lane_upstream.dials)
        idle_cpu = {name: cpu_seconds(pids) for name, pids in trees.items()}
        started = time.monotonic()
        time.sleep(idle_window_s)
        idle_s = time.monotonic() - started
        idle_dials = (upstream.dials - dials_before[0], lane_upstream.dials - dials_before[1])
        idle_cores = {name: (cpu_seconds(trees[name]) - c) / idle_s for name, c in idle_cpu.items()}
    for arm, total in cpu.items():  # the proxy's CPU net of what it burns idle (pools redialing)
        total["proxy_net_cpu_s"] = (
            total["proxy_cpu_s"] - idle_cores[RELAY[arm][0]] * total["wall_s"]
        )
    config = {"handshake_ms": HANDSHAKE_S * 1000, "pool": POOL, "hold_s": HOLD_S, "workers": 1}
    config |= {"sessions_serial": serial_n * reps, "sessions_20": burst_n * reps}
    config |= {"relay_sessions": relay_sessions, "relay_frames": relay_frames}
    config |= {"relay_reps": relay_reps, "window": WINDOW, "audio_bytes": AUDIO_BYTES}
    config |= {"frame_bytes": len(FRAMES[0][0]), "echo_round_trips": echo_n * echo_blocks}
    return {
        "config": config,
        "phase_ms": {
            c: {arm: lat_stats(v) for arm, v in by_arm.items()} for c, by_arm in steps.items()
        },
        "hit_rate_20": hits["rust+pool"][0] / max(hits["rust+pool"][1], 1),
        "hit_rate_20_lane": hits["rust+lane"][0] / max(hits["rust+lane"][1], 1),
        "hits_20": hits,
        "rust_handshakes": rust_seen,
        "idle_dials_per_min": idle_dials[0] / (idle_s / 60),
        "idle_dials_per_min_lane": idle_dials[1] / (idle_s / 60),
        "idle_proxy_cores": idle_cores,
        "relay_cpu": cpu,
        "echo_ms": {arm: lat_stats(v) for arm, v in rtts.items()},
        "echo_handshakes": echoes,
        "warm_at_mock": warm_at_mock,
    }


def _ratio(value: float, base: float) -> str:
    return f"**{fmt(value / base, 3)}**" if base > 0 else "-"


def _phase_rows(phase_ms: dict[str, dict[str, dict[str, float]]]) -> list[list[str]]:
    rows = []
    for clients, by_arm in phase_ms.items():
        plain, pool, lane, floor = (by_arm[a] for a in ("plain", "rust+pool", "rust+lane", "floor"))
        for q in ("p50", "p99"):
            ratios = [_ratio(pool[q], plain[q]), fmt(lane[q], 1), _ratio(lane[q], plain[q])]
            rows.append([clients, q, fmt(plain[q], 1), fmt(pool[q], 1), *ratios, fmt(floor[q], 1)])
    return rows


def _others(c: dict[str, Any]) -> list[str]:
    """The foreign cores (the most of any step kept) and tries, and the handshakes Rust took."""
    return [f"{c['foreign_cores']:.2f} ({c['tries']})", f"{c['rust']}/{c['sessions']}"]


def _cpu_rows(cpu: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows, plain = [], cpu["plain"]["proxy_net_cpu_s"] / max(cpu["plain"]["frames"], 1)
    for arm, c in cpu.items():
        us = {k: c[k] / max(c["frames"], 1) * 1e6 for k in c if k.endswith("cpu_s")}
        ratio = _ratio(us["proxy_net_cpu_s"], plain * 1e6) if arm != "plain" else ""
        rate = f"{c['frames'] / c['relay_wall_s']:.0f}"
        rows.append([arm, c["frames"], rate, fmt(c["proxy_cpu_s"], 2), fmt(us["proxy_cpu_s"], 1)])
        outside = us["proxy_cpu_s"] - us["in_session_cpu_s"]
        rows[-1] += [fmt(us["in_session_cpu_s"], 1), fmt(outside, 1)]
        rows[-1] += [fmt(us["proxy_net_cpu_s"], 1), ratio]
        rows[-1] += [fmt(us[k], 1) for k in ("mock_cpu_s", "client_cpu_s")] + _others(c)
        rows[-1] += [str(c["deflate"])]
    return rows


def _echo_rows(echo: dict[str, dict[str, float]], sessions: dict[str, Any]) -> list[list[str]]:
    rows, direct, plain = [], echo["direct"], echo["plain"]
    for arm, e in echo.items():
        added = {q: e[q] - direct[q] for q in ("p50", "p99")}
        cells = [fmt(e["p50"], 3), fmt(e["p99"], 3), fmt(added["p50"], 3), fmt(added["p99"], 3)]
        cells[2:] = ["", ""] if arm == "direct" else cells[2:]
        ratios = ["", "", ""]
        if arm not in ("direct", "plain"):
            ratios = [_ratio(e[q], plain[q]) for q in ("p50", "p99")]
            ratios.append(_ratio(added["p99"], plain["p99"] - direct["p99"]))
        rows.append([arm, *cells, *ratios, *_others(sessions[arm])])
    return rows


def render(data: dict[str, Any]) -> str:
    cfg, seen, idle = data["config"], data["rust_handshakes"], data["idle_proxy_cores"]
    head = ["clients", "", "plain", "rust + pool", "ratio", "rust + lane", "ratio"]
    cpu_head = ["arm", "frames", "frames/s", "proxy CPU s", "proxy us/frame", "in session"]
    cpu_head += ["opening and after close"]
    cpu_head += ["net of idle"]
    others = ["foreign cores (tries)", "Rust"]
    cpu_head += ["ratio (net)", "mock us/frame", "client us/frame", *others, "deflate"]
    echo_head = ["arm", "p50", "p99", "added p50", "added p99", "ratio p50", "ratio p99"]
    echo_head += ["ratio added p99", *others]
    lines = [
        "# Realtime: the session phase (LiteLLM's dial vs the pool) and the relay",
        "",
        f"One worker per proxy; mock handshake {cfg['handshake_ms']:.0f} ms; pool {cfg['pool']}; "
        f"each session holds {cfg['hold_s']:g} s after `response.done`; {cfg['sessions_serial']} "
        f"sessions one at a time and {cfg['sessions_20']} by 20 clients per arm, arms "
        "interleaved. Session phase: upgrade request sent -> `session.created` received (ms). "
        "`rust + lane`: the `rust: true` model on a second proxy with the fast lane on (and a "
        "300 ms mock of its own). The floor is the proxy's own per-session Python: what a pool "
        "can bring a client to.",
        "",
        *table([*head, "floor (0 ms handshake)"], _phase_rows(data["phase_ms"])),
        "",
        f"Pool hits at 20 clients: rust + pool {data['hit_rate_20']:.1%}, rust + lane "
        f"{data['hit_rate_20_lane']:.1%} (bar >= {BARS['hits']:.0%}); bar for the ratios: "
        f"<= {BARS['ratio']}x. Handshakes answered by Rust (`x-litellm-rust: true` on the 101): "
        + ", ".join(f"{arm} {n}/{total}" for arm, (n, total) in seen.items())
        + ".",
        f"Upstream dials per minute at zero traffic (pool {cfg['pool']}, idle expiry 30 s): "
        f"{data['idle_dials_per_min']:.0f} (lane off), {data['idle_dials_per_min_lane']:.0f} "
        f"(lane); idle sessions at the mock before it: {data['warm_at_mock']['off']} (lane off), "
        f"{data['warm_at_mock']['lane']} (lane).",
        "",
        "## The relay: CPU per frame",
        "",
        f"{cfg['relay_sessions']} sessions at once, {cfg['relay_reps']} step(s) per arm, arms "
        f"interleaved; each session sends {cfg['relay_frames']} `input_audio_buffer.append` "
        f"events of {cfg['frame_bytes']:,} bytes ({cfg['audio_bytes']:,} bytes of random audio) "
        f"with at most {cfg['window']} unanswered, which the mock (a process of its own) echoes "
        "as `mock.echo`, then closes. Frames: both directions; frames/s: until the last echo. "
        "CPU (utime+stime) over whole sessions: from before they open until the proxy idles "
        "after the closes, of the proxy's process tree, the mock and the client (its event "
        "loop's thread). Per frame, the proxy's splits into `in session` (from the last "
        "`session.created` to the last echo) and `opening and after close` (LiteLLM's auth, "
        "hooks and routing before the first frame and its logging after the last; the lane's "
        "replay of the session's record through LiteLLM). `plain`: LiteLLM's relay (lane off); "
        "`rust + lane`: the lane proxy's. Each step starts once the proxies and the mock "
        "idle, and runs again, twice at most, while other processes used more "
        f"than {FOREIGN_MAX} cores (foreign cores: of the try kept; tries: all). Rust: "
        "handshakes answered by Rust; deflate: handshakes that agreed on permessage-deflate "
        "with the client (the client does not offer it, and this mock would decline it).",
        "",
        *table(cpu_head, _cpu_rows(data["relay_cpu"])),
        "",
        f"Bar: proxy us/frame net of idle, rust + lane / plain <= {BARS['cpu']}x. Net of idle: "
        "less the proxy's CPU rate over the zero-traffic window (pools redialing) times the "
        f"step's wall time: lane off {idle['off'] * 1000:.1f} ms/s, lane "
        f"{idle['lane'] * 1000:.1f} ms/s.",
        "",
        "## The relay: echo round trip",
        "",
        f"One client; per arm {cfg['echo_round_trips']} round trips (send one event, wait for its "
        f"echo; {ECHO_WARMUP} unrecorded first in each session), sessions interleaved across "
        "arms (each session once the proxies and the mock idle; a block of one session per "
        "arm runs again as above); `direct`: the mock without a proxy; added: over direct (ms).",
        "",
        *table(echo_head, _echo_rows(data["echo_ms"], data["echo_handshakes"])),
        "",
        f"Bar: p99 rust + lane / plain <= {BARS['echo_p99']}x (the ratio of the added p99 "
        "leaves the client's and the mock's share out).",
        "",
        machine_line(data["machine"]),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__ or "", "a short run: fewer sessions and frames, 35 s idle window")
    args = parser.parse_args(argv)
    info = machine(args.wait_quiet)
    data = {**measure(args.quick), "machine": info}
    finish(args, "realtime", render(data), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
