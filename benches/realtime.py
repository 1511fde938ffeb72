"""Realtime session phase (upgrade sent -> `session.created`) through one proxy worker: LiteLLM's
own dial (`plain-realtime`), `rust: true` with the pool (`rust-realtime`) and the floor
(`plain-instant`), arms interleaved (what each arm is, the method: benches/README.md)."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
from devtools.processes import MASTER_KEY
from devtools.realtime import RealtimeUpstream

HANDSHAKE_S = 0.3
POOL = 32
HOLD_S = 1.0
ARMS = {"plain": "plain-realtime", "rust+pool": "rust-realtime", "floor": "plain-instant"}
AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
BARS = {"ratio": 0.1, "hits": 0.9}


async def _session(url: str, hold_s: float) -> float:
    """One session; its session phase in ms."""
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
    return phase_ms


async def _step(url: str, clients: int, sessions: int) -> list[float]:
    """`sessions` sessions by `clients` clients, each running its share back to back."""
    phases: list[float] = []
    hold_s = HOLD_S if clients > 1 else 0.0

    async def client(count: int) -> None:
        for _ in range(count):
            phases.append(await _session(url, hold_s))

    shares = [sessions // clients + (i < sessions % clients) for i in range(clients)]
    await asyncio.gather(*(client(n) for n in shares))
    return phases


def _settled_counts(log_path: Path, sessions_logged: int) -> dict[str, int]:
    """The pool counts once every session so far has logged its event."""
    from devtools.proxy_logger import read_events

    wait_until(lambda: len(read_events(log_path)) >= sessions_logged, timeout=60)
    events = read_events(log_path)
    return next((e["realtime_pool"] for e in reversed(events) if e.get("realtime_pool")), {})


def measure(quick: bool) -> dict[str, Any]:
    serial_n, burst_n, reps = (10, 60, 1) if quick else (30, 200, 2)
    idle_window_s = 35.0 if quick else 65.0
    upstream = RealtimeUpstream(handshake_delay_s=HANDSHAKE_S).start()
    instant = RealtimeUpstream().start()
    log_path = Path(tempfile.mkdtemp(prefix="bench-realtime-")) / "events.jsonl"
    params = {"model": "openai/gpt-realtime", "api_key": "sk-upstream", "api_base": upstream.url}
    models = [
        {"model_name": ARMS["plain"], "litellm_params": params},
        {"model_name": ARMS["rust+pool"], "litellm_params": {**params, "rust": True}},
        {"model_name": ARMS["floor"], "litellm_params": {**params, "api_base": instant.url}},
    ]
    proxy = start_proxy(models, log_path=log_path, settings_extra={"fastpath_realtime_pool": POOL})
    urls = {
        arm: proxy.url.replace("http://", "ws://") + f"/v1/realtime?model={m}"
        for arm, m in ARMS.items()
    }
    logged = 0
    try:
        # Each arm's first session (imports, the pool's first dials) is not measured.
        for url in urls.values():
            asyncio.run(_step(url, 1, 1))
            logged += 1
        wait_until(lambda: len(upstream.idle_sessions()) >= POOL, timeout=60)
        steps: dict[str, dict[str, list[float]]] = {"1": {}, "20": {}}
        hits = [0, 0]  # at 20 clients: hits, sessions
        for rep in range(reps):
            for clients, count in ((1, serial_n), (20, burst_n)):
                for arm, url in urls.items():
                    before = _settled_counts(log_path, logged)
                    phases = asyncio.run(_step(url, clients, count))
                    logged += count
                    steps[str(clients)].setdefault(arm, []).extend(phases)
                    after = _settled_counts(log_path, logged)
                    if arm == "rust+pool" and clients == 20:
                        hit = after["hits"] - before["hits"]
                        hits = [hits[0] + hit, hits[1] + hit + after["misses"] - before["misses"]]
                    log(f"rep {rep} c={clients} {arm}: p50 {lat_stats(phases)['p50']:.1f} ms")
                    # The pool refills before the next step.
                    wait_until(lambda: len(upstream.idle_sessions()) >= POOL, timeout=60)
        log(f"zero traffic: counting the pool's dials for {idle_window_s:.0f} s")
        dials_before, started = upstream.dials, time.monotonic()
        time.sleep(idle_window_s)
        idle_dials = upstream.dials - dials_before
        idle_minutes = (time.monotonic() - started) / 60
    finally:
        proxy.stop()
        upstream.stop()
        instant.stop()
    config = {"handshake_ms": HANDSHAKE_S * 1000, "pool": POOL, "hold_s": HOLD_S, "workers": 1}
    config |= {"sessions_serial": serial_n * reps, "sessions_20": burst_n * reps}
    return {
        "config": config,
        "phase_ms": {
            c: {arm: lat_stats(v) for arm, v in by_arm.items()} for c, by_arm in steps.items()
        },
        "hit_rate_20": hits[0] / max(hits[1], 1),
        "idle_dials_per_min": idle_dials / idle_minutes,
    }


def render(data: dict[str, Any]) -> str:
    rows = []
    for clients, by_arm in data["phase_ms"].items():
        plain, pool, floor = by_arm["plain"], by_arm["rust+pool"], by_arm["floor"]
        for q in ("p50", "p99"):
            ratio = f"**{fmt(pool[q] / plain[q], 3)}**"
            rows.append([clients, q, fmt(plain[q], 1), fmt(pool[q], 1), ratio, fmt(floor[q], 1)])
    cfg = data["config"]
    lines = [
        "# Realtime: session phase, LiteLLM's dial vs the pool",
        "",
        f"One worker; mock handshake {cfg['handshake_ms']:.0f} ms; pool {cfg['pool']}; each "
        f"session holds {cfg['hold_s']:g} s after `response.done`; {cfg['sessions_serial']} "
        f"sessions one at a time and {cfg['sessions_20']} by 20 clients per arm, arms "
        "interleaved. Session phase: upgrade request sent -> `session.created` received (ms). "
        "The floor is the proxy's own per-session Python: what a pool can bring a client to.",
        "",
        *table(["clients", "", "plain", "rust + pool", "ratio", "floor (0 ms handshake)"], rows),
        "",
        f"Pool hits at 20 clients: {data['hit_rate_20']:.1%} (bar >= {BARS['hits']:.0%}); "
        f"bar for the ratios: <= {BARS['ratio']}x.",
        f"Upstream dials per minute at zero traffic (pool {cfg['pool']}, idle expiry 30 s): "
        f"{data['idle_dials_per_min']:.0f}.",
        "",
        machine_line(data["machine"]),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__ or "", "a short run: fewer sessions, a 35 s idle window")
    args = parser.parse_args(argv)
    info = machine(args.wait_quiet)
    data = {**measure(args.quick), "machine": info}
    finish(args, "realtime", render(data), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
