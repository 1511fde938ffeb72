"""The fast lane (`fastpath_lane: true`) through the proxy against the plain model and `rust: true`
(and on `/v1/messages` LiteLLM's native route), in one run (method and commands:
benches/README.md)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benches._common import (
    CHECKS,
    MESSAGES,
    WARMUP,
    added,
    arg_parser,
    direct_step,
    finish,
    interleaved,
    load_step,
    log,
    machine,
    machine_line,
    median,
    start_proxy,
    table,
)
from benches.messages import deployment
from devtools.deployments import BEDROCK_MODEL_ID, deployment_kwargs, twin_models
from devtools.processes import MASTER_KEY, ServerProcess
from devtools.proxy_logger import read_events

ROUTE = "/chat/completions"
LATENCY_RATE = 45.0
P99_BAR_MS = 50.0
ARMS = ("python", "rust", "lane")
# Up to what one worker of the plain model held on the fastest machine state seen (≥ 160 req/s).
PYTHON_RATES = [40, 60, 80, 100, 120, 140, 160, 200, 250, 300]
# Streams (`--stream`, 8 chunks each): LiteLLM's path spends about 1 ms of the worker per chunk.
STREAM_LATENCY_RATE = 20.0
STREAM_PYTHON_RATES = [10, 15, 20, 25, 30, 40, 50, 60]
LANE_RATES = [100, 150, 200, 250, 300, 350, 400, 500, 600, 800, 1000, 1200, 1400, 1600, 2000]
MESSAGES_ROUTE = "/v1/messages"
SDK_HEADERS = ("-H", f"x-api-key: {MASTER_KEY}", "-H", "anthropic-version: 2023-06-01")
MESSAGE_ARMS = ("python", "native", "rust", "lane")
KINDS = ("plain", "stream")
NAMES = {"python": "Python (plain model)", "native": "LiteLLM native (`LITELLM_RUST=1`)"}
NAMES |= {"rust": "`rust: true`", "lane": "lane"}


def step(server: Any, arm: str, body: dict, rate: float, secs: float, **kw: Any) -> dict[str, Any]:
    """`load_step` on `server` (the chat route unless `route=`), checked as `arm`'s answers; the
    proxy's CPU per request counts the unrecorded warm-up ones too."""
    route = kw.pop("route", ROUTE)
    s = load_step(server, route, body, CHECKS["rust" if arm == "lane" else arm], rate, secs, **kw)
    del s["latencies_ms"]
    return s | {"cpu_ms_per_request": s["proxy_cpu_s"] / max(1, s["ok"] + WARMUP) * 1000}


def chat_body(model: str) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES}


def stream_body(model: str) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "stream": True}


def stream_usage_body(model: str) -> dict[str, Any]:
    """A stream whose client asks for its usage chunk (the proxy writes it: LiteLLM's usage)."""
    return {**stream_body(model), "stream_options": {"include_usage": True}}


# A lane step holds only if the proxy's Python was at most this far behind the lane's answers at
# its end: the lane answers without waiting for it, and its backlog (up to 2,048) could otherwise
# carry a rate the Python cannot keep up with through a step.
BEHIND_BAR_S = 1.0


def highest(run: Any, rates: list[float]) -> tuple[float, list[dict]]:
    """The ladder up to the first rate not held (errors, p99 > 50 ms, < 95% achieved, or the
    lane's Python more than `BEHIND_BAR_S` behind)."""
    best, steps = 0.0, []
    for rate in rates:
        steps.append(s := run(rate))
        behind = s.get("behind", 0)
        log(
            f"  {rate:>6.0f} req/s: p99 {s['lat']['p99']:.1f} ms, errors {s['errors']}"
            + ("" if "behind" not in s else f", Python behind by {behind} requests")
        )
        if s["errors"] or s["lat"]["p99"] > P99_BAR_MS or s["achieved_rps"] < 0.95 * rate:
            break
        if behind is None or behind > rate * BEHIND_BAR_S:
            break
        best = rate
    return best, steps


def python_behind(server: Any, workers: int) -> int | None:
    """Requests a lane proxy's workers are still to do Python work for (LiteLLM's in-flight
    count, which includes the lane's served requests not yet replayed or accounted): the most
    one of several reads (each reaches one worker) saw; None when a worker did not answer
    within 10 s (its Python is further behind than that)."""
    seen = [0]
    for _ in range(2 * workers):
        try:
            answer = server.get("/health/backlog", timeout=10)
        except httpx.TimeoutException:
            return None
        if answer.status_code == 200:
            seen.append(int(answer.json().get("in_flight_requests") or 0))
    return max(seen)


