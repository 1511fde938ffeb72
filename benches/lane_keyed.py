"""The fast lane for a virtual key as LiteLLM's production setup has them (#26): a user, a team and
a key budget far from spent, LiteLLM's counters in Redis. The same key on the plain model and on
the lane, in one run (method and commands: benches/README.md)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from benches._common import (
    added,
    direct_step,
    finish,
    interleaved,
    log,
    machine,
    machine_line,
    start_proxy,
    table,
)
from benches.lane import LANE_RATES, LATENCY_RATE, PYTHON_RATES, chat_body, highest, step
from devtools import seeded_keys
from devtools.deployments import deployment_kwargs, twin_models
from devtools.processes import ServerProcess
from devtools.proxy_logger import read_events
from devtools.redis import RedisServer

KEY = "sk-bench-user-team-budget"
SEEDED = {
    "keys": {KEY: {"user_id": "bench-user", "team_id": "bench-team", "max_budget": 1000.0}},
    "users": {"bench-user": {}},
    "teams": {"bench-team": {}},
    "memberships": [{"user_id": "bench-user", "team_id": "bench-team"}],
}
ARMS = ("python", "lane")


def keyed(args: Any) -> None:
    secs, reps = (4.0, 1) if args.quick else (8.0, 3)
    data: dict[str, Any] = {"machine": machine(args.wait_quiet), "seeded": SEEDED}
    redis = RedisServer()
    try:
        redis.wait_ready()
        with ServerProcess() as mock:
            models = twin_models("bench", deployment_kwargs("openai", mock.url))
            events = Path(tempfile.mkdtemp(prefix="lane-keyed-")) / "events.jsonl"
            events.touch()
            env = {**redis.env(), seeded_keys.ENV: json.dumps(SEEDED)}
            proxy = start_proxy(models, lane=True, log_path=events, env=env, callbacks=[SEEDER])
            sent = 0

            def run(arm: str, rate: float, seconds: float = secs) -> dict[str, Any]:
                nonlocal sent
                body = chat_body(models[arm == "lane"]["model_name"])
                auth = ("-H", f"Authorization: Bearer {KEY}")
                result = step(proxy, arm, body, rate, seconds, headers=auth)
                sent += result["scheduled"] if arm == "lane" else 0
                return result

            try:
                for arm in ARMS:  # warm both, and teach the lane the key's verdict
                    run(arm, 50, 2.0)
                log(f"added latency at {LATENCY_RATE:g} req/s, {reps} interleaved repetitions")
                direct = chat_body("gpt-4o-mini")
                runs = {
                    "direct": lambda: direct_step(
                        mock.url + "/chat/completions", direct, LATENCY_RATE, secs
                    )
                }
                runs |= {arm: lambda a=arm: run(a, LATENCY_RATE) for arm in ARMS}
                data["latency"] = added(interleaved(runs, reps), "direct", ARMS)
                data["rates"] = {}
                for arm, ladder in {"python": PYTHON_RATES, "lane": LANE_RATES}.items():
                    log(f"highest rate at p99 <= 50 ms: {arm}")
                    data["rates"][arm] = highest(lambda r, a=arm: run(a, r), ladder)[0]
            finally:
                proxy.stop(term_timeout=60)
                proxy.__exit__(None, None, None)
            counts = [(e.get("lane") or {}) for e in read_events(events)]
            data["lane"] = {"sent": sent, "counts": max(counts, key=lambda c: c.get("served", 0))}
    finally:
        redis.stop()
    finish(args, "lane-keyed", render(data), data)


SEEDER = "devtools.seeded_keys.seeder"


def render(data: dict[str, Any]) -> str:
    add, rates, lane = data["latency"]["added"], data["rates"], data["lane"]
    rows = [
        [
            f"added {q} at {LATENCY_RATE:g} req/s",
            *(f"{add[a][q]:.2f} ms" for a in ARMS),
            f"**{add['lane'][q] / add['python'][q]:.3f}x**",
        ]
        for q in ("p50", "p99")
    ]
    rows.append(
        [
            "highest rate at p99 ≤ 50 ms",
            *(f"{rates[a]:g} req/s" for a in ARMS),
            f"**{rates['lane'] / max(1.0, rates['python']):.1f}x**",
        ]
    )
    served = lane["counts"].get("served", 0)
    return "\n".join(
        [
            "# The lane for a key with a user, a team and a budget (`benches/lane_keyed.py`)",
            "",
            machine_line(data["machine"]),
            "",
            *table(
                ["one worker, Redis, open loop", "Python (plain model)", "lane", "lane / Python"],
                rows,
            ),
            "",
            f"Requests of the key to the lane's model: {lane['sent']}; the lane served {served} "
            f"({served / max(1, lane['sent']):.1%}; the rest: "
            f"{ {k: v for k, v in lane['counts'].items() if k.startswith('lane_')} }).",
            "",
        ]
    )
