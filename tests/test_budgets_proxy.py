"""Budgets and rate limits through the real proxy, on LiteLLM's path and on the fast path (#29).

Three proxies (arms) share one recording upstream and the same seeded keys, users and teams
(`tests.spend_probe`): `plain` serves every model on LiteLLM's Python path, `rust` serves the
same deployments with `rust: true`, `lane` adds `fastpath_lane: true`. Per route (chat and
/v1/messages, whole and streamed, embeddings, Bedrock transcription), sequences of requests past
a key, user or team budget, past an rpm or tpm limit, failing upstream, and for a key without
limits (the lane serves those) must get the same answers request by request on every arm and
leave LiteLLM's spend state (`spend_probe.snapshot`) the same: spend in the auth cache, the
`spend:*` counters, reservations, queued spend-log rows and database updates, the v3 rate
limiter's counters; with Redis (a few routes), the counters there too.

LiteLLM's cost callback settles a request's budget reservation after the answer went out. The
probe can hold it: meanwhile the reservation must stay held for that callback on every arm, so
that requests still being settled count against a budget (what #29 found the fast path missing).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.answers import anthropic_stream_events, openai_stream_events, stream_pieces
from devtools.deployments import deployment_kwargs, embedding_deployment_kwargs
from devtools.polling import wait_until
from devtools.processes import ProxyProcess
from devtools.proxy_logger import lane_counts, logged_proxy, wait_for_count
from devtools.redis import RedisServer
from devtools.upstream import RecordingUpstream, Reply
from tests.conftest import VOLATILE_HEADERS as BASE_VOLATILE
from tests.conftest import stable_headers
from tests.test_transcription import AUDIO, bedrock_kwargs

pytestmark = [pytest.mark.proxy, pytest.mark.slow]

ARMS = ("plain", "rust", "lane")
HI = [{"role": "user", "content": "hi"}]
# Streams come from their own API base, whose replies the upstream serves as SSE.
STREAM_BASE = "/stream"
ROUTES = (
    "chat",
    "chat-stream",
    "messages",
    "messages-stream",
    "embeddings",
    "transcription",
)
# LiteLLM reserves nothing for a transcription: it cannot estimate what one will cost.
RESERVED_ROUTES = tuple(route for route in ROUTES if route != "transcription")
# Routes also tried with Redis: one answered whole, one streamed.
REDIS_ROUTES = frozenset({"chat", "messages-stream"})
# Routes the fast lane serves itself (for keys without budgets or limits).
LANE_ROUTES = frozenset({"chat", "chat-stream", "messages", "messages-stream"})
# Headers that differ on every request, or by arm.
VOLATILE_HEADERS = BASE_VOLATILE | {
    "x-litellm-callback-duration-ms",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "reset_at",  # a rate limit's window end, a clock
}
_IDS = re.compile(rb'"id": ?"[^"]*"')
_CREATED = re.compile(rb'"created": ?\d+')
_RESETS_AT = re.compile(rb"Limit resets at: [0-9: -]+ UTC")
SETTLE_TIMEOUT_S = 20.0
# What a snapshot taken while the cost callback is held is compared on (the rate limiter's own
# post-call work is not held, and may or may not have run by then).
IN_FLIGHT = ("open_reservations", "spend_counters")
# `tests.spend_probe`'s routes (a module for the proxy's process: importing it here would start
# its startup task in the test's).
SEED_PATH = "/spend-probe/seed"
SETTLEMENT_PATH = "/spend-probe/settlement"
SNAPSHOT_PATH = "/spend-probe/snapshot"
COUNTER_PATH = "/spend-probe/counter"
WINDOW_PATH = "/spend-probe/window"
RATE_COUNTER_PATH = "/spend-probe/rate-counter"


@dataclass
class Arm:
    name: str
    proxy: ProxyProcess
    log: Path
    # Answers with a 2xx status so far: each one's cost callback must have run before the
    # arm's spend state is settled.
    successes: int = 0


@dataclass(frozen=True)
class Answer:
    """What the client saw, minus what differs per request."""

    status: int
    body: Any
    headers: dict[str, str]
    fastpath: bool = field(compare=False)


def route_models(upstream: RecordingUpstream, rust: bool) -> list[dict[str, Any]]:
    """One model group per route, each with a fixed id (the spend rows name it)."""
    stream_url = f"{upstream.url}{STREAM_BASE}"
    params = {
        "chat": deployment_kwargs("openai", upstream.url),
        "chat-stream": deployment_kwargs("openai", stream_url),
        "messages": deployment_kwargs("anthropic", upstream.url),
        "messages-stream": deployment_kwargs("anthropic", stream_url),
        "embeddings": embedding_deployment_kwargs("openai", upstream.url),
        "transcription": bedrock_kwargs(upstream.url),
    }
    return [
        {
            "model_name": route,
            "litellm_params": {**litellm_params, **({"rust": True} if rust else {})},
            "model_info": {"id": f"{route}-deployment"},
        }
        for route, litellm_params in params.items()
    ]


def stream_replies(upstream: RecordingUpstream) -> None:
    sse = {"Content-Type": "text/event-stream"}
    openai = openai_stream_events("gpt-4o-mini", stream_pieces(3), include_usage=True)
    anthropic = anthropic_stream_events("claude-sonnet-4-5", stream_pieces(3))
    upstream.set_default(
        f"{STREAM_BASE}/chat/completions", Reply(body=b"".join(openai), headers=sse)
    )
    upstream.set_default(f"{STREAM_BASE}/v1/messages", Reply(body=b"".join(anthropic), headers=sse))


@contextlib.contextmanager
def running_arms(
    upstream: RecordingUpstream,
    tmp_path_factory: pytest.TempPathFactory,
    env: Callable[[str], dict[str, str]],
) -> Iterator[dict[str, Arm]]:
    """The three proxies, started at once, each with `env(arm name)` in its environment."""
    stream_replies(upstream)
    started: dict[str, Arm] = {}
    for name in ARMS:
        log = tmp_path_factory.mktemp(name) / "events.jsonl"
        log.touch()
        settings = {"fastpath_lane": True} if name == "lane" else {}
        proxy = logged_proxy(
            route_models(upstream, rust=name != "plain"),
            log,
            callbacks=("tests.spend_probe.probe",),
            env=env(name),
            **settings,
        )
        started[name] = Arm(name, proxy, log)
    try:
        on_each(started, lambda arm: arm.proxy.start())
        on_each(started, wait_for_probe)
        yield started
        lane_log = started["lane"].proxy.log_text()
        assert "replay was declined by the fast path" not in lane_log
    finally:
        for arm in started.values():
            arm.proxy.stop()
            arm.proxy._cleanup_tmp()


@pytest.fixture(scope="module")
def memory_arms(
    upstream_server: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Arm]]:
    """The arms as a single proxy runs: LiteLLM's counters in the worker's memory."""
    with running_arms(upstream_server, tmp_path_factory, lambda name: {}) as arms:
        yield arms


@pytest.fixture(scope="module")
def redis_arms(
    upstream_server: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Arm]]:
    """The arms with Redis, as proxies behind one load balancer run: LiteLLM keeps its budget
    counters and rate limiter windows there (each arm its own server, so that they compare)."""
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    servers = {name: RedisServer(executable) for name in ARMS}
    try:
        for server in servers.values():
            server.wait_ready()

        def env(name: str) -> dict[str, str]:
            return {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(servers[name].port)}

        with running_arms(upstream_server, tmp_path_factory, env) as arms:
            for arm in arms.values():
                assert snapshot(arm, frozenset())["redis_counters"] is not None, arm.name
            yield arms
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture
def arms(request: pytest.FixtureRequest) -> dict[str, Arm]:
    """The arms of the backend a test case names (`memory`, `redis`)."""
    return request.getfixturevalue(f"{request.param}_arms")  # type: ignore[no-any-return]


def cases(routes: tuple[str, ...]) -> list[Any]:
    """(`arms` backend, route) for every route, and with Redis for a few (the spend code is the
    same for every route; Redis changes where LiteLLM keeps its counters)."""
    return [
        *(pytest.param("memory", route, id=route) for route in routes),
        *(pytest.param("redis", r, id=f"redis-{r}") for r in routes if r in REDIS_ROUTES),
    ]


def on_each(arms: dict[str, Arm], work: Callable[[Arm], Any]) -> dict[str, Any]:
    """`work` on every arm at once (each arm is its own proxy)."""
    with concurrent.futures.ThreadPoolExecutor(len(arms)) as pool:
        futures = {name: pool.submit(work, arm) for name, arm in arms.items()}
        return {name: future.result() for name, future in futures.items()}


def wait_for_probe(arm: Arm) -> None:
    """The probe adds its routes just after startup."""
    wait_until(
        lambda: arm.proxy.get(SNAPSHOT_PATH).status_code == 200,
        lambda: arm.proxy.log_text()[-3000:],
        timeout=30,
    )


def snapshot(arm: Arm, names: frozenset[str]) -> dict[str, Any]:
    """The arm's spend state about `names` (key hashes, user and team ids); see
    `tests.spend_probe.snapshot`."""
    response = arm.proxy.get(f"{SNAPSHOT_PATH}?about={','.join(sorted(names))}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def about(state: dict[str, Any]) -> dict[str, Any]:
    """A snapshot without its worker-wide counts (arms run different numbers of requests for
    the calibration)."""
    return {k: v for k, v in state.items() if k not in WORKER_WIDE}


# Snapshot sections about the whole worker, not the keys a test names.
WORKER_WIDE = (
    "all_open_reservations",
    "post_call_writes_pending",
    "post_call_work",
    "gateway_requests",
    "lane_tokens_counted",
)


def hold_settlement(arm: Arm, hold: bool) -> None:
    response = arm.proxy.post(SETTLEMENT_PATH, json={"hold": hold})
    assert response.json() == {"held": hold}


def settled(arm: Arm, names: frozenset[str]) -> dict[str, Any]:
    """The arm's spend state about `names` once every answer's post-call work ran: no
    reservation left open, no post-call Redis write waiting for its pipeline, a cost callback
    and a rate limiter's success callback (its tpm reconciliation; or the lane's batch's count
    of its tokens) per answer, nothing still running."""
    last: list[dict[str, Any]] = []

    def done() -> dict[str, Any] | None:
        last[:] = [state := snapshot(arm, names)]
        work = state["post_call_work"]
        finished = (
            not state["all_open_reservations"]
            and not state["post_call_writes_pending"]
            and work["cost_callback"]["finished"] >= arm.successes
            and work["rate_limiter"]["finished"] + state["lane_tokens_counted"] >= arm.successes
            and all(w["started"] == w["finished"] for w in work.values())
        )
        return about(state) if finished else None

    return wait_until(done, lambda: (arm.name, arm.successes, last), timeout=SETTLE_TIMEOUT_S)


def seed(arms: dict[str, Arm], **objects: dict[str, dict[str, Any]]) -> None:
    for arm in arms.values():
        assert arm.proxy.post(SEED_PATH, json=objects).status_code == 200


def send(arm: Arm, route: str, key: str) -> Answer:
    headers = {"Authorization": f"Bearer {key}"}
    if route == "transcription":
        response = arm.proxy.post(
            "/v1/audio/transcriptions",
            files={"file": ("speech.wav", AUDIO, "audio/wav")},
            data={"model": route},
            headers=headers,
        )
    elif route == "embeddings":
        response = arm.proxy.post(
            "/embeddings", json={"model": route, "input": "hi"}, headers=headers
        )
    else:
        path = "/chat/completions" if route.startswith("chat") else "/v1/messages"
        body = {"model": route, "messages": HI, "max_tokens": 16}
        if route.endswith("-stream"):
            body["stream"] = True
        response = arm.proxy.post(path, json=body, headers=headers)
    if 200 <= response.status_code < 300:
        arm.successes += 1
    return answer(response)


def answer(response: httpx.Response) -> Answer:
    content = _CREATED.sub(b'"created":0', _IDS.sub(b'"id":"X"', response.content))
    content = _RESETS_AT.sub(b"Limit resets at: T", content)
    try:
        body: Any = json.loads(content)
    except ValueError:
        body = content.decode()
    headers = stable_headers(response, VOLATILE_HEADERS)
    return Answer(response.status_code, body, headers, "x-litellm-fastpath" in response.headers)


def token_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def without_local_copies(state: dict[str, Any]) -> dict[str, Any]:
    """With Redis the worker's `spend:*` entries are copies of the counters there, holding
    whichever write landed last when callbacks settle together: only Redis's count then."""
    if state["redis_counters"] is None:
        return state
    return {k: v for k, v in state.items() if k != "spend_counters"}