SERVERS = {"python": "plain", "rust": "plain", "native": "native", "lane": "lane"}
SETTINGS: dict[str, Any] = {"native": {"env": {"LITELLM_RUST": "1"}}, "lane": {"lane": True}}


class Arms:
    """The proxies the arms run on, each with the event recorder, and one load step per arm: the
    `python` and `rust` arms on one proxy (the plain and `rust: true` twins of one deployment),
    `native` on a second with LiteLLM's native routes (`LITELLM_RUST=1`, the plain twin), `lane`
    on a third with the fast lane (the `rust: true` twin), whose every worker has learnt the
    master key (from requests it served) when they start. Stops them on exit, a lane with time
    to replay what it served."""

    def __init__(
        self,
        params: dict,
        arms: Any,
        body: Any = chat_body,
        workers: int = 1,
        recorder: bool = True,
        router_settings: dict[str, Any] | None = None,
        **kw: Any,
    ):
        self.models, self.body, self.kw = twin_models("bench", params), body, kw
        self.proxy_kw = {} if router_settings is None else {"router_settings": router_settings}
        self.workers, self.recorder = workers, recorder
        workdir, self.lane_steps = Path(tempfile.mkdtemp(prefix="lane-bench-")), []
        self.servers: dict[str, Any] = {}
        route, bodies = kw.get("route", ROUTE), [body(m["model_name"]) for m in self.models]
        try:
            for name in dict.fromkeys(SERVERS[arm] for arm in arms):
                log_path = workdir / f"{name}-{workers}.jsonl"
                log_path.touch()
                settings = {**SETTINGS.get(name, {}), **self.proxy_kw}
                logged = log_path if recorder else None
                server = start_proxy(self.models, workers=workers, log_path=logged, **settings)
                self.servers[name], server.log_file = server, log_path
                for _ in range(3 * workers):  # every worker's lane learns the key's verdict
                    for request in bodies:
                        server.post(route, json=request)
                time.sleep(0.5)
        except BaseException:
            self.__exit__()  # the proxies already started
            raise

    def step(self, arm: str, rate: float, secs: float, **body: Any) -> dict[str, Any]:
        server = self.servers[SERVERS[arm]]
        model = self.models[arm in ("rust", "lane")]["model_name"]
        result = step(server, arm, self.body(model, **body), rate, secs, **self.kw)
        if arm == "lane":
            self.lane_steps.append(result)
            result["behind"] = python_behind(server, self.workers)
        return result

    def callbacks(self) -> dict[str, Any] | None:
        """The lane proxy's logged events (read after its exit) against the requests it answered:
        each step's measured and warm-up ones, and the 3 per worker that taught it the key (None
        without the recorder)."""
        if not self.recorder:
            return None
        events, steps = read_events(self.servers["lane"].log_file), self.lane_steps
        return {
            "lane_events": sum(e.get("model_group") == "rust-bench" for e in events),
            "lane_requests": sum(s["ok"] + WARMUP for s in steps) + 3 * self.workers,
            "lane_errors": sum(s["errors"] for s in steps),
            "lane_served": max([(e.get("lane") or {}).get("served", 0) for e in events] or [0]),
        }

    def __enter__(self) -> Arms:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for server in self.servers.values():
            server.stop(term_timeout=60)  # a lane worker drains its replays, then exits
            server.__exit__(None, None, None)


