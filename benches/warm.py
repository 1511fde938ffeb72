"""HTTP: the first request after an idle spell, added over a warm request, plain vs `rust: true`.

One proxy worker, one mock provider whose new connections wait `--connect-delay-ms` (100 ms)
before they are read (a provider's connect and TLS handshake), two model groups of the same
deployment: `plain-openai` (LiteLLM's path) and `rust-openai` (`rust: true`, the warmer's
default `fastpath_warm_connections`). Each round: nothing for `--idle-s` (the bar's 2 minutes),
then per arm (order alternating by round) the first request and `WARM_N` right after it; the
added latency is the first minus the median of those. The mock counts the connections the
calls dialed themselves (a warmer's connection does not count).
"""

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

ARMS = ("plain-openai", "rust-openai")
BAR_MS = 1.0
WARM_N = 5
BODY = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}


def timed(client: httpx.Client, model: str) -> float:
    started = time.perf_counter()
    response = client.post("/chat/completions", json={**BODY, "model": model})
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return elapsed


def dialed(mock: ServerProcess) -> int:
    counts = httpx.get(f"{mock.url}/mock/connections").json()["opened_by"]
    return int(counts.get("POST /chat/completions", 0))


def measure(idle_s: float, rounds: int, delay_ms: float) -> dict[str, Any]:
    mock = ServerProcess(args=("--connect-delay-ms", str(delay_ms))).__enter__()
    proxy = start_proxy(twin_models("openai", deployment_kwargs("openai", mock.url)))
    added: dict[str, list[float]] = {arm: [] for arm in ARMS}
    dials: dict[str, list[int]] = {arm: [] for arm in ARMS}
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    try:
        with httpx.Client(base_url=proxy.url, headers=headers, timeout=60) as client:
            for arm in ARMS:  # both paths have loaded what a first call loads
                timed(client, arm)
            for round_no in range(rounds):
                log(f"round {round_no + 1}/{rounds}: idle {idle_s:g} s")
                time.sleep(idle_s)  # the idle spell is the measurement
                for arm in ARMS if round_no % 2 == 0 else ARMS[::-1]:
                    before = dialed(mock)
                    first = timed(client, arm)
                    warm = median([timed(client, arm) for _ in range(WARM_N)])
                    after = dialed(mock)
                    added[arm].append(first - warm)
                    dials[arm].append(after - before)
    finally:
        proxy.stop()
        mock.__exit__()
    return {
        "config": {"idle_s": idle_s, "rounds": rounds, "connect_delay_ms": delay_ms, "workers": 1},
        "added_ms": added,
        "dials": dials,
    }


def render(data: dict[str, Any]) -> str:
    cfg = data["config"]
    added, dials = data["added_ms"], data["dials"]
    rows = [[a, fmt(median(added[a])), fmt(max(added[a])), sum(dials[a])] for a in ARMS]
    plain, rust = (median(added[arm]) for arm in ARMS)
    lines = [
        f"# HTTP: first request after {cfg['idle_s']:g} s idle ({time.strftime('%Y-%m-%d')})",
        "",
        f"One worker; mock connect delay {cfg['connect_delay_ms']:g} ms; {cfg['rounds']} rounds "
        "per arm, arms interleaved (order alternating). Added: the first request after the "
        f"idle spell minus the median of the {WARM_N} right after it (ms); dials: connections "
        "those requests opened.",
        "",
        *table(["arm", "added p50", "added max", "dials"], rows),
        "",
        f"`rust: true` adds {fmt(rust, 2)} ms (bar <= {BAR_MS:g} ms); LiteLLM's path adds "
        f"{fmt(plain, 2)} ms.",
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
    idle_s = 30.0 if args.quick else args.idle_s
    info = machine(args.wait_quiet)
    data = {**measure(idle_s, args.rounds, args.connect_delay_ms), "machine": info}
    finish(args, f"warm-{time.strftime('%Y-%m-%d')}", render(data), data)
    rust = median(data["added_ms"]["rust-openai"])
    return 0 if rust <= BAR_MS else 1


if __name__ == "__main__":
    sys.exit(main())