@dataclass
class Sequence:
    """One key's requests on one route: what each arm answered and what its state became."""

    answers: dict[str, list[Answer]] = field(default_factory=dict)
    in_flight: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    final: dict[str, dict[str, Any]] = field(default_factory=dict)


def run_sequence(
    arms: dict[str, Arm], route: str, key: str, count: int, names: frozenset[str]
) -> Sequence:
    """`count` requests one after the other; each answer's state is looked at while its cost
    callback is held, then once it settled."""

    def on_arm(arm: Arm) -> tuple[list[Answer], list[dict[str, Any]], dict[str, Any]]:
        answers, in_flight = [], []
        for _ in range(count):
            hold_settlement(arm, True)
            try:
                answers.append(send(arm, route, key))
                state = snapshot(arm, names)
                in_flight.append({k: state[k] for k in IN_FLIGHT})
            finally:
                hold_settlement(arm, False)
            settled(arm, names)
        return answers, in_flight, settled(arm, names)

    sequence = Sequence()
    for name, (answers, in_flight, final) in on_each(arms, on_arm).items():
        sequence.answers[name] = answers
        sequence.in_flight[name] = in_flight
        sequence.final[name] = final
    return sequence


def differences(actual: Any, expected: Any, path: str = "") -> list[str]:
    """Where two JSON-like values differ, one line per leaf (for readable failures)."""
    if isinstance(actual, dict) and isinstance(expected, dict):
        return [
            line
            for k in sorted(actual.keys() | expected.keys(), key=str)
            for line in differences(
                actual.get(k, "<absent>"), expected.get(k, "<absent>"), f"{path}.{k}"
            )
        ]
    if isinstance(actual, list) and isinstance(expected, list) and len(actual) == len(expected):
        return [
            line
            for i, (a, e) in enumerate(zip(actual, expected, strict=True))
            for line in differences(a, e, f"{path}[{i}]")
        ]
    return [] if actual == expected else [f"{path}: {actual!r} != {expected!r}"]


def comparable(answers: list[Answer]) -> list[dict[str, Any]]:
    return [{"status": a.status, "body": a.body, "headers": a.headers} for a in answers]


def assert_same(actual: Any, expected: Any, what: str) -> None:
    found = differences(actual, expected)
    assert not found, f"{what}:\n" + "\n".join(found[:40])


def assert_alike(sequence: Sequence, route: str) -> None:
    plain = sequence.answers["plain"]
    for name in ARMS[1:]:
        assert_same(comparable(sequence.answers[name]), comparable(plain), f"{name} answers")
        assert_same(sequence.in_flight[name], sequence.in_flight["plain"], f"{name} in flight")
        assert_same(sequence.final[name], sequence.final["plain"], f"{name} settled")
    # Served by Rust on the fast path's arms, by LiteLLM's Python on the plain arm.
    for name, answers in sequence.answers.items():
        for reply in answers:
            if reply.status == 200:
                assert reply.fastpath == (name != "plain"), (name, route)


# -- calibration ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def per_request(memory_arms: dict[str, Arm]) -> dict[str, dict[str, float]]:
    """Per route, on LiteLLM's path: what one request costs and how many tokens it counts (from
    the spend row LiteLLM queued for it), and what LiteLLM reserves for it (0: nothing)."""
    plain = memory_arms["plain"]
    found: dict[str, dict[str, float]] = {}
    for route in ROUTES:
        key = f"sk-calibrate-{route}"
        seed({"plain": plain}, keys={key: {"max_budget": 1000.0}})
        names = frozenset({token_hash(key)})
        hold_settlement(plain, True)
        try:
            assert send(plain, route, key).status == 200
            reserved = snapshot(plain, names)["open_reservations"]
        finally:
            hold_settlement(plain, False)
        [row] = settled(plain, names)["spend_logs"]
        # LiteLLM prices Bedrock transcriptions by audio duration, which Bedrock's answer lacks.
        assert (row["spend"] > 0 and row["total_tokens"] > 0) == (route != "transcription"), row
        found[route] = {
            "cost": row["spend"],
            "tokens": row["total_tokens"],
            "reserved": reserved[0]["reserved_cost"] if reserved else 0.0,
        }
    return found


# -- the sequences ----------------------------------------------------------------------------


