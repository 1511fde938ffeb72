"""#27's combined differential: a proxy with the lane against one without it, everything on at
once. 1,000 requests over 8 clients, with a recording `CustomLogger`, LiteLLM's spend tracking
(seeded keys of users and teams, one with a budget, one with rpm, tpm and parallel-request
limits, and the master key), usage-based routing (`usage-based-routing-v2`: the router picks by
each deployment's tokens and requests this minute, which it counts), a group whose usage the
router counts per minute, streams, `/v1/messages`, and a group whose upstream fails (500 and 429).
Both proxies must answer each request alike and be left alike: what the recording callback was
given for each request (field by field, ids and clocks aside), exactly once; the spend of each
key, user and team, the spend-log rows and the database updates LiteLLM queued; the router's
counts, its per-minute usage (usage-based routing's counters among them) and cooldowns, the
rate limiter's counters (the limited key's windows among them). Then SIGTERM right after 200
more answers: each is logged exactly once before the worker exits.

The lane serves the requests of the groups it serves: chat answers and streams, `/v1/messages`
answers and streams, of every caller (the budgeted key's with their own budget reservations, the
limited key's each counted by LiteLLM's rate limiter in the batch) are
logged and billed in its batches, LiteLLM's cost callback among the callbacks their logging runs,
but the replays each shape is learnt from."""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.answers import anthropic_stream_events, openai_stream_events, stream_pieces
from devtools.deployments import deployment_kwargs
from devtools.polling import wait_until
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.proxy_logger import lane_counts, logged_proxy, read_events
from devtools.upstream import RecordingUpstream, Reply
from tests.test_budgets_proxy import assert_same, token_hash
from tests.test_lane_accounting import STATE_PATH, comparable, normalized

pytestmark = [pytest.mark.proxy, pytest.mark.slow]

REQUESTS = 1000
AT_SHUTDOWN = 200
CLIENTS = 8
# Seeded into both proxies' auth caches (`tests.spend_probe`): keys of users in teams, one with
# a budget far from its limit (LiteLLM reserves for each of its requests), one with rate limits
# far from theirs (LiteLLM's limiter counts each request, reserves its tokens and holds a slot).
KEYS = {
    "sk-effects-a": {"user_id": "effects-user-a", "team_id": "effects-team-1"},
    "sk-effects-b": {"user_id": "effects-user-b", "team_id": "effects-team-1"},
    "sk-effects-budget": {"team_id": "effects-team-2", "max_budget": 1000.0, "spend": 1.0},
    "sk-effects-limited": {
        "user_id": "effects-user-c",
        "team_id": "effects-team-1",
        "rpm_limit": 1_000_000,
        "tpm_limit": 100_000_000,
        "max_parallel_requests": 64,
    },
}
USERS: dict[str, dict[str, Any]] = {
    "effects-user-a": {},
    "effects-user-b": {},
    "effects-user-c": {},
}
TEAMS: dict[str, dict[str, Any]] = {"effects-team-1": {}, "effects-team-2": {}}
# Where the database would hold them: a key's user's membership of its team.
MEMBERSHIPS = [
    {"user_id": fields["user_id"], "team_id": fields["team_id"]}
    for fields in KEYS.values()
    if "user_id" in fields
]
SEEDED = {"keys": KEYS, "users": USERS, "teams": TEAMS, "memberships": MEMBERSHIPS}
CALLERS = (MASTER_KEY, *KEYS)
NAMES = frozenset({*map(token_hash, KEYS), token_hash(MASTER_KEY), *USERS, *TEAMS})
# The failing groups' upstreams: what each answers every request.
FAILING = {
    "effects-failing": ("/effects-failing", 500, "server_error"),
    "effects-throttled": ("/effects-throttled", 429, "rate_limit_error"),
}
# The rate limiter's windows outlast the module, so that both arms' counts are whole (a 60 s
# window could end between the warm-up and the end of either arm's requests).
LIMITER_ENV = {"LITELLM_RATE_LIMIT_WINDOW_SIZE": "3600"}
USAGE_ROUTING = "usage-based-routing-v2"
SPEND_SEED_PATH = "/spend-probe/seed"
SPEND_SNAPSHOT_PATH = "/spend-probe/snapshot"
# Where the upstream answers `/v1/messages` as a stream (the recording upstream's default
# answer is whole), and where it streams a chat answer when asked to (with its usage).
STREAM_BASE = "/effects-stream"
USAGE_STREAM_BASE = "/effects-usage-stream"
# What a request is, by its index: (path, model group, streamed); every fifth fails upstream.
SHAPES = (
    ("/chat/completions", "effects-openai", False),
    ("/chat/completions", "effects-usage-stream", True),
    ("/v1/messages", "effects-usage-anthropic", False),
    ("/chat/completions", "effects-anthropic", False),
    ("/chat/completions", "effects-openai", True),
    ("/v1/messages", "effects-anthropic", False),
    ("/v1/messages", "effects-anthropic-stream", True),
    ("/chat/completions", "effects-usage", False),
    ("/chat/completions", "effects-throttled", False),
    ("/chat/completions", "effects-failing", False),
)


