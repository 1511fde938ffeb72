"""The fast lane for a virtual key as LiteLLM's production setup has them (#26): a user, a team, a
key budget and an rpm limit far from spent, LiteLLM's counters and windows in Redis (with
`--route keyed-limits`, also a tpm limit and a parallel-request limit far from spent; with
`--route keyed-spend`, no budget or limit and LiteLLM's spend tracking on; with `--route
keyed-budget`, a budget and spend tracking; with `--route keyed-limits-spend`, every limit and
spend tracking: LiteLLM's production setup; with `--no-redis`, in the worker). The same key on
the plain model and on the lane, in one run (method and commands: benches/README.md)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from benches._common import (
    WARMUP,
    added,
    direct_step,
    finish,
    interleaved,
    log,
    machine,
    machine_line,
    median,
    start_proxy,
    table,
)
from benches.lane import chat_body, highest, python_behind, step
from devtools import seeded_keys
from devtools.deployments import deployment_kwargs, twin_models
from devtools.processes import ServerProcess
from devtools.proxy_logger import read_events
from devtools.redis import RedisServer

KEY = "sk-bench-user-team-budget-rpm"
# The rpm limit is far above what a minute of the ladders sends (150 req/s at most).
SEEDED = {
    "keys": {
        KEY: {
            "user_id": "bench-user",
            "team_id": "bench-team",
            "max_budget": 1000.0,
            "rpm_limit": 1_000_000,
        }
    },
    "users": {"bench-user": {}},
    "teams": {"bench-team": {}},
    "memberships": [{"user_id": "bench-user", "team_id": "bench-team"}],
}
# Every limit the lane counts (#26): the tpm limit far above a minute of the ladders' tokens, the
# parallel limit far above the requests in flight.
LIMITED_KEY = "sk-bench-user-team-budget-all-limits"
LIMITED = {
    **SEEDED,
    "keys": {
        LIMITED_KEY: {
            **SEEDED["keys"][KEY],
            "tpm_limit": 1_000_000_000,
            "max_parallel_requests": 10_000,
        }
    },
}
# A key with a user and a team and nothing to enforce, LiteLLM's spend tracking on (its cost
# callback, as with a database): the lane logs and bills its requests in batches (#27).
SPEND_KEY = "sk-bench-user-team-spend"
SPEND = {
    **SEEDED,
    "keys": {SPEND_KEY: {"user_id": "bench-user", "team_id": "bench-team"}},
}
# A key with a user, a team and a budget far from spent, spend tracked: each of its requests
# holds the budget, and the lane logs and bills them in batches, each with its own reservation.
BUDGET_KEY = "sk-bench-user-team-budget"
BUDGET = {
    **SEEDED,
    "keys": {BUDGET_KEY: {"user_id": "bench-user", "team_id": "bench-team", "max_budget": 1000.0}},
}
# By route: its key, what is seeded, and whether LiteLLM's spend tracking is on.
ROUTES = {
    "keyed": (KEY, SEEDED, False),
    "keyed-limits": (LIMITED_KEY, LIMITED, False),
    "keyed-spend": (SPEND_KEY, SPEND, True),
    "keyed-budget": (BUDGET_KEY, BUDGET, True),
    "keyed-limits-spend": (LIMITED_KEY, LIMITED, True),
}
ARMS = ("python", "lane")


# Below what one worker's plain path holds for such a key here (40 req/s), so that its latency
# is the path's, not a queue's.
RATE = 20.0
# The ladders for such a key start lower than `lane.py`'s: LiteLLM's Python for one of its
# requests (auth with its user, team and membership, the reservation and its settlement in Redis)
# takes tens of milliseconds here, on the plain path and in the lane's replay.
KEYED_PYTHON_RATES = [5, 10, 20, 30, 40, 60]
KEYED_LANE_RATES = [10, 20, 30, 40, 60, 80, 100, 120, 150, 200]
SPEND_LANE_RATES = [20, 40, 80, 120, 160, 200, 250, 300, 400, 500]


def keyed(args: Any) -> None:
    secs, reps = (4.0, 1) if args.quick else (8.0, 3)
    key, seeded, spend = ROUTES[args.route]
    data: dict[str, Any] = {
        "machine": machine(args.wait_quiet),
        "seeded": seeded,
        "rate": RATE,
        "redis": not args.no_redis,
        "spend": spend,
    }
    redis = None if args.no_redis else RedisServer()
    proxies: dict[str, Any] = {}
    try:
        if redis is not None:
            redis.wait_ready()
        with ServerProcess() as mock:
            models = twin_models("bench", deployment_kwargs("openai", mock.url))
            workdir = Path(tempfile.mkdtemp(prefix="lane-keyed-"))
            env = {**(redis.env() if redis else {}), seeded_keys.ENV: json.dumps(seeded)}
            if spend:
                env[seeded_keys.SPEND_ENV] = "1"
            # The plain model on a proxy of its own, as in `lane.py`: the lane's replays of one
            # step must not run into the next step of the other arm.
            for arm in ARMS:
                (events := workdir / f"{arm}.jsonl").touch()
                proxies[arm] = start_proxy(
                    models, lane=arm == "lane", log_path=events, env=env, callbacks=[SEEDER]
                )
            sent = 0

            def run(arm: str, rate: float, seconds: float = secs) -> dict[str, Any]:
                nonlocal sent
                body = chat_body(models[arm == "lane"]["model_name"])
                auth = ("-H", f"Authorization: Bearer {key}")
                result = step(proxies[arm], arm, body, rate, seconds, headers=auth)
                if arm == "lane":
                    sent += result["scheduled"] + WARMUP
                    # Its Python's backlog: the lane's step holds only if that kept up (`highest`).
                    result["behind"] = python_behind(proxies[arm], 1)
                return result

            for arm in ARMS:  # warm both, and teach the lane the key's verdict
                run(arm, RATE, 2.0)
            log(f"added latency at {RATE:g} req/s, {reps} interleaved repetitions")
            url, direct = mock.url + "/chat/completions", chat_body("gpt-4o-mini")
            runs = {"direct": lambda: direct_step(url, direct, RATE, secs)}
            runs |= {arm: lambda a=arm: run(a, RATE) for arm in ARMS}
            steps = interleaved(runs, reps)
            data["latency"] = added(steps, "direct", ARMS)
            data["cpu_ms"] = {a: median(s["cpu_ms_per_request"] for s in steps[a]) for a in ARMS}
            # The share the lane served at that load (the ladder below overloads it on purpose).
            data["lane"] = {"sent": sent, "counts": lane_counts(workdir / "lane.jsonl")}
            data["rates"] = {}
            lane_rates = SPEND_LANE_RATES if spend else KEYED_LANE_RATES
            for arm, ladder in {"python": KEYED_PYTHON_RATES, "lane": lane_rates}.items():
                log(f"highest rate at p99 <= 50 ms: {arm}")
                data["rates"][arm] = highest(lambda r, a=arm: run(a, r), ladder)[0]
    finally:
        for proxy in proxies.values():
            proxy.stop(term_timeout=60)
            proxy.__exit__(None, None, None)
        if redis is not None:
            redis.stop()
    name = f"lane-{args.route}" + ("-worker" if args.no_redis else "")
    finish(args, name, render(data), data)


def lane_counts(events: Path) -> dict[str, int]:
    """The lane's counts as its proxy's recorder last logged them."""
    counts = [(e.get("lane") or {}) for e in read_events(events)]
    return max(counts, key=lambda c: c.get("served", 0), default={})


SEEDER = "devtools.seeded_keys.seeder"


def render(data: dict[str, Any]) -> str:
    add, rates, lane = data["latency"]["added"], data["rates"], data["lane"]
    rows = [
        [
            f"added {q} at {data['rate']:g} req/s",
            *(f"{add[a][q]:.2f} ms" for a in ARMS),
            f"**{add['lane'][q] / add['python'][q]:.3f}x**",
        ]
        for q in ("p50", "p99")
    ]
    cpu = data["cpu_ms"]
    rows.append(
        [
            "proxy CPU per request",
            *(f"{cpu[a]:.2f} ms" for a in ARMS),
            f"**{cpu['lane'] / cpu['python']:.2f}x**",
        ]
    )
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
            _title(data["seeded"], data.get("spend", False)) + " (`benches/lane_keyed.py`)",
            "",
            machine_line(data["machine"]),
            "",
            *table(
                [
                    f"one worker, {'Redis' if data.get('redis', True) else 'no Redis'}, open loop",
                    "Python (plain model)",
                    "lane",
                    "lane / Python",
                ],
                rows,
            ),
            "",
            f"The key's requests to the lane's model at {data['rate']:g} req/s, warm-up included: "
            f"{lane['sent']}; the lane served {served} "
            f"({served / max(1, lane['sent']):.1%}; the rest: "
            f"{ {k: v for k, v in lane['counts'].items() if k.startswith('lane_')} }).",
            "",
        ]
    )


def _title(seeded: dict[str, Any], spend: bool) -> str:
    [fields] = seeded["keys"].values()
    if "max_budget" not in fields:
        return "# The lane for a key with a user and a team, spend tracked as with a database"
    if "rpm_limit" not in fields:
        return (
            "# The lane for a key with a user, a team and a budget, spend tracked as with a "
            "database"
        )
    limits = ", a tpm limit and a parallel-request limit" if "tpm_limit" in fields else ""
    tracked = ", spend tracked as with a database" if spend else ""
    return f"# The lane for a key with a user, a team, a budget and an rpm limit{limits}{tracked}"