@pytest.mark.parametrize(("arms", "route"), cases(ROUTES), indirect=["arms"])
@pytest.mark.parametrize("owner", ["key", "user", "team"])
def test_past_a_budget_every_arm_answers_and_bills_alike(
    arms: dict[str, Arm], per_request: dict[str, dict[str, float]], route: str, owner: str
) -> None:
    """A budget that fits a few requests: every arm serves the same ones, refuses the rest with
    the same error, and leaves the same spend behind."""
    key = f"sk-{owner}-budget-{route}"
    cost = per_request[route]["cost"]
    # Free requests cannot use a budget up: there it starts used up.
    budget = {"max_budget": 2.5 * cost} if cost else {"max_budget": 1e-6, "spend": 1e-6}
    user, team = f"user-{route}", f"team-{route}"
    if owner == "key":
        seed(arms, keys={key: budget})
        names = {token_hash(key)}
    elif owner == "user":
        seed(arms, keys={key: {"user_id": user}}, users={user: budget})
        names = {token_hash(key), user}
    else:
        seed(arms, keys={key: {"team_id": team}}, teams={team: budget})
        names = {token_hash(key), team}
    budget_before = lane_counts(arms["lane"].log).get("lane_budget", 0)
    sequence = run_sequence(arms, route, key, 5, frozenset(names))
    statuses = [a.status for a in sequence.answers["plain"]]
    assert (statuses[0] == 200 or not cost) and statuses[-1] >= 400, statuses
    assert_alike(sequence, route)
    if route in LANE_ROUTES:
        # Once the lane holds the key's verdict, a budget this close leaves it no margin: the
        # proxy decides on LiteLLM's counters, after the key's replays reserved.
        assert lane_counts(arms["lane"].log).get("lane_budget", 0) > budget_before


@pytest.mark.parametrize(("arms", "route"), cases(RESERVED_ROUTES), indirect=["arms"])
def test_requests_still_being_settled_count_against_the_budget(
    arms: dict[str, Arm], per_request: dict[str, dict[str, float]], route: str
) -> None:
    """While LiteLLM's cost callback has not settled earlier answers, their reservations still
    hold the budget: a key cannot be served past it by asking quickly."""
    key = f"sk-quick-{route}"
    seed(arms, keys={key: {"max_budget": 2.5 * per_request[route]["reserved"]}})
    names = frozenset({token_hash(key)})

    def on_arm(arm: Arm) -> tuple[list[Answer], dict[str, Any], dict[str, Any]]:
        hold_settlement(arm, True)
        try:
            answers = [send(arm, route, key) for _ in range(4)]
            state = snapshot(arm, names)
        finally:
            hold_settlement(arm, False)
        return answers, {k: state[k] for k in IN_FLIGHT}, settled(arm, names)

    results = on_each(arms, on_arm)
    sequence = Sequence(
        answers={name: r[0] for name, r in results.items()},
        in_flight={name: [r[1]] for name, r in results.items()},
        final={name: without_local_copies(r[2]) for name, r in results.items()},
    )
    assert [a.status for a in sequence.answers["plain"]] == [200, 200, 200, 422]
    assert_alike(sequence, route)


@pytest.mark.parametrize(("arms", "route"), cases(ROUTES), indirect=["arms"])
@pytest.mark.parametrize("limit", ["rpm", "tpm"])
def test_past_a_rate_limit_every_arm_answers_and_counts_alike(
    arms: dict[str, Arm], per_request: dict[str, dict[str, float]], route: str, limit: str
) -> None:
    key = f"sk-{limit}-{route}"
    tokens = per_request[route]["tokens"]
    if limit == "rpm":
        fields = {"rpm_limit": 2}
    else:
        # Free of tokens (transcriptions), the limit is never reached: every request is served.
        fields = {"tpm_limit": int(2.5 * tokens) or 1}
    seed(arms, keys={key: fields})
    sequence = run_sequence(arms, route, key, 4, frozenset({token_hash(key)}))
    statuses = [a.status for a in sequence.answers["plain"]]
    assert statuses[0] == 200 and (429 in statuses) == bool(limit == "rpm" or tokens), statuses
    assert_alike(sequence, route)


@pytest.mark.parametrize(("arms", "route"), cases(ROUTES), indirect=["arms"])
def test_keys_without_limits_are_billed_alike(arms: dict[str, Arm], route: str) -> None:
    """A key with nothing to enforce: the lane serves it (chat and /v1/messages) and LiteLLM
    bills the replay; every arm's spend rows, counters and queued updates are the same."""
    key = f"sk-unlimited-{route}"
    seed(arms, keys={key: {}})
    served_before = lane_counts(arms["lane"].log).get("served", 0)
    sequence = run_sequence(arms, route, key, 3, frozenset({token_hash(key)}))
    assert [a.status for a in sequence.answers["plain"]] == [200] * 3
    assert_alike(sequence, route)
    if route in LANE_ROUTES:
        # The key's first request teaches the lane its verdict; the lane serves the others.
        assert lane_counts(arms["lane"].log).get("served", 0) >= served_before + 2


@pytest.mark.parametrize("route", ["chat", "messages-stream"])
def test_gateway_requests_are_counted_alike(memory_arms: dict[str, Arm], route: str) -> None:
    """LiteLLM's gateway request counts (its billable-request middleware, with a database)
    count the requests the lane served as the proxy's middleware counts the others: every arm's
    counts grow alike."""
    key = f"sk-gateway-{route}"
    seed(memory_arms, keys={key: {}})
    served_before = lane_counts(memory_arms["lane"].log).get("served", 0)
    before = {name: gateway_requests(arm) for name, arm in memory_arms.items()}
    for arm in memory_arms.values():
        assert [send(arm, route, key).status for _ in range(3)] == [200] * 3
    grown = {
        name: {
            kind: [
                now - then for now, then in zip(counts, before[name].get(kind, [0, 0]), strict=True)
            ]
            for kind, counts in gateway_requests(arm).items()
            if counts != before[name].get(kind)
        }
        for name, arm in memory_arms.items()
    }
    path = "/chat/completions" if route.startswith("chat") else "/v1/messages"
    assert grown["plain"] == {f"llm {path}": [3, 0]}, grown
    assert grown["rust"] == grown["lane"] == grown["plain"]
    assert lane_counts(memory_arms["lane"].log).get("served", 0) >= served_before + 2


def gateway_requests(arm: Arm) -> dict[str, list[int]]:
    return dict(snapshot(arm, frozenset())["gateway_requests"])


@pytest.mark.parametrize(("arms", "route"), cases(("chat", "messages-stream")), indirect=["arms"])
@pytest.mark.parametrize("owner", ["user", "team"])
def test_keys_of_users_and_teams_without_limits_take_the_lane(
    arms: dict[str, Arm], route: str, owner: str
) -> None:
    """A key with a user or a team, none of them with a budget or a limit: LiteLLM's checks
    for the user or team pass once, the lane serves the key's next requests, and every arm's
    spend (the key's, the user's or team's) comes out the same."""
    key, owner_id = f"sk-{owner}-unlimited-{route}", f"{owner}-unlimited-{route}"
    seed(arms, keys={key: {f"{owner}_id": owner_id}}, **{f"{owner}s": {owner_id: {}}})
    served_before = lane_counts(arms["lane"].log).get("served", 0)
    sequence = run_sequence(arms, route, key, 3, frozenset({token_hash(key), owner_id}))
    assert [a.status for a in sequence.answers["plain"]] == [200] * 3
    assert_alike(sequence, route)
    assert lane_counts(arms["lane"].log).get("served", 0) >= served_before + 2