def chat(args: Any) -> None:
    """Chat: added latency and CPU per request, each arm's highest rate, the lane with two
    workers; every proxy with the event recorder (a logging callback), or with none."""
    secs = 4.0 if args.quick else 8.0
    reps = 1 if args.quick else 3
    recorder = not args.no_callbacks
    streamed = args.stream or args.stream_usage
    body = stream_usage_body if args.stream_usage else stream_body if streamed else chat_body
    rate = STREAM_LATENCY_RATE if streamed else LATENCY_RATE
    python_rates = STREAM_PYTHON_RATES if streamed else PYTHON_RATES
    data: dict[str, Any] = {"machine": machine(args.wait_quiet), "recorder": recorder}
    data |= {"stream": streamed, "stream_usage": args.stream_usage, "rate": rate}
    data["ladder_ends"] = [python_rates[-1], LANE_RATES[-1]]
    if args.slots:
        data["slots"] = args.slots
    if args.usage:
        data["usage"] = True
    # Usage-based routing: the router picks by each deployment's usage this minute, which its
    # strategy counts (the lane picks and counts alike, `src/lane/routing.rs`).
    routing = {"routing_strategy": "usage-based-routing-v2"} if args.routing else None
    if args.routing:
        data["routing"] = True
    with ServerProcess() as mock:
        params = deployment_kwargs("openai", mock.url)
        if args.slots:
            # The router's slots for calls in flight, which the lane shares (`lane/slots.py`).
            params["max_parallel_requests"] = args.slots
        if args.usage:
            # The router counts the group's usage per minute and puts it in its answers'
            # headers (`lane/usage.py`); far from spent (the rpm gives as many slots).
            params |= {"rpm": 1_000_000, "tpm": 1_000_000_000}
        with Arms(
            params, ARMS, body, recorder=recorder, router_settings=routing, mock_pid=mock.pid
        ) as arms:
            for arm in ARMS:  # warm every arm
                arms.step(arm, 50, 2.0)
            log(f"added latency at {rate:g} req/s, {reps} interleaved repetitions")
            direct_body = body("gpt-4o-mini")
            runs = {"direct": lambda: direct_step(mock.url + ROUTE, direct_body, rate, secs)}
            runs |= {arm: lambda a=arm: arms.step(a, rate, secs) for arm in ARMS}
            steps = interleaved(runs, reps)
            data["latency"] = {**added(steps, "direct", ARMS), "steps": steps}
            log("highest rate at p99 <= 50 ms")
            ladders = {"python": python_rates, "rust": python_rates, "lane": LANE_RATES}
            data["rates"] = {}
            for arm, ladder in ladders.items():
                log(f" {arm}")
                best, ladder_steps = highest(lambda r, a=arm: arms.step(a, r, secs), ladder)
                data["rates"][arm] = {"max": best, "steps": ladder_steps}
        data["callbacks"] = arms.callbacks()
        with Arms(params, ["lane"], body, 2, recorder, routing, mock_pid=mock.pid) as two:
            log(" lane, two workers")
            best2, steps2 = highest(lambda r: two.step("lane", r, secs), LANE_RATES)
        data["rates"]["lane_2_workers"] = {"max": best2, "steps": steps2}
    kind = "-stream-usage" if args.stream_usage else "-stream" if streamed else ""
    name = ("lane" if recorder else "lane-no-callbacks") + kind
    group = "-slots" if args.slots else "-usage" if args.usage else ""
    if streamed and args.usage:
        group = "-group-usage"  # `-stream-usage` names the usage chunk's run
    name += group + ("-routing" if args.routing else "")
    finish(args, name, render(data), data, plot=lambda plt: plot(data, plt), alt=PLOT_ALT)


PLOT_ALT = "p99 latency against offered rate, one worker: Python, rust: true, lane"


