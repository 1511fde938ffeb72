"""HTTP: the first request after an idle spell (`--idle-s`, the bar's 2 minutes), added over
the median of the `WARM_N` after it, plain vs `rust: true` vs the lane, against mocks with slow
new connections; method: benches/README.md."""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx

from benches._common import (
    arg_parser,
    finish,
    fmt,
    log,
    machine,
    machine_line,
    median,
    start_proxy,
    table,
)
from devtools.deployments import deployment_kwargs, twin_models
from devtools.processes import MASTER_KEY, ServerProcess

ARMS = ("plain", "rust", "lane")
BAR_MS, WARM_N = 1.0, 5  # the bar (ms); warm requests after each first one
# Upstreams (one deployment of each arm on each): first requests after an idle spell per round.
UPSTREAMS = 3
# The mock closes connections idle this long, as servers and load balancers do (60 s is common).
KEEP_ALIVE_S = 60.0
BODY = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}


def timed(client: httpx.Client, arm: str, upstream: int) -> float:
    started, model = time.perf_counter(), f"{'plain' if arm == 'plain' else 'rust'}-{upstream}"
    client.post("/chat/completions", json={**BODY, "model": model}).raise_for_status()
    return (time.perf_counter() - started) * 1000


def dialed(mocks: list[ServerProcess]) -> int:
    counts = [httpx.get(f"{m.url}/mock/connections").json()["waited_by"] for m in mocks]
    return sum(int(c.get("POST /chat/completions", 0)) for c in counts)


def measure(idle_s: float, rounds: int, delay_ms: float) -> dict[str, Any]:
    flags = ("--connect-delay-ms", str(delay_ms), "--idle-close-s", str(KEEP_ALIVE_S))
    mocks = [ServerProcess(args=flags).__enter__() for _ in range(UPSTREAMS)]
    twins = (twin_models(str(i), deployment_kwargs("openai", m.url)) for i, m in enumerate(mocks))
    models = [model for pair in twins for model in pair]
    # The lane arm: the rust models of a second proxy, with the fast lane on.
    proxies = {"plain": start_proxy(models), "lane": start_proxy(models, lane=True)}
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    clients = {
        arm: httpx.Client(base_url=proxies[arm].url, headers=headers, timeout=60) for arm in proxies
    }
    clients["rust"] = clients["plain"]
    added: dict[str, list[float]] = {arm: [] for arm in ARMS}
    dials: dict[str, list[int]] = {arm: [] for arm in ARMS}
    try:
        for arm, i in ((a, i) for a in ARMS for i in range(UPSTREAMS)):
            timed(clients[arm], arm, i)  # every path has loaded what a first call loads
        for round_no in range(rounds):
            log(f"round {round_no + 1}/{rounds}: idle {idle_s:g} s")
            time.sleep(idle_s)  # the idle spell is the measurement
            for arm in ARMS[round_no % 3 :] + ARMS[: round_no % 3]:
                for i in range(UPSTREAMS):
                    before = dialed(mocks)
                    first = timed(clients[arm], arm, i)
                    warm = median([timed(clients[arm], arm, i) for _ in range(WARM_N)])
                    dials[arm].append(dialed(mocks) - before)
                    added[arm].append(first - warm)
    finally:
        for proxy in proxies.values():
            proxy.stop()
        for mock in mocks:
            mock.__exit__()
    config = {"idle_s": idle_s, "rounds": rounds, "connect_delay_ms": delay_ms}
    return {"config": config, "added_ms": added, "dials": dials}


def render(data: dict[str, Any]) -> str:
    cfg = data["config"]
    added, dials = data["added_ms"], data["dials"]
    rows = [[a, fmt(median(added[a])), fmt(max(added[a])), sum(dials[a])] for a in ARMS]
    plain, rust, lane = (median(added[arm]) for arm in ARMS)
    lines = [
        f"# HTTP: first request after {cfg['idle_s']:g} s idle ({time.strftime('%Y-%m-%d')})",
        "",
        f"One worker; {UPSTREAMS} mocks, connect delay {cfg['connect_delay_ms']:g} ms, idle "
        f"connections closed after {KEEP_ALIVE_S:g} s; {cfg['rounds']} rounds x {UPSTREAMS} "
        "upstreams per arm, arms interleaved (order rotating). Added: the first request "
        f"after the idle spell minus the median of the {WARM_N} right after it (ms); dials: "
        "connections those requests opened.",
        "",
        *table(["arm", "added p50", "added max", "dials"], rows),
        "",
        f"`rust: true` adds {fmt(rust)} ms, with the lane {fmt(lane)} ms (bar <= {BAR_MS:g} "
        f"ms); LiteLLM's path adds {fmt(plain)} ms.",
        "",
        machine_line(data["machine"]),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__ or "", "30 s idle spells instead of 120 s")
    parser.add_argument("--idle-s", type=float, default=120.0, help="the idle spell (bar: 120)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connect-delay-ms", type=float, default=100.0)
    args = parser.parse_args(argv)
    idle_s, info = 30.0 if args.quick else args.idle_s, machine(args.wait_quiet)
    data = {**measure(idle_s, args.rounds, args.connect_delay_ms), "machine": info}
    finish(args, f"warm-{time.strftime('%Y-%m-%d')}", render(data), data)
    return 0 if min(median(data["added_ms"][arm]) for arm in ARMS[1:]) <= BAR_MS else 1


if __name__ == "__main__":
    sys.exit(main())