@pytest.mark.parametrize(("arms", "route"), cases(("chat", "messages-stream")), indirect=["arms"])
@pytest.mark.parametrize("owner", ["key", "user", "team", "member"])
def test_keys_with_budgets_far_from_the_limit_take_the_lane(
    arms: dict[str, Arm], per_request: dict[str, dict[str, float]], route: str, owner: str
) -> None:
    """A budget (on the key, its user or its team) with room for dozens of LiteLLM's
    estimates: once LiteLLM judged the key, the lane serves it, its replays reserve and settle
    as LiteLLM's path does, and every arm answers, reserves and bills request by request alike.
    (Close to the limit the lane hands requests to the proxy: see the sequences past a budget.)
    """
    key, owner_id = f"sk-{owner}-budgeted-{route}", f"{owner}-budgeted-{route}"
    estimate = per_request[route]["reserved"]
    assert estimate > 0
    budget = {"max_budget": 1.0, "spend": 1.0 - 40 * estimate}
    if owner == "key":
        seed(arms, keys={key: budget})
        names = {token_hash(key)}
    elif owner == "member":
        # A key with a user and a team, held to the user's budget as a member of that team.
        user, team = f"user-{owner_id}", f"team-{owner_id}"
        member_budget = {"spend": budget["spend"], "litellm_budget_table": {"max_budget": 1.0}}
        seed(
            arms,
            keys={key: {"user_id": user, "team_id": team}},
            users={user: {}},
            teams={team: {}},
            memberships=[{"user_id": user, "team_id": team, **member_budget}],
        )
        names = {token_hash(key), user, team}
    else:
        seed(arms, keys={key: {f"{owner}_id": owner_id}}, **{f"{owner}s": {owner_id: budget}})
        names = {token_hash(key), owner_id}
    served_before = lane_counts(arms["lane"].log).get("served", 0)
    full_auths = litellm_auths(arms["lane"])
    sequence = run_sequence(arms, route, key, 4, frozenset(names))
    assert [a.status for a in sequence.answers["plain"]] == [200] * 4
    assert_alike(sequence, route)
    # The key's first request teaches the lane its verdict; the lane serves the others, and
    # their replays take LiteLLM's auth without its checks (`lane.reauth`).
    assert lane_counts(arms["lane"].log).get("served", 0) >= served_before + 3
    assert litellm_auths(arms["lane"]) == full_auths


def litellm_auths(arm: Arm) -> dict[str, int]:
    """Replays given LiteLLM's full auth, by why, as the lane's counts last logged them."""
    counts = lane_counts(arm.log).items()
    return {k: v for k, v in counts if k.startswith("replay_litellm_auth:")}


def rpm_limited(
    arms: dict[str, Arm], key: str, owner: str, limit: int, kind: str = "rpm"
) -> frozenset[str]:
    """Seeds `key` with an rpm (or, with `kind="tpm"`, tpm) limit of its own, or its user's,
    team's or team membership's (as LiteLLM's auth copies each onto the key); the names its
    counters are about."""
    owner_id = f"{owner}-{key}"
    field = f"{kind}_limit"
    if owner == "key":
        seed(arms, keys={key: {field: limit}})
        return frozenset({token_hash(key)})
    if owner == "member":
        user, team = f"user-{owner_id}", f"team-{owner_id}"
        seed(
            arms,
            keys={key: {"user_id": user, "team_id": team, f"team_member_{field}": limit}},
            users={user: {}},
            teams={team: {}},
            memberships=[
                {"user_id": user, "team_id": team, "litellm_budget_table": {field: limit}}
            ],
        )
        return frozenset({token_hash(key), user, team, f"{team}:{user}"})
    seed(
        arms,
        keys={key: {f"{owner}_id": owner_id, f"{owner}_{field}": limit}},
        **{f"{owner}s": {owner_id: {field: limit}}},
    )
    return frozenset({token_hash(key), owner_id})


@pytest.mark.parametrize(("arms", "route"), cases(("chat", "messages-stream")), indirect=["arms"])
@pytest.mark.parametrize("owner", ["key", "user", "team", "member"])
def test_keys_with_rpm_limits_far_from_the_limit_take_the_lane(
    arms: dict[str, Arm], route: str, owner: str
) -> None:
    """An rpm limit (on the key, its user, its team or the team membership) far from its
    window's limit: once LiteLLM judged the key, the lane serves it, counts it in the limiter's
    window (in the worker through the replay, with Redis there itself) and sends the limiter's
    `x-ratelimit-*` headers; every arm answers and counts request by request alike."""
    key = f"sk-{owner}-rpm-far-{route}"
    names = rpm_limited(arms, key, owner, 50)
    before = lane_counts(arms["lane"].log)
    served_before = before.get("served", 0)
    sequence = run_sequence(arms, route, key, 4, names)
    for final in sequence.final.values():
        # LiteLLM's spend writer merges queued updates as they arrive (a key's, its user's and
        # team's), so with three entities per request the queue's shape depends on timing.
        final["spend_updates"] = burst_comparable(final)["spend_updates"]
    assert [a.status for a in sequence.answers["plain"]] == [200] * 4
    if not route.endswith("-stream"):
        descriptor = {"key": "api_key", "member": "team_member"}.get(owner, owner)
        remaining = [
            a.headers[f"x-ratelimit-{descriptor}-remaining-requests"]
            for a in sequence.answers["plain"]
        ]
        assert remaining == ["49", "48", "47", "46"], remaining
    assert_alike(sequence, route)
    assert lane_counts(arms["lane"].log).get("served", 0) >= served_before + 3
    # The served ones after the key's shape was learnt (its first two) are logged in the lane's
    # batch, the limiter's pre-call hook run for each there (it counts it in the worker's
    # windows, or records what the lane counted in Redis): none is replayed for its limits.
    after = wait_for_count(arms["lane"].log, "accounted", before.get("accounted", 0) + 1)
    assert after.get("replay_needed:hold", 0) == before.get("replay_needed:hold", 0), after


@pytest.mark.parametrize(("arms", "route"), cases(("chat", "messages")), indirect=["arms"])
def test_a_burst_against_an_rpm_limit_admits_as_many_on_every_arm(
    arms: dict[str, Arm], upstream_server: RecordingUpstream, route: str
) -> None:
    """A burst of concurrent requests against a team's rpm limit with room for 12 while the
    provider takes its time: the lane serves some and hands the rest to the proxy once their
    replays are counted (in the worker) or once Redis says the window is full, and every arm
    admits exactly the limit and counts alike."""
    key = f"sk-rpm-burst-{route}"
    names = rpm_limited(arms, key, "team", 13)
    before = lane_counts(arms["lane"].log)

    def on_arm(arm: Arm) -> tuple[list[int], dict[str, Any]]:
        # The key's first request teaches the lane its verdict.
        assert send(arm, route, key).status == 200
        settled(arm, names)
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: send(arm, route, key), range(20)))
        return sorted(a.status for a in answers), settled(arm, names)

    path = "/chat/completions" if route == "chat" else "/v1/messages"
    upstream_server.set_default(path, Reply(delay_s=0.5))
    try:
        results = on_each(arms, on_arm)
    finally:
        upstream_server.set_default(path, None)
    assert results["plain"][0] == [200] * 12 + [429] * 8, results["plain"][0]

    def counted(state: dict[str, Any]) -> dict[str, Any]:
        # What the limiter counted (in the worker, or in Redis) up to the limit: past it, how
        # many refusals reach Redis depends on when the worker's copy of the window caught up,
        # on every arm alike. What was logged, without Redis (with it, the spend writer flushes
        # on a clock). The spend state is compared request by request in the sequences.
        windows = {
            name: min(value, 13)
            for name, value in (state["redis_counters"] or state["rate_limit_counters"]).items()
            if name.startswith("{") and name.endswith(":requests")
        }
        rows = burst_comparable(state)["spend_logs"]
        logged = None if state["redis_counters"] else len(rows)
        return {"requests": windows, "rows": logged, "open": state["open_reservations"]}

    for name in ARMS[1:]:
        assert results[name][0] == results["plain"][0], name
        assert_same(counted(results[name][1]), counted(results["plain"][1]), f"{name} counted")
    after = lane_counts(arms["lane"].log)
    assert after.get("served", 0) > before.get("served", 0), (before, after)
    assert after.get("lane_rate_limit", 0) > before.get("lane_rate_limit", 0), (before, after)