def plot(data: dict[str, Any], plt: Any) -> Any:
    """p99 per offered rate for each arm (one worker, and the lane with two)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, label in (
        ("python", "plain model"),
        ("rust", "rust: true"),
        ("lane", "lane"),
        ("lane_2_workers", "lane, 2 workers"),
    ):
        steps = data["rates"][arm]["steps"]
        ax.plot([s["rate"] for s in steps], [s["lat"]["p99"] for s in steps], "o-", label=label)
    ax.axhline(P99_BAR_MS, color="grey", linestyle=":", label="p99 50 ms")
    ax.set_xlabel("offered rate (req/s, open loop)")
    ax.set_ylabel("p99 latency (ms, log)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Through the proxy: p99 against rate")
    return fig


def ran_out(rate: dict[str, Any], ends: Any = (PYTHON_RATES[-1], LANE_RATES[-1])) -> bool:
    """Whether an arm held every step of its ladder (`ends`: the ladders' last rates): its
    highest rate is a lower bound."""
    steps = rate["steps"]
    return bool(steps) and rate["max"] == steps[-1]["rate"] and steps[-1]["rate"] in ends


def render(data: dict[str, Any]) -> str:
    add, rates = data["latency"]["added"], data["rates"]
    rate = data.get("rate", LATENCY_RATE)
    rows = []
    for q in ("p50", "p99"):
        ratio = f"**{add['lane'][q] / add['python'][q]:.3f}x**"
        rows.append([f"added {q} at {rate:g} req/s", *(f"{add[a][q]:.2f} ms" for a in ARMS), ratio])
    cpu = {a: median(s["cpu_ms_per_request"] for s in data["latency"]["steps"][a]) for a in ARMS}
    rows.append(
        [
            f"proxy CPU per request at {rate:g} req/s",
            *(f"{cpu[a]:.2f} ms" for a in ARMS),
            f"**{cpu['lane'] / cpu['python']:.3f}x**",
        ]
    )
    at_least = {
        a: "≥ "
        if ran_out(rates[a], data.get("ladder_ends", (PYTHON_RATES[-1], LANE_RATES[-1])))
        else ""
        for a in rates
    }
    ratio = f"**{at_least['lane']}{rates['lane']['max'] / max(1.0, rates['python']['max']):.1f}x**"
    rows.append(
        [
            "highest rate at p99 ≤ 50 ms",
            *(f"{at_least[a]}{rates[a]['max']:g} req/s" for a in ARMS),
            ratio,
        ]
    )
    top = next((s for s in rates["lane"]["steps"] if s["rate"] == rates["lane"]["max"]), None)
    cores = (
        f"At the lane's highest rate the proxy used {top['proxy_cores']:.2f} cores, the load "
        f"generator {top['gen_cores']:.2f} and the mock {top['mock_cores']:.2f} (2 cores in all)."
        if top is not None and top.get("mock_cores") is not None
        else ""
    )
    head = ["one worker, open loop", "Python (plain model)", "rust: true", "lane", "lane / Python"]
    two = rates["lane_2_workers"]["max"] / max(1.0, rates["lane"]["max"])
    calls = data["callbacks"]
    return "\n".join(
        [
            "# The fast lane through the proxy (`benches/lane.py"
            + ("" if data.get("recorder", True) else " --no-callbacks")
            + (
                " --stream-usage"
                if data.get("stream_usage")
                else " --stream"
                if data.get("stream")
                else ""
            )
            + (f" --slots {data['slots']}" if data.get("slots") else "")
            + (" --usage" if data.get("usage") else "")
            + (" --routing" if data.get("routing") else "")
            + "`)",
            "",
            machine_line(data["machine"]),
            "",
            *table(head, rows),
            "",
            f"Lane with two workers: {at_least['lane_2_workers']}"
            f"{rates['lane_2_workers']['max']:g} req/s "
            f"({two:.2f}x one worker). Rates are the last step of the ladder that held (no "
            "errors, p99 ≤ 50 ms, ≥ 95% achieved and, on the lane, its proxy's Python at most "
            f"{BEHIND_BAR_S:g} s of requests behind at the step's end, by `/health/backlog`); ≥ "
            "when the ladder ran out.",
            "",
            cores,
            "",
            (
                f"Callbacks on the lane proxy: {calls['lane_events']} events for "
                f"{calls['lane_requests']} requests answered (errors: {calls['lane_errors']}; a "
                "request that timed out at the client may still have been answered and logged)."
                if calls is not None
                else "No callbacks configured: LiteLLM's own and the accelerator only; the lane "
                "accounts for its requests without replaying them (`lane/accounting.py`)."
            ),
            "",
        ]
    )


# -- /v1/messages ---------------------------------------------------------------------------------


def body(model: str, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "max_tokens": 64} | (
        {"stream": True} if stream else {}
    )


def direct_target(provider: str, mock_url: str, stream: bool) -> tuple[str, dict[str, Any]]:
    """The same request sent straight to the mock: its URL and body."""
    if provider == "bedrock":
        path = "invoke-with-response-stream" if stream else "invoke"
        invoke = {"anthropic_version": "bedrock-2023-05-31", "messages": MESSAGES}
        return f"{mock_url}/model/{BEDROCK_MODEL_ID}/{path}", {**invoke, "max_tokens": 64}
    return mock_url + MESSAGES_ROUTE, body("claude-sonnet-4-5", stream)


def messages(args: Any) -> None:
    """`/v1/messages`, non-streaming and streamed: added latency and CPU per request."""
    provider = args.provider
    # LiteLLM's native `/v1/messages` route serves `anthropic/…` only.
    arms = MESSAGE_ARMS if provider == "anthropic" else MESSAGE_ARMS[:1] + MESSAGE_ARMS[2:]
    secs = 4.0 if args.quick else 8.0
    reps = 1 if args.quick else 3
    data: dict[str, Any] = {"machine": machine(args.wait_quiet), "rate": LATENCY_RATE}
    data |= {"provider": provider, "arms": list(arms)}
    with ServerProcess() as mock:
        params, rate = deployment(provider, mock.url), LATENCY_RATE
        with Arms(params, arms, body, headers=SDK_HEADERS, route=MESSAGES_ROUTE) as on:
            runs: dict[tuple[str, str], Any] = {}
            for kind in KINDS:
                stream = kind == "stream"
                url, sent = direct_target(provider, mock.url, stream)
                runs[kind, "direct"] = lambda u=url, b=sent: direct_step(u, b, rate, secs)
                for arm in arms:
                    runs[kind, arm] = lambda a=arm, s=stream: on.step(a, rate, secs, stream=s)
            for arm, kind in ((a, k) for a in arms for k in KINDS):  # warm every arm
                on.step(arm, rate, 2.0, stream=kind == "stream")
            steps = interleaved(runs, reps)
    data["kinds"] = {}
    for kind in KINDS:
        data["kinds"][kind] = added({a: steps[kind, a] for a in ("direct", *arms)}, "direct", arms)
        cpu = {a: median(s["cpu_ms_per_request"] for s in steps[kind, a]) for a in arms}
        data["kinds"][kind]["cpu_ms_per_request"] = cpu
    data["steps"] = {kind: {a: steps[kind, a] for a in ("direct", *arms)} for kind in KINDS}
    data["callbacks"] = on.callbacks()
    name = "lane-messages" if provider == "anthropic" else f"lane-messages-{provider}"
    finish(args, name, render_messages(data), data)


def render_messages(data: dict[str, Any]) -> str:
    arms = data.get("arms", list(MESSAGE_ARMS))
    against = [a for a in ("python", "native") if a in arms]
    target = "Bedrock Invoke (Claude)" if data.get("provider") == "bedrock" else "`anthropic/…`"
    head = ["", *(NAMES[a] for a in arms)]
    head += [f"lane / {'plain' if a == 'python' else a}" for a in against]

    def row(label: str, values: dict[str, float]) -> list[str]:
        ratios = [f"**{values['lane'] / values[a]:.3f}x**" for a in against]
        return [label, *(f"{values[a]:.2f} ms" for a in arms), *ratios]

    rows = []
    for kind, label in (("plain", "non-streaming"), ("stream", "streamed, 64 deltas")):
        add = data["kinds"][kind]["added"]
        rows += [row(f"{label}: added {q}", {a: add[a][q] for a in arms}) for q in ("p50", "p99")]
        rows.append(
            row(f"{label}: proxy CPU per request", data["kinds"][kind]["cpu_ms_per_request"])
        )
    calls = data["callbacks"]
    return "\n".join(
        [
            f"# `/v1/messages` to {target} on the fast lane (`benches/lane.py --route messages`)",
            "",
            machine_line(data["machine"]),
            "",
            f"One worker, open loop at {data['rate']:g} req/s, Anthropic SDK headers; added "
            "latency over the same request sent to the mock directly (to the last byte of a "
            "stream), and the proxy's CPU per request (its process tree).",
            "",
            *table(head, rows),
            "",
            f"Lane proxy: {calls['lane_served']} requests served by the lane; "
            f"{calls['lane_events']} callback events for {calls['lane_requests']} requests "
            f"answered (errors: {calls['lane_errors']}).",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__ or "", "shorter steps")
    parser.add_argument(
        "--route",
        choices=(
            "chat",
            "messages",
            "keyed",
            "keyed-limits",
            "keyed-spend",
            "keyed-budget",
            "keyed-limits-spend",
        ),
        default="chat",
    )
    parser.add_argument(
        "--provider", choices=("anthropic", "bedrock"), default="anthropic", help="messages only"
    )
    parser.add_argument(
        "--no-callbacks",
        action="store_true",
        help="chat: no logging callback on the proxies (the event recorder is one)",
    )
    parser.add_argument(
        "--stream", action="store_true", help="chat: streamed requests (`stream: true`)"
    )
    parser.add_argument(
        "--stream-usage",
        action="store_true",
        help="chat: streamed requests asking for the usage chunk (`stream_options.include_usage`)",
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=0,
        help="chat: the deployment has this many slots for calls in flight (max_parallel_requests)",
    )
    parser.add_argument(
        "--usage",
        action="store_true",
        help="chat: the group has rpm and tpm limits far from spent (the router counts its usage)",
    )
    parser.add_argument(
        "--routing",
        action="store_true",
        help="chat: the router picks by usage (usage-based-routing-v2), which it counts",
    )
    parser.add_argument(
        "--no-redis",
        action="store_true",
        help="keyed routes: LiteLLM's counters and windows in the worker, not in Redis",
    )
    args = parser.parse_args(argv)
    if args.route.startswith("keyed"):
        from benches.lane_keyed import keyed

        keyed(args)
    else:
        (chat if args.route == "chat" else messages)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