# Counts as of a moment in a request's handling, which its payload and spend row carry: the
# key's, user's and team's spend at its auth (the lane's replay authenticates after the answer,
# by when more of the key's requests may have settled: deliberate difference 2 with the lane
# on), the router's requests and tokens left this minute at its answer (8 clients at once: on
# either path they depend on which requests were counted first). Compared as being there; the
# totals are compared after.
AS_OF_A_MOMENT = frozenset(
    {
        "user_api_key_spend",
        "user_api_key_user_spend",
        "user_api_key_team_spend",
        "x_ratelimit_remaining_requests",
        "x_ratelimit_remaining_tokens",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-remaining-tokens",
    }
)


def as_of_a_moment(name: str) -> bool:
    """A count as of a moment (`AS_OF_A_MOMENT`), or what the rate limiter had left of a limit
    when it counted the request (`x-ratelimit-{descriptor}-remaining-…`)."""
    return name in AS_OF_A_MOMENT or (name.startswith("x-ratelimit-") and "-remaining-" in name)


def without_moments(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "<as of>" if as_of_a_moment(k) and v is not None else without_moments(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [without_moments(v) for v in value]
    return value


def models(upstream: RecordingUpstream) -> list[dict[str, Any]]:
    """Every group `rust: true` with one deployment (a fixed id: spend rows name it);
    `effects-usage`, `effects-usage-stream` and `effects-usage-anthropic` have an rpm and a tpm,
    so the router counts their usage per minute (a stream's tokens at its end), weighs it and
    puts it in their answers' headers (the lane's answers too)."""
    openai = deployment_kwargs("openai", upstream.url)
    groups = {
        "effects-openai": openai,
        "effects-anthropic": deployment_kwargs("anthropic", upstream.url),
        "effects-anthropic-stream": deployment_kwargs("anthropic", f"{upstream.url}{STREAM_BASE}"),
        "effects-usage": {**openai, "rpm": 100_000, "tpm": 10_000_000},
        "effects-usage-stream": {
            **deployment_kwargs("openai", f"{upstream.url}{USAGE_STREAM_BASE}"),
            "rpm": 100_000,
            "tpm": 10_000_000,
        },
        "effects-usage-anthropic": {
            **deployment_kwargs("anthropic", upstream.url),
            "rpm": 100_000,
            "tpm": 10_000_000,
        },
        **{
            group: deployment_kwargs("openai", f"{upstream.url}{base}")
            for group, (base, _, _) in FAILING.items()
        },
    }
    return [
        {
            "model_name": group,
            "litellm_params": {**params, "rust": True},
            "model_info": {"id": f"{group}-deployment"},
        }
        for group, params in groups.items()
    ]


@pytest.fixture(scope="module")
def arms(
    upstream_server: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[ProxyProcess, Path]]]:
    """`lane` and `plain`: the same models, the recording callback, the spend and state probes;
    `lane` adds `fastpath_lane: true`."""
    events = anthropic_stream_events("claude-sonnet-4-5", stream_pieces(3))
    sse = Reply(body=b"".join(events), headers={"Content-Type": "text/event-stream"})
    upstream_server.set_default(f"{STREAM_BASE}/v1/messages", sse)
    chunks = openai_stream_events("gpt-4o-mini", stream_pieces(3), include_usage=True)
    chat_sse = Reply(body=b"".join(chunks), headers={"Content-Type": "text/event-stream"})
    upstream_server.set_default(f"{USAGE_STREAM_BASE}/chat/completions", chat_sse, streamed=True)
    for base, status, kind in FAILING.values():
        error = {"error": {"message": f"upstream answered {status}", "type": kind}}
        upstream_server.set_default(f"{base}/chat/completions", Reply(status=status, json=error))
    started: dict[str, tuple[ProxyProcess, Path]] = {}
    try:
        for name in ("lane", "plain"):
            log = tmp_path_factory.mktemp(f"effects-{name}") / "events.jsonl"
            log.touch()
            settings = {"fastpath_lane": True} if name == "lane" else {}
            proxy = logged_proxy(
                models(upstream_server),
                log,
                callbacks=("tests.spend_probe.probe", "tests.state_probe.probe"),
                env=LIMITER_ENV,
                router_settings={"num_retries": 0, "routing_strategy": USAGE_ROUTING},
                **settings,
            )
            started[name] = (proxy.start(), log)
        for proxy, _ in started.values():
            wait_until(
                lambda p=proxy: (
                    p.get(SPEND_SNAPSHOT_PATH).status_code == 200
                    and p.get(STATE_PATH).status_code == 200
                ),
                "no probes",
                timeout=30,
            )
            seeded = proxy.post(SPEND_SEED_PATH, json=SEEDED)
            assert seeded.status_code == 200, seeded.text
            # Each caller once before the clients start: its budget counters loaded. (With its
            # database down LiteLLM loads a cold counter from the auth cache without a lock,
            # and concurrent first requests of a key each add the key's spend to it, on its
            # own path too.)
            for caller in CALLERS:
                body = {"model": "effects-openai", "messages": [{"role": "user", "content": "hi"}]}
                answer = proxy.post(
                    "/chat/completions", json=body, headers={"Authorization": f"Bearer {caller}"}
                )
                assert answer.status_code == 200, answer.text
        yield started
    finally:
        upstream_server.set_default(f"{STREAM_BASE}/v1/messages", None)
        upstream_server.set_default(f"{USAGE_STREAM_BASE}/chat/completions", None, streamed=True)
        for base, _, _ in FAILING.values():
            upstream_server.set_default(f"{base}/chat/completions", None)
        for proxy, _ in started.values():
            proxy.stop()
            proxy._cleanup_tmp()


def request(index: int) -> tuple[str, dict[str, Any], dict[str, str]]:
    """Request `index`: its path, body (its marker the first message) and headers."""
    path, group, stream = SHAPES[index % len(SHAPES)]
    body: dict[str, Any] = {
        "model": group,
        "messages": [{"role": "user", "content": f"marker {index}"}],
    }
    if path == "/v1/messages":
        body["max_tokens"] = 16
    if stream:
        body["stream"] = True
    return path, body, {"Authorization": f"Bearer {caller(index)}"}


def group(index: int) -> str:
    return SHAPES[index % len(SHAPES)][1]


def caller(index: int) -> str:
    """Who sends request `index`: each caller ten requests in turn."""
    return CALLERS[(index // len(SHAPES)) % len(CALLERS)]


# The start of each error answer's body, by (proxy port, request index): what a status
# mismatch between the arms shows.
ERROR_TEXTS: dict[tuple[int, int], str] = {}


def send_all(proxy: ProxyProcess, indices: range) -> dict[int, int]:
    """Each request of `indices` over `CLIENTS` clients: its status by index (an error's body in
    `ERROR_TEXTS`)."""

    def client_work(first: int) -> dict[int, int]:
        found = {}
        with httpx.Client(base_url=proxy.url, timeout=60, trust_env=False) as client:
            for index in itertools.islice(indices, first, None, CLIENTS):
                path, body, headers = request(index)
                with client.stream("POST", path, json=body, headers=headers) as response:
                    response.read()  # a stream to its end
                found[index] = response.status_code
                if response.status_code >= 400:
                    ERROR_TEXTS[(proxy.port, index)] = response.text[:500]
        return found

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        parts = list(pool.map(client_work, range(CLIENTS)))
    return {index: status for part in parts for index, status in part.items()}


def mismatched(arms: dict[str, Any], statuses: dict[str, dict[int, int]]) -> dict[int, Any]:
    """Where the arms' statuses differ: each arm's status and error body, by request index."""
    ports = {name: proxy.port for name, (proxy, _) in arms.items()}
    return {
        index: {
            name: (found[index], ERROR_TEXTS.get((ports[name], index)))
            for name, found in statuses.items()
        }
        for index in statuses["plain"]
        if statuses["lane"].get(index) != statuses["plain"][index]
    }


def on_both(arms: dict[str, Any], work: Callable[[Any], Any]) -> dict[str, Any]:
    with concurrent.futures.ThreadPoolExecutor(len(arms)) as pool:
        futures = {name: pool.submit(work, arm) for name, arm in arms.items()}
        return {name: future.result() for name, future in futures.items()}


def marker_of(payload: dict[str, Any]) -> int | None:
    for message in payload.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # /v1/messages: content blocks
            content = next((c.get("text") for c in content if isinstance(c, dict)), None)
        if isinstance(content, str) and content.startswith("marker "):
            return int(content.split()[1])
    return None


def events_by_marker(log: Path) -> dict[int, list[dict[str, Any]]]:
    """The recording callback's events for marked requests, by marker (a failure's from its
    payload, which LiteLLM's failure logging carries too)."""
    found: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for event in read_events(log):
        marker = marker_of(event.get("payload") or {})
        if marker is not None:
            found[marker].append(event)
    return found


def logged(log: Path, indices: range) -> dict[int, list[dict[str, Any]]] | None:
    found = events_by_marker(log)
    return found if all(index in found for index in indices) else None


def spend(proxy: ProxyProcess) -> dict[str, Any]:
    names = ",".join(sorted(NAMES))
    response = proxy.get(f"{SPEND_SNAPSHOT_PATH}?about={names}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def billed(snapshot: dict[str, Any]) -> dict[str, Any]:
    """What a worker billed: the spend-log rows, the budget counters (`spend:*`), the updates
    queued for the database summed per key, user, team and member (LiteLLM's writer merges
    queued updates when it will, and its daily queues), the rate limiter's counters.

    Not the spend on the auth cache's objects: LiteLLM's `update_cache` reads an object, adds
    the cost and writes it back across awaits, so concurrent answers lose each other's cost
    there on its own path too (by how many depends on timing); budgets read the counters."""
    queued: dict[str, float] = collections.defaultdict(float)
    for update in snapshot["spend_updates"]:
        queued[f"{update['entity_type']} {update['entity_id']}"] += update["response_cost"]
    return {
        "spend_logs": without_moments(snapshot["spend_logs"]),
        "spend_counters": {k: round(v, 9) for k, v in snapshot["spend_counters"].items()},
        "queued_spend": {k: round(v, 9) for k, v in sorted(queued.items())},
        "daily_updates": snapshot["daily_updates"],
        "rate_limit_counters": snapshot["rate_limit_counters"],
        "redis_counters": snapshot["redis_counters"],
    }


def settled(proxy: ProxyProcess) -> tuple[dict[str, Any], dict[str, Any]]:
    """(spend, router and limiter state) once nothing is open or pending and two looks agree."""
    last: list[Any] = []

    def done() -> tuple[dict[str, Any], dict[str, Any]] | None:
        state = proxy.get(STATE_PATH).json()
        found = (spend(proxy), state)
        work = found[0]["post_call_work"]
        quiet = (
            not found[0]["all_open_reservations"]
            and not found[0]["post_call_writes_pending"]
            and not state["lane_backlog"]
            and all(w["started"] == w["finished"] for w in work.values())
        )
        same = bool(last) and last[-1] == (found[0], comparable(state))
        last[:] = [(found[0], comparable(state))]
        return found if quiet and same else None

    return wait_until(done, lambda: last, timeout=60, interval=0.5)


def test_the_lane_leaves_every_effect_as_litellm_does(
    arms: dict[str, tuple[ProxyProcess, Path]],
) -> None:
    indices = range(REQUESTS)
    statuses = on_both(arms, lambda arm: send_all(arm[0], indices))
    # Each request answered alike on both arms: successes, and the failing group's errors.
    assert statuses["lane"] == statuses["plain"], mismatched(arms, statuses)
    failing = {i for i in indices if group(i) in FAILING}
    assert {i for i, s in statuses["plain"].items() if s != 200} == failing
    events = on_both(
        arms,
        lambda arm: wait_until(
            lambda: logged(arm[1], indices),
            lambda: sorted(set(indices) - set(events_by_marker(arm[1])))[:20],
            timeout=60,
        ),
    )
    found = on_both(arms, lambda arm: settled(arm[0]))

    # The recording callback: each request exactly once, with the same payload.
    ports = tuple(proxy.port for proxy, _ in arms.values())
    for index in indices:
        lane, plain = events["lane"][index], events["plain"][index]
        assert len(lane) == len(plain) == 1, (index, len(lane), len(plain))
        assert lane[0]["event"] == plain[0]["event"]
        assert_same(
            without_moments(normalized(lane[0]["payload"], ports)),
            without_moments(normalized(plain[0]["payload"], ports)),
            f"request {index}'s payload",
        )
    # The lane's own headers reach no record of a request (its ticket, the call id it chose).
    assert "x-fastpath-lane-ticket" not in arms["lane"][1].read_text()
    # Spend per key, user and team, the spend-log rows, the database updates and budget
    # counters; the router's and the limiter's state.
    lane_spend, lane_state = found["lane"]
    plain_spend, plain_state = found["plain"]
    assert_same(billed(lane_spend), billed(plain_spend), "spend")
    # A row per request of a seeded key, answered or failed (their warm-ups too).
    keyed = [i for i in indices if caller(i) in KEYS]
    assert len(plain_spend["spend_logs"]) == len(keyed) + len(KEYS)
    assert_same(comparable(lane_state), comparable(plain_state), "router and limiter")
    cache = comparable(plain_state)["router"]["cache"]
    assert any("effects-usage-deployment" in k for k in cache), "no usage counted per minute"
    streamed_tokens = [v for k, v in cache.items() if "effects-usage-stream-deployment:" in k]
    assert any(":tpm:" in k for k in cache if "effects-usage-stream" in k), cache
    assert sum(v for v in streamed_tokens if isinstance(v, (int, float))) > 0, cache
    assert any("effects-usage-anthropic-deployment:" in k for k in cache), cache
    # Usage-based routing's counters, each deployment's requests and tokens (a stream's too).
    for deployment in ("effects-openai", "effects-usage-stream", "effects-anthropic-stream"):
        counted = {k: v for k, v in cache.items() if k.startswith(f"{deployment}-deployment:")}
        assert any(":rpm:" in k and v for k, v in counted.items()), (deployment, cache)
        assert any(":tpm:" in k and v for k, v in counted.items()), (deployment, cache)

    # The lane served the requests it may, and handed each to LiteLLM once.
    counts = lane_state["lane"]
    handed = counts["accounted"] + sum(
        n for k, n in counts.items() if k.startswith("replay_needed:")
    )
    assert counts["served"] == handed, counts
    # Every request of a group the lane serves (upstream failures are handled by the proxy, see
    # deliberate difference 3 with the lane on).
    lane_groups = [i for i in indices if group(i) not in FAILING]
    assert counts["served"] == len(lane_groups), counts
    # Every caller's requests (the budgeted key's with their own reservations), answers and
    # streams, chat and `/v1/messages`, the group with rpm and tpm limits (counted per minute by
    # the router) included, are logged and billed in the lane's batches, but the replays that
    # learnt each key's request shapes.
    batched = len(lane_groups)
    assert counts["accounted"] + counts.get("replay_needed:shape", 0) == batched, counts
    # Each caller's eight shapes (chat: three answers, two streams; `/v1/messages`: two answers,
    # a stream) are learnt from two replays each, with the few served while those were in
    # flight.
    assert counts["accounted"] >= batched - 8 * 3 * len(CALLERS), counts


def test_each_answer_before_a_sigterm_is_logged_once(
    arms: dict[str, tuple[ProxyProcess, Path]],
) -> None:
    """SIGTERM right after the last of 200 answers (a batch still pending on the lane): both
    workers log each request exactly once before they exit."""
    indices = range(REQUESTS, REQUESTS + AT_SHUTDOWN)
    before = lane_counts(arms["lane"][1]).get("served", 0)

    def answer_then_stop(arm: tuple[ProxyProcess, Path]) -> dict[int, int]:
        statuses = send_all(arm[0], indices)
        arm[0].stop(term_timeout=60)
        return statuses

    statuses = on_both(arms, answer_then_stop)
    assert statuses["lane"] == statuses["plain"], mismatched(arms, statuses)
    for name, (_, log) in arms.items():
        found = events_by_marker(log)
        missing = [i for i in indices if len(found.get(i, ())) != 1]
        assert not missing, (name, missing[:10], {i: len(found.get(i, ())) for i in missing[:10]})
    assert lane_counts(arms["lane"][1]).get("served", 0) >= before + AT_SHUTDOWN // 2


SLOW_REQUESTS = 1200
# `replay.LOGGING_QUEUE_BOUND`, plus a batch's worth (64) and the replays in flight.
QUEUE_CEILING = 256 + 64 + 64


def test_a_slow_logging_callback_holds_the_lane_back_not_its_events(
    upstream_server: RecordingUpstream, tmp_path: Path
) -> None:
    """A logging callback slower than the lane (4 logging tasks at once, 10 ms each: 400
    events/s) and clients faster than it: the lane hands LiteLLM's logging no more than it
    keeps up with (its queue stays near `LOGGING_QUEUE_BOUND`; the rest wait in the lane's
    backlog), and every request is logged exactly once, through a SIGTERM right after the
    last answer."""
    log = tmp_path / "events.jsonl"
    log.touch()
    proxy = logged_proxy(
        [m for m in models(upstream_server) if m["model_name"] == "effects-openai"],
        log,
        callbacks=("tests.slow_logger.recorder",),
        env={"LOGGING_WORKER_CONCURRENCY": "4"},
        fastpath_lane=True,
    )
    with proxy:
        hi = {"model": "effects-openai", "messages": [{"role": "user", "content": "hi"}]}
        assert proxy.post("/chat/completions", json=hi).status_code == 200

        def client_work(_: int) -> list[str]:
            with httpx.Client(base_url=proxy.url, timeout=60, trust_env=False) as client:
                headers = {"Authorization": f"Bearer {MASTER_KEY}"}
                answers = [
                    client.post("/chat/completions", json=hi, headers=headers)
                    for _ in range(SLOW_REQUESTS // CLIENTS)
                ]
            assert all(a.status_code == 200 for a in answers)
            return [a.headers["x-litellm-call-id"] for a in answers]

        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            call_ids = [i for ids in pool.map(client_work, range(CLIENTS)) for i in ids]
        counts = lane_counts(log)
        proxy.stop(term_timeout=60)
    slow = [e for e in read_events(log) if e["event"] == "slow_success"]
    logged = collections.Counter(e["call_id"] for e in slow)
    assert [i for i in call_ids if logged[i] != 1] == []
    assert max(e["queued"] for e in slow) <= QUEUE_CEILING, max(e["queued"] for e in slow)
    # Logged in the lane's batches (past the replays that learnt the request's shape).
    assert lane_counts(log)["accounted"] >= SLOW_REQUESTS // 2, (counts, lane_counts(log))