@pytest.mark.parametrize(("arms", "route"), cases(("chat", "messages-stream")), indirect=["arms"])
@pytest.mark.parametrize("owner", ["key", "user", "team", "member"])
def test_keys_with_tpm_limits_far_from_the_limit_take_the_lane(
    arms: dict[str, Arm], route: str, owner: str
) -> None:
    """A tpm limit (on the key, its user, its team or the team membership) far from its
    window's limit: the lane serves the key; with Redis it reserves the limiter's estimate in
    the token window there, in the worker the replay's limiter reserves it; the replay's
    callbacks reconcile it with the actual usage. Every arm answers (`x-ratelimit-*-tokens`
    headers included: each request's counts the previous one's actual usage) and counts request
    by request alike."""
    key = f"sk-{owner}-tpm-far-{route}"
    names = rpm_limited(arms, key, owner, 100_000, kind="tpm")
    served_before = lane_counts(arms["lane"].log).get("served", 0)
    sequence = run_sequence(arms, route, key, 4, names)
    for final in sequence.final.values():
        final["spend_updates"] = burst_comparable(final)["spend_updates"]
    assert [a.status for a in sequence.answers["plain"]] == [200] * 4
    if not route.endswith("-stream"):
        descriptor = {"key": "api_key", "member": "team_member"}.get(owner, owner)
        remaining = [
            int(a.headers[f"x-ratelimit-{descriptor}-remaining-tokens"])
            for a in sequence.answers["plain"]
        ]
        assert remaining[0] < 100_000 and remaining == sorted(remaining, reverse=True), remaining
    assert_alike(sequence, route)
    assert lane_counts(arms["lane"].log).get("served", 0) >= served_before + 3
    final = sequence.final["lane"]
    counters = final["redis_counters"] or final["rate_limit_counters"]
    tokens = {k: v for k, v in counters.items() if k.endswith(":tokens")}
    assert tokens and all(v > 0 for v in tokens.values()), tokens


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        # No output cap under a tpm limit below 4096: LiteLLM writes `max_tokens` (the limit / 4)
        # into the request before calling the provider.
        ({}, "lane_rate_limit"),
        # A cap as a string: the limiter parses it with Python's `float`.
        ({"max_tokens": "12"}, "lane_body"),
    ],
    ids=["uncapped", "string-cap"],
)
def test_requests_whose_reservation_the_lane_leaves_to_litellm_go_to_the_proxy(
    redis_arms: dict[str, Arm], upstream_server: RecordingUpstream, extra: dict[str, Any], why: str
) -> None:
    """A key with a tpm limit of 1000, once the lane has its verdict: requests whose estimate or
    body the limiter works out in Python go to the proxy (counted by reason), and every arm
    sends the provider the same body (LiteLLM's `max_tokens: 250` where it caps the output) and
    answers alike. (The proxy serves them on every arm; the token windows after them are
    LiteLLM's, and settle on a clock this test does not wait for.)"""
    arms = redis_arms
    key = f"sk-tpm-proxy-{why}"
    seed(arms, keys={key: {"tpm_limit": 1000}})
    names = frozenset({token_hash(key)})
    before = lane_counts(arms["lane"].log).get(why, 0)

    def on_arm(arm: Arm) -> tuple[Answer, dict[str, Any]]:
        assert send(arm, "chat", key).status == 200  # teaches the lane the key's verdict
        settled(arm, names)
        text = f"capped on {arm.name} {why}"
        body = {"model": "chat", "messages": [{"role": "user", "content": text}], **extra}
        response = arm.proxy.post(
            "/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        )
        if response.status_code == 200:
            arm.successes += 1
        [sent] = [
            r.json()
            for r in upstream_server.requests
            if r.method == "POST" and text.encode() in r.body
        ]
        sent["messages"] = "<the arm's>"
        return answer(response), sent

    results = on_each(arms, on_arm)
    plain_answer, plain_sent = results["plain"]
    assert plain_answer.status == 200, plain_answer
    if not extra:
        assert plain_sent["max_tokens"] == 250, plain_sent
    for name in ARMS[1:]:
        reply, sent = results[name]
        assert_same(comparable([reply]), comparable([plain_answer]), f"{name} answer")
        assert sent == plain_sent, name
    assert lane_counts(arms["lane"].log).get(why, 0) > before


@pytest.mark.parametrize("arms", ["memory", "redis"], indirect=True)
def test_a_burst_against_a_tpm_limit_admits_as_many_on_every_arm(
    arms: dict[str, Arm], upstream_server: RecordingUpstream
) -> None:
    """A burst of concurrent requests against a key's tpm limit with room for five of the
    limiter's reservations while the provider takes its time: the lane reserves in the token
    window in Redis (or holds the reservation until the replay's limiter makes it in the
    worker) and hands the rest to the proxy once the window is full; every arm admits alike,
    and the window holds the same count once the answers are reconciled."""
    key = f"sk-tpm-burst-{next(iter(arms.values())).proxy.port}"
    # The limiter reserves 1 input token and `max_tokens` (16) per request: 17.
    seed(arms, keys={key: {"tpm_limit": 5 * 17 + 8}})
    names = frozenset({token_hash(key)})
    before = lane_counts(arms["lane"].log)
    window = f"{{api_key:{token_hash(key)}}}:tokens"

    # The key's first request's reservation is reconciled before the burst: the window holds
    # its actual usage.
    results = slow_burst(arms, upstream_server, key, names)
    admitted = results["plain"][0].count(200)
    assert 0 < admitted < 12, results["plain"][0]
    counts = on_each(arms, lambda arm: quiet_count(arm, names, window))
    for name in ARMS[1:]:
        assert results[name][0] == results["plain"][0], name
        assert counts[name] == counts["plain"], (name, counts)
    after = lane_counts(arms["lane"].log)
    assert after.get("served", 0) > before.get("served", 0), (before, after)
    assert after.get("lane_rate_limit", 0) > before.get("lane_rate_limit", 0), (before, after)


def quiet(arm: Arm, names: frozenset[str]) -> dict[str, Any]:
    """`settled`, and with Redis once LiteLLM's counters there stopped changing: LiteLLM sends a
    request's post-call writes (the limiter's reconciliation, the spend counters) in a pipeline
    after its callbacks, or within a second."""
    seen: list[dict[str, Any]] = []

    def still() -> dict[str, Any] | None:
        state = settled(arm, names)
        seen.append(state)
        if state["redis_counters"] is None:
            return state
        if len(seen) < 2 or seen[-1]["redis_counters"] != seen[-2]["redis_counters"]:
            time.sleep(1.2)
            return None
        return state

    return wait_until(still, lambda: (arm.name, seen[-2:]), timeout=SETTLE_TIMEOUT_S)


def quiet_count(arm: Arm, names: frozenset[str], counter: str) -> Any:
    """A limiter counter once LiteLLM's writes settled (see `quiet`)."""
    state = quiet(arm, names)
    return (state["redis_counters"] or state["rate_limit_counters"])[counter]


def slow_burst(
    arms: dict[str, Arm], upstream: RecordingUpstream, key: str, names: frozenset[str]
) -> dict[str, tuple[list[int], dict[str, Any]]]:
    """Per arm: one chat request of `key` (which teaches the lane its verdict), then 12 at once
    while the provider takes 0.8 s; the burst's statuses, sorted, and the settled state."""

    def on_arm(arm: Arm) -> tuple[list[int], dict[str, Any]]:
        assert send(arm, "chat", key).status == 200
        settled(arm, names)
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda _: send(arm, "chat", key), range(12)))
        return sorted(a.status for a in answers), settled(arm, names)

    upstream.set_default("/chat/completions", Reply(delay_s=0.8))
    try:
        return on_each(arms, on_arm)
    finally:
        upstream.set_default("/chat/completions", None)


def gauges(state: dict[str, Any]) -> dict[str, Any]:
    """The limiter's parallel-request gauges (slots in flight) in a snapshot: in Redis, or its
    registry in the worker."""
    found = state["redis_counters"] or state["rate_limit_counters"]
    return {
        k: len(v) if isinstance(v, dict) else v
        for k, v in found.items()
        if k.endswith(":max_parallel_requests")
    }


@pytest.mark.parametrize(("arms", "route"), cases(("chat", "messages-stream")), indirect=["arms"])
@pytest.mark.parametrize("rpm", [False, True], ids=["parallel", "parallel-and-rpm"])
def test_keys_with_parallel_limits_take_the_lane(
    arms: dict[str, Arm], route: str, rpm: bool
) -> None:
    """A key's parallel-request limit, alone or beside an rpm limit: the lane serves the key,
    taking each request's slot in the limiter's gauge in Redis (without Redis, holding it beside
    the limiter's registry in the worker) and giving it back before the answer is complete,
    with the limiter's `x-ratelimit-*` headers. Every arm answers and counts request by request
    alike, and no slot is left in flight."""
    key = f"sk-parallel-{route}-{rpm}-{next(iter(arms.values())).proxy.port}"
    seed(arms, keys={key: {"max_parallel_requests": 2, **({"rpm_limit": 50} if rpm else {})}})
    names = frozenset({token_hash(key)})
    served_before = lane_counts(arms["lane"].log).get("served", 0)
    sequence = run_sequence(arms, route, key, 4, names)
    assert [a.status for a in sequence.answers["plain"]] == [200] * 4
    if not route.endswith("-stream"):
        for reply in sequence.answers["plain"]:
            assert reply.headers["x-ratelimit-api_key-remaining-max_parallel_requests"] == "1"
            assert reply.headers["x-ratelimit-api_key-limit-max_parallel_requests"] == "2"
    assert_alike(sequence, route)
    assert lane_counts(arms["lane"].log).get("served", 0) >= served_before + 3
    for final in sequence.final.values():
        assert not any(gauges(final).values()), gauges(final)


@pytest.mark.parametrize("arms", ["memory", "redis"], indirect=True)
def test_a_burst_against_a_parallel_limit_admits_as_many_on_every_arm(
    arms: dict[str, Arm], upstream_server: RecordingUpstream
) -> None:
    """A burst of concurrent requests against a key's parallel-request limit of 3 (and an rpm
    limit far away) while the provider takes its time: the lane takes three slots (in the
    limiter's gauge in Redis, counting each request in the rpm window there; in the worker,
    beside the limiter's registry) and hands the rest to the proxy at once (their window counts
    taken back), whose limiter counts and refuses them as LiteLLM does, counting the lane's
    slots; every arm admits three, counts every request in the window once, and gives every
    slot back."""
    key = f"sk-parallel-burst-{next(iter(arms.values())).proxy.port}"
    seed(arms, keys={key: {"max_parallel_requests": 3, "rpm_limit": 100}})
    names = frozenset({token_hash(key)})
    before = lane_counts(arms["lane"].log)

    results = slow_burst(arms, upstream_server, key, names)
    assert results["plain"][0] == [200] * 3 + [429] * 9, results["plain"][0]
    for name in ARMS[1:]:
        assert results[name][0] == results["plain"][0], name
    window = f"{{api_key:{token_hash(key)}}}:requests"
    for name in ARMS:
        state = results[name][1]
        assert not any(gauges(state).values()), (name, gauges(state))
        counters = state["redis_counters"] or state["rate_limit_counters"]
        assert counters[window] == 13, (name, state)
    after = lane_counts(arms["lane"].log)
    assert after.get("served", 0) >= before.get("served", 0) + 3, (before, after)
    assert after.get("lane_parallel_limit", 0) > before.get("lane_parallel_limit", 0), (
        before,
        after,
    )


@pytest.mark.parametrize("arms", ["memory", "redis"], indirect=True)
def test_an_rpm_window_rolls_over_alike(arms: dict[str, Arm]) -> None:
    """A key's rpm window fills up, then ends: every arm refuses past the limit, and once the
    window is over starts a new one with the next request and serves the limit again, with the
    same headers (the lane hands the requests near the window's end to the proxy)."""
    key = f"sk-rpm-rollover-{next(iter(arms.values())).proxy.port}"
    names = rpm_limited(arms, key, "key", 3)
    window = f"{{api_key:{token_hash(key)}}}:window"
    before = lane_counts(arms["lane"].log).get("served", 0)

    def settled_answer(arm: Arm) -> Answer:
        # Settled before the next request, as in the sequences: the key spend the proxy sends
        # is the one its cost callbacks left (the lane's is deliberate difference 1).
        answer = send(arm, "chat", key)
        settled(arm, names)
        return answer

    def on_arm(arm: Arm) -> tuple[list[Answer], dict[str, Any]]:
        answers = [settled_answer(arm) for _ in range(4)]
        ends = time.time() + 1.0
        assert arm.proxy.post(WINDOW_PATH, json={"key": window, "ends_in": 1}).status_code == 200
        # The window's end is a clock: wait for it to pass.
        wait_until(lambda: time.time() > ends + 0.2 or None, lambda: "clock", timeout=5)
        answers += [settled_answer(arm) for _ in range(4)]
        return answers, settled(arm, names)

    results = on_each(arms, on_arm)
    statuses = [a.status for a in results["plain"][0]]
    assert statuses == [200, 200, 200, 429, 200, 200, 200, 429], statuses
    for name in ARMS[1:]:
        assert_same(comparable(results[name][0]), comparable(results["plain"][0]), name)
        assert_same(
            without_local_copies(results[name][1]),
            without_local_copies(results["plain"][1]),
            f"{name} settled",
        )
    # In each window, the lane served what followed the request that taught it the window.
    assert lane_counts(arms["lane"].log).get("served", 0) >= before + 3


def burst_comparable(state: dict[str, Any]) -> dict[str, Any]:
    """A settled state after a burst, as far as it does not depend on the order in which the
    concurrent requests reached LiteLLM (on every arm alike): refusals' rows say how far over
    the budget the counter stood when each was refused, so they are compared by number; the
    spend writer's queue merges entries once it grows, so its updates are compared as totals
    per entity."""
    rows = state["spend_logs"]
    refused = [r for r in rows if (r.get("metadata") or {}).get("error_information")]
    totals: dict[str, float] = {}
    for update in state["spend_updates"]:
        entity = f"{update['entity_type']}:{update['entity_id']}"
        totals[entity] = totals.get(entity, 0.0) + float(update["response_cost"])
    return {
        **without_local_copies(state),
        "spend_logs": [r for r in rows if r not in refused],
        "refused_rows": len(refused),
        "spend_updates": {entity: round(total, 9) for entity, total in totals.items()},
    }


@pytest.mark.parametrize(("arms", "route"), cases(("chat", "messages")), indirect=["arms"])
def test_a_burst_against_a_budget_admits_as_many_on_every_arm(
    arms: dict[str, Arm],
    per_request: dict[str, dict[str, float]],
    upstream_server: RecordingUpstream,
    route: str,
) -> None:
    """A burst of concurrent requests against a budget that fits a few dozen of LiteLLM's
    estimates, while the cost callbacks are held (every reservation stays at its estimate) and
    the provider takes its time: the lane serves some, hands the rest to the proxy once their
    replays reserved (not while they are still with the provider, unknown to LiteLLM's
    counters), and every arm admits the same number, reserves the same and bills the same."""
    key = f"sk-burst-{route}"
    estimate = per_request[route]["reserved"]
    seed(arms, keys={key: {"max_budget": 1.0, "spend": 1.0 - 24 * estimate}})
    names = frozenset({token_hash(key)})
    before = lane_counts(arms["lane"].log)

    def on_arm(arm: Arm) -> tuple[list[int], dict[str, Any], dict[str, Any]]:
        # The key's first request teaches the lane its verdict.
        assert send(arm, route, key).status == 200
        settled(arm, names)
        hold_settlement(arm, True)
        try:
            # All at once: every request reaches the arm while the first are still with the
            # provider.
            with concurrent.futures.ThreadPoolExecutor(32) as pool:
                answers = list(pool.map(lambda _: send(arm, route, key), range(32)))
            state = snapshot(arm, names)
        finally:
            hold_settlement(arm, False)
        return sorted(a.status for a in answers), about(state), settled(arm, names)

    path = "/chat/completions" if route == "chat" else "/v1/messages"
    upstream_server.set_default(path, Reply(delay_s=0.5))
    try:
        results = on_each(arms, on_arm)
    finally:
        upstream_server.set_default(path, None)
    statuses = results["plain"][0]
    assert 0 < statuses.count(200) < len(statuses), statuses
    for name in ARMS[1:]:
        assert results[name][0] == statuses, name
        # Held open meanwhile: one reservation per admitted request (their amounts, and the
        # counters while refusals come and go, depend on the order the requests came in).
        in_flight = len(results[name][1]["open_reservations"])
        assert in_flight == len(results["plain"][1]["open_reservations"]), name
        assert_same(
            burst_comparable(results[name][2]),
            burst_comparable(results["plain"][2]),
            f"{name} settled",
        )
    after = lane_counts(arms["lane"].log)
    assert after.get("served", 0) > before.get("served", 0), (before, after)
    assert after.get("lane_budget", 0) > before.get("lane_budget", 0), (before, after)


@pytest.mark.parametrize("learnt", [False, True], ids=["replayed", "batched"])
@pytest.mark.parametrize("arms", ["memory", "redis"], indirect=True)
def test_a_served_request_is_billed_when_its_budget_is_spent_meanwhile(
    arms: dict[str, Arm],
    per_request: dict[str, dict[str, float]],
    upstream_server: RecordingUpstream,
    learnt: bool,
) -> None:
    """The lane admits a request on its headroom; while the provider works on it, the key's
    budget counter is spent (as another instance's requests spend it in a shared Redis). The
    lane's answer stands, and its replay is billed without a second budget check, as LiteLLM
    bills a request it admitted (a deliberate difference, docs/compatibility.md): nobody is
    served unbilled. `learnt`: the key's request shape is learnt first, so that the request
    would be logged in the lane's batch, whose reservation LiteLLM's counters now refuse: it is
    replayed instead (`replay_needed:key_auth`)."""
    lane = arms["lane"]
    key = f"sk-spent-meanwhile-{len(upstream_server.requests)}"
    estimate = per_request["chat"]["reserved"]
    seed({"lane": lane}, keys={key: {"max_budget": 1.0, "spend": 1.0 - 40 * estimate}})
    names = frozenset({token_hash(key)})
    warmed(lane, key, names, learnt)
    before = lane_counts(lane.log)
    served_before = before.get("served", 0)
    spent = {"key": f"spend:key:{token_hash(key)}", "value": 1.0}
    served_while_moved(lane, upstream_server, key, COUNTER_PATH, spent)
    wait_for_count(lane.log, "served", served_before + 1)
    # Its cost callback ran (the replay was billed), and the key is over its budget now.
    state = settled(lane, names)
    assert state["spend_counters"][spent["key"]] > 1.0, state["spend_counters"]
    if learnt:
        after = lane_counts(lane.log)
        assert after.get("replay_needed:key_auth", 0) == before.get("replay_needed:key_auth", 0) + 1
    assert send(lane, "chat", key).status >= 400


@pytest.mark.parametrize("learnt", [False, True], ids=["replayed", "batched"])
@pytest.mark.parametrize("arms", ["memory"], indirect=True)
def test_a_served_request_is_logged_when_its_rpm_window_fills_meanwhile(
    arms: dict[str, Arm], upstream_server: RecordingUpstream, learnt: bool
) -> None:
    """Without Redis the lane admits a request on the limiter's window as last read; while the
    provider works on it, the team's window fills (as requests of another key of the team that
    the proxy counts meanwhile would fill it). The lane's answer stands; the limiter, run for it
    after the answer, refuses it and leaves it counted, and the request is logged and billed past
    the limiter (deliberate difference 13), in its replay (where the proxy logs the refusal too,
    as a failed request) or, with `learnt` (the key's request shape learnt first), in the lane's
    batch (the answer alone). The key's next request is the proxy's 429."""
    lane = arms["lane"]
    key = f"sk-window-filled-{len(upstream_server.requests)}"
    names = rpm_limited({"lane": lane}, key, "team", 50)
    counter = f"{{team:team-{key}}}:requests"
    warmed(lane, key, names, learnt)
    before = lane_counts(lane.log)
    rows_before = refusal_rows(settled(lane, names))
    full = {"key": counter, "value": 50}
    served_while_moved(lane, upstream_server, key, RATE_COUNTER_PATH, full)
    after = wait_for_count(lane.log, "served", before.get("served", 0) + 1)
    state = settled(lane, names)
    # Logged and billed once as answered, and counted by the refusal.
    answered, refused_rows = refusal_rows(state)
    assert (answered, refused_rows) == (rows_before[0] + 1, rows_before[1] + (not learnt))
    assert state["rate_limit_counters"][counter] == 51, state["rate_limit_counters"]
    assert after.get("logging_failed", 0) == before.get("logging_failed", 0)
    if learnt:
        after = wait_for_count(lane.log, "accounted", before.get("accounted", 0) + 1)
        assert after.get("replay_needed:hold", 0) == before.get("replay_needed:hold", 0)
    refused = send(lane, "chat", key)
    assert refused.status == 429, refused


def warmed(lane: Arm, key: str, names: frozenset[str], learnt: bool) -> None:
    """The key's first request teaches the lane its verdict; with `learnt`, two more its
    request shape."""
    for _ in range(3 if learnt else 1):
        assert send(lane, "chat", key).status == 200
        settled(lane, names)


def served_while_moved(
    lane: Arm, upstream: RecordingUpstream, key: str, probe_path: str, moved: dict[str, Any]
) -> None:
    """The key's chat request on the lane, and while the provider works on it (1 s) `moved`
    posted to the spend probe's `probe_path` (a counter set as another instance or path would
    move it); the lane's answer stands."""
    upstream.set_default("/chat/completions", Reply(delay_s=1.0))
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            calls_before = len(upstream.requests)
            on_lane = pool.submit(send, lane, "chat", key)
            wait_until(lambda: len(upstream.requests) > calls_before, "not called")
            assert lane.proxy.post(probe_path, json=moved).status_code == 200
            assert on_lane.result().status == 200
    finally:
        upstream.set_default("/chat/completions", None)


def refusal_rows(state: dict[str, Any]) -> tuple[int, int]:
    """The spend-log rows of answered requests, and of refused ones (with the limiter's error)."""
    rows = state["spend_logs"]
    refused = [r for r in rows if (r.get("metadata") or {}).get("error_information")]
    return len(rows) - len(refused), len(refused)


@pytest.mark.parametrize("arms", ["memory"], indirect=True)
def test_a_team_s_model_access_and_block_hold_on_the_lane(arms: dict[str, Arm]) -> None:
    """The lane serves a team's key only for the groups LiteLLM lets the team call, and stops
    the moment LiteLLM's cache holds the team blocked: every arm answers alike throughout."""
    key, team = "sk-team-scoped", "team-scoped"
    seed(arms, keys={key: {"team_id": team}}, teams={team: {"models": ["chat"]}})
    names = frozenset({token_hash(key), team})
    allowed = run_sequence(arms, "chat", key, 2, names)
    assert [a.status for a in allowed.answers["plain"]] == [200, 200]
    assert_alike(allowed, "chat")
    served = lane_counts(arms["lane"].log).get("served", 0)
    refused = run_sequence(arms, "chat-stream", key, 2, names)
    assert all(a.status >= 400 for a in refused.answers["plain"]), refused.answers["plain"]
    assert_alike(refused, "chat-stream")
    seed(arms, teams={team: {"models": ["chat"], "blocked": True}})
    blocked = run_sequence(arms, "chat", key, 2, names)
    assert all(a.status >= 400 for a in blocked.answers["plain"]), blocked.answers["plain"]
    assert_alike(blocked, "chat")
    assert lane_counts(arms["lane"].log).get("served", 0) == served


@pytest.mark.parametrize("arms", ["memory"], indirect=True)
def test_requests_naming_an_end_user_go_to_the_proxy_with_a_database(
    arms: dict[str, Arm],
) -> None:
    """With a database LiteLLM checks an end user's budget, limits and model access per
    request: once the lane serves a key, its `/v1/messages` requests whose `metadata.user_id`
    names an end user still go to the proxy (counted `lane_end_user`), every arm answering
    alike."""
    key = "sk-end-user"
    seed(arms, keys={key: {}})
    lane = arms["lane"]
    before = lane_counts(lane.log)
    assert [send(lane, "messages", key).status for _ in range(2)] == [200, 200]
    served = wait_for_count(lane.log, "served", before.get("served", 0) + 1)["served"]

    def on_arm(arm: Arm) -> list[Answer]:
        headers = {"Authorization": f"Bearer {key}"}
        named = {"model": "messages", "messages": HI, "max_tokens": 16}
        named["metadata"] = {"user_id": "end-user-7"}
        sent = [arm.proxy.post("/v1/messages", json=named, headers=headers) for _ in range(3)]
        # Counted as `send` counts them: a later test's `settled` waits for their callbacks.
        arm.successes += sum(1 for response in sent if 200 <= response.status_code < 300)
        return [answer(response) for response in sent]

    answers = on_each(arms, on_arm)
    for name in ARMS[1:]:
        assert_same(comparable(answers[name]), comparable(answers["plain"]), f"{name} answers")
    assert [a.status for a in answers["plain"]] == [200] * 3
    counts = wait_for_count(lane.log, "lane_end_user", before.get("lane_end_user", 0) + 3)
    assert counts["served"] == served


UPSTREAM_PATHS = {
    "chat": "/chat/completions",
    "chat-stream": f"{STREAM_BASE}/chat/completions",
    "messages": "/v1/messages",
    "messages-stream": f"{STREAM_BASE}/v1/messages",
    "embeddings": "/v1/embeddings",
    "transcription": "/converse",
}


def upstream_error(route: str) -> Reply:
    """A provider's 500 in its own error shape."""
    if route.startswith("messages"):
        error: dict[str, Any] = {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    elif route == "transcription":
        error = {"message": "boom"}
    else:
        error = {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}
    return Reply(status=500, json=error)


@pytest.mark.parametrize(("arms", "route"), cases(ROUTES), indirect=["arms"])
def test_a_failed_request_gives_its_reservation_back(
    arms: dict[str, Arm],
    upstream_server: RecordingUpstream,
    per_request: dict[str, dict[str, float]],
    route: str,
) -> None:
    """The provider fails: the same error on every arm, the same spend row for it, the
    request's reservation released (no cost callback settles a failure) and the budget whole
    for the next request."""
    key = f"sk-failing-{route}"
    seed(arms, keys={key: {"max_budget": 2.5 * (per_request[route]["cost"] or 1e-6)}})
    names = frozenset({token_hash(key)})
    sequence = Sequence()
    # One arm at a time, the error the upstream's answer for as long as it is asked (LiteLLM's
    # OpenAI embeddings ask again, through the SDK's retries; the fast path never does).
    for name, arm in arms.items():
        upstream_server.set_default(UPSTREAM_PATHS[route], upstream_error(route))
        try:
            sequence.answers[name] = [send(arm, route, key)]
        finally:
            upstream_server.set_default(UPSTREAM_PATHS[route], None)
            stream_replies(upstream_server)
        sequence.in_flight[name] = [settled(arm, names)]
        sequence.answers[name].append(send(arm, route, key))
        sequence.final[name] = settled(arm, names)
    for final in sequence.final.values():
        # LiteLLM's spend writer merges an entity's queued updates as they arrive, so the
        # queue's shape depends on timing: compared as totals.
        final["spend_updates"] = burst_comparable(final)["spend_updates"]
    assert [a.status for a in sequence.answers["plain"]] == [500, 200]
    assert_alike(sequence, route)


@pytest.mark.parametrize(("arms", "route"), cases(("chat", "messages-stream")), indirect=["arms"])
@pytest.mark.parametrize("limit", ["tpm", "parallel"])
def test_a_failed_request_gives_its_tokens_and_slot_back(
    arms: dict[str, Arm], upstream_server: RecordingUpstream, route: str, limit: str
) -> None:
    """A key with a tpm limit (or a parallel-request limit of 1) the lane serves: the provider
    fails one request. The same error on every arm, its token reservation refunded by the
    limiter's failure callback (its slot given back), and the next request answered and counted
    alike, request by request."""
    key = f"sk-failing-{limit}-{route}-{next(iter(arms.values())).proxy.port}"
    seed(
        arms, keys={key: {"tpm_limit": 100_000} if limit == "tpm" else {"max_parallel_requests": 1}}
    )
    names = frozenset({token_hash(key)})
    served_before = lane_counts(arms["lane"].log).get("served", 0)
    sequence = Sequence()

    # One arm at a time: the upstream's error is every arm's.
    def failures_settled(arm: Arm) -> int:
        return int(snapshot(arm, names)["post_call_work"]["rate_limiter_failure"]["finished"])

    for name, arm in arms.items():
        answers = [send(arm, route, key)]  # teaches the lane the key's verdict
        in_flight = [quiet(arm, names)]
        failed_before = failures_settled(arm)
        upstream_server.set_default(UPSTREAM_PATHS[route], upstream_error(route))
        try:
            answers.append(send(arm, route, key))
        finally:
            upstream_server.set_default(UPSTREAM_PATHS[route], None)
            stream_replies(upstream_server)
        wait_until(
            lambda arm=arm, before=failed_before: failures_settled(arm) > before,
            f"{name}'s failure callback",
            timeout=SETTLE_TIMEOUT_S,
        )
        in_flight.append(quiet(arm, names))
        answers.append(send(arm, route, key))
        sequence.answers[name] = answers
        sequence.in_flight[name] = in_flight
        sequence.final[name] = quiet(arm, names)
    for final in sequence.final.values():
        final["spend_updates"] = burst_comparable(final)["spend_updates"]
    assert [a.status for a in sequence.answers["plain"]] == [200, 500, 200]
    assert_alike(sequence, route)
    # The lane served the failing request and the one after it (one provider call each).
    assert lane_counts(arms["lane"].log).get("served", 0) >= served_before + 1
    assert lane_counts(arms["lane"].log).get("replayed", 0) >= 1
    for final in sequence.final.values():
        assert not any(gauges(final).values()), gauges(final)


# -- two proxies sharing one Redis ----------------------------------------------------------


# The lane's Redis client gives up on an unanswered command after this (`lane::ratelimit::redis`).
REDIS_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    server = RedisServer(executable)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def shared_redis_pair(
    shared_redis: RedisServer,
    upstream_server: RecordingUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Arm]]:
    """Two proxy instances behind one load balancer, sharing one Redis as LiteLLM's production
    setup does: one with the lane on `rust: true` models, one plain."""
    server = shared_redis
    pair: dict[str, Arm] = {}
    try:
        env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(server.port)}
        stream_replies(upstream_server)
        for name in ("lane", "plain"):
            log = tmp_path_factory.mktemp(f"shared-{name}") / "events.jsonl"
            log.touch()
            settings = {"fastpath_lane": True} if name == "lane" else {}
            proxy = logged_proxy(
                route_models(upstream_server, rust=name == "lane"),
                log,
                callbacks=("tests.spend_probe.probe",),
                env=env,
                **settings,
            )
            pair[name] = Arm(name, proxy, log)
        on_each(pair, lambda arm: arm.proxy.start())
        on_each(pair, wait_for_probe)
        yield pair
    finally:
        for arm in pair.values():
            arm.proxy.stop()
            arm.proxy._cleanup_tmp()


@pytest.mark.parametrize("route", ["chat", "messages-stream"])
def test_a_rate_limit_holds_across_two_proxies_sharing_redis(
    shared_redis_pair: dict[str, Arm], route: str
) -> None:
    """A key's rpm limit counts the requests of both instances, the lane's included (it counts
    them in the shared Redis itself): once the lane knows the key, a burst of 16 at once, 8 to
    each, admits exactly what the limit has left, and the lane serves some of it; a key without
    limits takes the lane there meanwhile."""
    limited, unlimited = f"sk-shared-rpm-{route}", f"sk-shared-free-{route}"
    seed(shared_redis_pair, keys={limited: {"rpm_limit": 8}, unlimited: {}})
    lane = shared_redis_pair["lane"]
    served_before = lane_counts(lane.log).get("served", 0)
    # The key's first request teaches the lane its verdict (and counts one).
    assert send(lane, route, limited).status == 200
    targets = [arm for arm in shared_redis_pair.values() for _ in range(8)]
    with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
        statuses = list(pool.map(lambda arm: send(arm, route, limited).status, targets))
    assert sorted(statuses) == [200] * 7 + [429] * 9, statuses
    wait_for_count(lane.log, "served", served_before + 1)
    served_before = lane_counts(lane.log).get("served", 0)
    assert [send(lane, route, unlimited).status for _ in range(3)] == [200] * 3
    wait_for_count(lane.log, "served", served_before + 2)


@pytest.mark.parametrize(
    "limit", [{"rpm_limit": 100}, {"tpm_limit": 1_000_000}, {"max_parallel_requests": 10}]
)
def test_a_rate_limited_key_goes_to_the_proxy_while_redis_does_not_answer(
    shared_redis: RedisServer, shared_redis_pair: dict[str, Arm], limit: dict[str, int]
) -> None:
    """With the proxy's Redis hanging, the lane cannot count a rate-limited key's request in the
    shared window (rpm), reserve its tokens (tpm) or take its slot (parallel): past its 1 s
    timeout it hands the request to the proxy (`lane_rate_limit_unverified`), whose limiter
    decides as LiteLLM decides once Redis answers; then the lane serves the key again."""
    key = f"sk-shared-unverified-{next(iter(limit))}"
    seed(shared_redis_pair, keys={key: limit})
    lane = shared_redis_pair["lane"]
    assert send(lane, "chat", key).status == 200  # LiteLLM judges the key
    served = lane_counts(lane.log).get("served", 0)
    assert send(lane, "chat", key).status == 200
    wait_for_count(lane.log, "served", served + 1)
    unverified = lane_counts(lane.log).get("lane_rate_limit_unverified", 0)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with shared_redis.unresponsive():
            pending = pool.submit(send, lane, "chat", key)
            # Past the lane's Redis timeout (1 s): the request is the proxy's by then.
            time.sleep(REDIS_TIMEOUT_S + 0.5)
        assert pending.result(timeout=60).status == 200
    wait_for_count(lane.log, "lane_rate_limit_unverified", unverified + 1)
    served = lane_counts(lane.log).get("served", 0)
    assert send(lane, "chat", key).status == 200
    wait_for_count(lane.log, "served", served + 1)
