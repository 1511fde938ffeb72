"""The realtime pool (`fastpath_realtime_pool`): warm upstream sessions handed to LiteLLM's relay.

One proxy, one realtime mock, the same deployment four ways: `plain-realtime` (LiteLLM's path,
the specification), `rust-realtime` (`rust: true`, pool of 2 from the global setting),
`rust-nopool` (`rust: true`, pool 0 on the deployment) and `rust-otherkey` (`rust: true`, another
provider key); and `rust-expiring` (idle limit 1 s) on a second mock. The mock gives every
session its own id in `session.created`, so a test knows which provider session a client got:
whether it was warm before the client came, and that it served no one else. A second proxy runs
the plain and pooled twins with the fast lane on."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools import realtime
from devtools.polling import ABSENCE_S, wait_until
from devtools.processes import MASTER_KEY, ProxyProcess
from devtools.proxy_logger import events_for, logged_proxy, read_events
from devtools.realtime import ClientRun, RealtimeUpstream, Session

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
BETA = {**AUTH, "OpenAI-Beta": "realtime=v1"}
POOL = 2
# Headers that differ on every WebSocket handshake by design.
_PER_HANDSHAKE = {"sec-websocket-key", "host"}
_LEFT_OUT_BY_THE_RELAY = {"user-agent", "sec-websocket-extensions"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[RealtimeUpstream]:
    with RealtimeUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def churn() -> Iterator[RealtimeUpstream]:
    """A second provider, for a deployment whose warm sessions expire after 1 s."""
    with RealtimeUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def callback_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("realtime-pool") / "events.jsonl"


@pytest.fixture(scope="module")
def proxy(
    upstream: RealtimeUpstream, churn: RealtimeUpstream, callback_log: Path
) -> Iterator[ProxyProcess]:
    params = {"model": "openai/gpt-realtime", "api_key": "sk-upstream", "api_base": upstream.url}
    rust = {**params, "rust": True}
    models: list[dict[str, Any]] = [
        {"model_name": "plain-realtime", "litellm_params": params},
        {"model_name": "rust-realtime", "litellm_params": rust},
        {
            "model_name": "rust-nopool",
            "litellm_params": rust,
            "model_info": {"fastpath_realtime_pool": 0},
        },
        {"model_name": "rust-otherkey", "litellm_params": {**rust, "api_key": "sk-other"}},
        {
            "model_name": "rust-expiring",
            "litellm_params": {**rust, "api_base": churn.url},
            "model_info": {"fastpath_realtime_pool_idle_s": 1},
        },
    ]
    server = logged_proxy(models, callback_log, fastpath_realtime_pool=POOL)
    with server:
        yield server


def _url(proxy: ProxyProcess, model: str) -> str:
    return proxy.url.replace("http://", "ws://") + f"/v1/realtime?model={model}"


def _warm(upstream: RealtimeUpstream, key: str = "sk-upstream", beta: bool = False) -> list[str]:
    """Ids of the mock's idle sessions dialed with provider key `key` and protocol `beta`."""
    return [
        s.id
        for s in upstream.idle_sessions()
        if s.headers.get("authorization") == f"Bearer {key}"
        and ("openai-beta" in s.headers) == beta
    ]


def _wait_warm(
    upstream: RealtimeUpstream, count: int = POOL, timeout: float = 10.0, **key: Any
) -> list[str]:
    return wait_until(
        lambda: warm if len(warm := _warm(upstream, **key)) >= count else None,
        lambda: f"warm {_warm(upstream, **key)}",
        timeout=timeout,
    )


def _run(
    proxy: ProxyProcess, model: str, script: str = "conversation", headers: dict[str, str] = AUTH
) -> ClientRun:
    return asyncio.run(realtime.run_script(_url(proxy, model), script, headers))


def _served(upstream: RealtimeUpstream, run: ClientRun) -> Session:
    """The provider session `run` got, once the relay has closed it."""
    return wait_until(
        lambda: s if (s := upstream.session(run.session_id)).closed else None,
        f"session {run.session_id} still open",
    )


def _handshake(session: Session) -> dict[str, str]:
    return {k: v for k, v in session.headers.items() if k not in _PER_HANDSHAKE}


def _pool_counts(log: Path) -> dict[str, int]:
    """The proxy's pool counts as its last logged event saw them."""
    events = read_events(log)
    return next((e["realtime_pool"] for e in reversed(events) if e.get("realtime_pool")), {})


def _wait_count(log: Path, name: str, at_least: int) -> None:
    """Until a logged event (each session logs one as it ends) shows `name` at `at_least`."""
    wait_until(
        lambda: _pool_counts(log).get(name, 0) >= at_least, lambda: f"pool {_pool_counts(log)}"
    )


def _logged(payload: dict[str, Any]) -> dict[str, Any]:
    """What a session's success event says about it: usage, cost, input and the events logged
    (by type: each session's `session.created` carries the mock's id for it)."""
    keys = ("prompt_tokens", "completion_tokens", "total_tokens", "response_cost", "messages")
    response = payload.get("response") or {}
    logged = [event.get("type") for event in response.get("results") or ()]
    return {key: payload.get(key) for key in keys} | {"response": logged}


def _logged_count(log: Path, model: str) -> int:
    return sum(1 for e in read_events(log) if e.get("model_group") == model)


def test_each_worker_warms_its_deployments_at_startup(
    proxy: ProxyProcess, upstream: RealtimeUpstream, callback_log: Path
) -> None:
    """Before any client: the GA key of each `rust: true` realtime deployment with a pool is
    warm (none for the plain model or a pool of 0), and the first client gets a warm session."""
    assert not [s for s in upstream.snapshot() if s.received]
    warm = _wait_warm(upstream)
    _wait_warm(upstream, key="sk-other")
    wait_until(lambda: len(upstream.idle_sessions()) >= 2 * POOL)
    time.sleep(ABSENCE_S)  # no other deployment dials
    assert len(upstream.idle_sessions()) == 2 * POOL
    run = _run(proxy, "rust-realtime", "client_close_code")
    assert run.session_id in warm


@pytest.fixture(scope="module")
def warmed(proxy: ProxyProcess, upstream: RealtimeUpstream) -> ProxyProcess:
    """Every key in use warm: the GA keys from startup, others from their first session."""
    for model in ("rust-realtime", "rust-otherkey"):
        _run(proxy, model, "client_close_code")
    _wait_warm(upstream)
    _wait_warm(upstream, key="sk-other")
    return proxy


@pytest.mark.parametrize("script", realtime.SCRIPTS)
def test_a_warm_session_is_the_session_litellm_dials(
    warmed: ProxyProcess, upstream: RealtimeUpstream, callback_log: Path, script: str
) -> None:
    """Plain, `rust: true` without a pool and `rust: true` from the pool: the same frames to
    the client and to the provider, the same handshake, the same close codes, one success event
    each with the same usage and cost."""
    runs = {}
    for model in ("plain-realtime", "rust-nopool", "rust-realtime"):
        warm_before = _warm(upstream)
        logged_before = _logged_count(callback_log, model)
        run = _run(warmed, model, script)
        served = _served(upstream, run)
        assert (run.session_id in warm_before) == (model == "rust-realtime"), model
        runs[model] = (
            run.received,
            run.close,
            [realtime.normalized(m) for m in served.received],
            served.close_code,
            served.path,
            _handshake(served),
        )
        if script == "conversation":
            events = events_for(callback_log, model, logged_before + 1)[logged_before:]
            assert [e["event"] for e in events] == ["success"], model
            runs[model] += (_logged(events[0]["payload"]),)
    assert runs["rust-nopool"] == runs["plain-realtime"]
    assert runs["rust-realtime"] == runs["plain-realtime"]
    if script == "conversation":
        logged = runs["plain-realtime"][-1]
        assert logged["total_tokens"] == 60 and logged["response_cost"] > 0


def test_sessions_never_cross_keys(warmed: ProxyProcess, upstream: RealtimeUpstream) -> None:
    """A warm session is bound to its provider key and protocol: a beta client never gets a GA
    session, a deployment never another deployment's key."""
    _run(warmed, "rust-realtime", "client_close_code", BETA)  # the beta key's first: a miss
    _wait_warm(upstream, beta=True)
    for _ in range(2):
        for model, headers, key, beta in (
            ("rust-realtime", AUTH, "sk-upstream", False),
            ("rust-realtime", BETA, "sk-upstream", True),
            ("rust-otherkey", AUTH, "sk-other", False),
        ):
            warm_before = _warm(upstream, key=key, beta=beta)
            run = _run(warmed, model, "client_close_code", headers)
            served = _served(upstream, run)
            assert run.session_id in warm_before, (model, key, beta)
            assert served.headers["authorization"] == f"Bearer {key}"
            assert ("openai-beta" in served.headers) == beta
            _wait_warm(upstream, key=key, beta=beta)


def test_a_burst_larger_than_the_pool(
    warmed: ProxyProcess, upstream: RealtimeUpstream, callback_log: Path
) -> None:
    """Six clients at once against a pool of two: the two warm sessions go to two of them, the
    others dial; every client gets a provider session of its own and a whole conversation."""
    warm_before = _wait_warm(upstream)

    async def burst() -> list[ClientRun]:
        url = _url(warmed, "rust-realtime")
        return list(
            await asyncio.gather(
                *(realtime.run_script(url, "conversation", AUTH) for _ in range(6))
            )
        )

    runs = asyncio.run(burst())
    assert [run.close for run in runs] == [(1000, "")] * 6
    assert len({run.session_id for run in runs}) == 6
    assert len({run.session_id for run in runs} & set(warm_before)) == POOL
    for run in runs:
        served = _served(upstream, run)
        turns = [m for m in served.received if '"conversation.item.create"' in str(m)]
        assert len(turns) == 20
    _wait_warm(upstream)


def test_a_client_that_vanishes_ends_its_warm_session(
    warmed: ProxyProcess, upstream: RealtimeUpstream
) -> None:
    warm_before = _wait_warm(upstream)
    session_id = asyncio.run(realtime.vanish(_url(warmed, "rust-realtime"), AUTH))
    assert session_id in warm_before
    wait_until(lambda: upstream.session(session_id).closed, "the provider session is open")
    assert _run(warmed, "rust-realtime").close == (1000, "")


def test_warm_sessions_the_provider_closes_are_not_handed_out(
    warmed: ProxyProcess, upstream: RealtimeUpstream, callback_log: Path
) -> None:
    """The provider ends the sessions waiting in the pool: they count as dead, the next client
    still gets a working session, and the pool fills again."""
    _wait_warm(upstream)
    dead_before = _pool_counts(callback_log).get("dead", 0)
    assert upstream.close_idle() >= POOL
    run = _run(warmed, "rust-realtime")
    assert run.close == (1000, "")
    assert not upstream.session(run.session_id).close_code == 1001
    _wait_warm(upstream)
    _wait_count(callback_log, "dead", dead_before + POOL)


@pytest.mark.parametrize("status", [401, 429])
def test_a_refused_handshake(
    warmed: ProxyProcess, upstream: RealtimeUpstream, callback_log: Path, status: int
) -> None:
    """While the provider refuses every handshake, a client of the pooled deployment sees what
    a plain client sees, and the pool backs off instead of redialing at once; it fills again
    when the provider is back."""
    _wait_warm(upstream)
    upstream.refuse_status = status
    try:
        dials = upstream.dials
        upstream.close_idle()
        wait_until(lambda: upstream.dials >= dials + POOL, "the pool has not redialed")
        outcomes = [
            asyncio.run(realtime.attempt(_url(warmed, model), AUTH))
            for model in ("plain-realtime", "rust-realtime")
        ]
        assert outcomes[0] == outcomes[1]
        assert outcomes[0][0] == "refused" or outcomes[0][2] != 1000
        # Backing off (0.5, 1, 2, 4 s ...), each refused key's pool dials a few times in the
        # next 3 s, where redialing at once would dial hundreds of times.
        dials = upstream.dials
        time.sleep(3)
        assert upstream.dials - dials <= 3 * 3 * POOL
    finally:
        upstream.refuse_status = None
    _wait_warm(upstream, timeout=40)
    assert _run(warmed, "rust-realtime").close == (1000, "")


def test_a_stalled_provider_does_not_hold_clients(
    warmed: ProxyProcess, upstream: RealtimeUpstream
) -> None:
    """Pool dials stuck in a provider's slow handshake: a client meanwhile dials for itself
    and is served as soon as the provider answers it."""
    _wait_warm(upstream)
    upstream.handshake_delay_s = 15.0
    dials = upstream.dials
    upstream.close_idle()
    wait_until(lambda: upstream.dials >= dials + POOL, "the pool has not redialed")
    upstream.handshake_delay_s = 0.0
    run = _run(warmed, "rust-realtime")
    assert run.close == (1000, "")
    _wait_warm(upstream, timeout=30)


def test_warm_sessions_expire(
    proxy: ProxyProcess, churn: RealtimeUpstream, callback_log: Path
) -> None:
    """A warm session older than the idle limit is closed and replaced by a fresh one."""
    _run(proxy, "rust-expiring", "client_close_code")
    first = _wait_warm(churn)
    wait_until(
        lambda: all(churn.session(i).closed for i in first), "the first warm sessions stay open"
    )
    assert churn.session(first[0]).received == []
    replaced = _wait_warm(churn)
    assert not set(replaced) & set(first)
    _run(proxy, "rust-expiring", "client_close_code")
    _wait_count(callback_log, "expiries", POOL)


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
def test_the_openai_sdk_client(
    warmed: ProxyProcess, upstream: RealtimeUpstream, beta: bool
) -> None:
    """The official SDK's `client.realtime.connect()` (GA) and `client.beta.realtime.connect()`
    (beta header): the pooled deployment answers as the plain one, from a warm session of the
    client's protocol."""
    openai = pytest.importorskip("openai")

    async def session(model: str) -> tuple[list[Any], str]:
        # The beta client dials `wss://` unless told the WebSocket base.
        ws_base = warmed.url.replace("http://", "ws://") + "/v1"
        client = openai.AsyncOpenAI(
            api_key=MASTER_KEY, base_url=f"{warmed.url}/v1", websocket_base_url=ws_base
        )
        api = client.beta.realtime if beta else client.realtime
        async with api.connect(model=model) as connection:
            first = json.loads(await asyncio.wait_for(connection.recv_bytes(), 10))
            events = [realtime.normalized(json.dumps(first))]
            await connection.response.create()
            while events[-1].get("type") != "response.done":
                frame = await asyncio.wait_for(connection.recv_bytes(), 10)
                events.append(realtime.normalized(frame.decode()))
        return events, first["session"]["id"]

    asyncio.run(session("rust-realtime"))  # this protocol's pool may not exist yet: a miss
    warm_before = _wait_warm(upstream, beta=beta)
    plain, _ = asyncio.run(session("plain-realtime"))
    pooled, session_id = asyncio.run(session("rust-realtime"))
    assert pooled == plain
    assert [e["type"] for e in plain][-1] == "response.done"
    assert session_id in warm_before
    assert ("openai-beta" in upstream.session(session_id).headers) == beta


@pytest.fixture(scope="module")
def lane_upstream() -> Iterator[RealtimeUpstream]:
    with RealtimeUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def lane_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("realtime-pool-lane") / "events.jsonl"


@pytest.fixture(scope="module")
def lane_proxy(lane_upstream: RealtimeUpstream, lane_log: Path) -> Iterator[ProxyProcess]:
    """The plain and pooled twins behind the fast lane (which carries WebSockets to the proxy)."""
    params = {
        "model": "openai/gpt-realtime",
        "api_key": "sk-upstream",
        "api_base": lane_upstream.url,
    }
    models = [
        {"model_name": "plain-realtime", "litellm_params": params},
        {"model_name": "rust-realtime", "litellm_params": {**params, "rust": True}},
    ]
    server = logged_proxy(
        models,
        lane_log,
        callbacks=("prometheus",),
        fastpath_realtime_pool=POOL,
        fastpath_lane=True,
    )
    with server:
        yield server


@pytest.mark.parametrize("script", ["conversation", "upstream_close_code"])
def test_the_pool_behind_the_lane(
    lane_proxy: ProxyProcess, lane_upstream: RealtimeUpstream, lane_log: Path, script: str
) -> None:
    runs = {}
    for model in ("plain-realtime", "rust-realtime"):
        warm_before = _wait_warm(lane_upstream) if model == "rust-realtime" else []
        run = _run(lane_proxy, model, script)
        served = _served(lane_upstream, run)
        assert (run.session_id in warm_before) == (model == "rust-realtime")
        runs[model] = (
            run.received,
            run.close,
            [realtime.normalized(m) for m in served.received],
            served.close_code,
            # Behind the lane the pooled twin's session is relayed in Rust, whose handshake names
            # no user agent and offers no compression (a deliberate difference).
            {k: v for k, v in _handshake(served).items() if k not in _LEFT_OUT_BY_THE_RELAY},
        )
    assert runs["rust-realtime"] == runs["plain-realtime"]
    # The lane was on: the proxy's events carry its counts.
    events = events_for(lane_log, "rust-realtime", 1)
    assert events and events[-1]["lane"] is not None


def test_the_pool_on_the_proxys_metrics(
    lane_proxy: ProxyProcess, lane_upstream: RealtimeUpstream, lane_log: Path
) -> None:
    """With LiteLLM's prometheus callback on, the pool's events and warm sessions are on
    `/metrics`, equal to the pool's own counts (hits and misses change only with clients)."""
    from tests.test_metrics_proxy import scrape, value

    hits_before = _pool_counts(lane_log).get("hits", 0)
    _wait_warm(lane_upstream)
    _run(lane_proxy, "rust-realtime", "conversation")
    _wait_count(lane_log, "hits", hits_before + 1)
    counts = _pool_counts(lane_log)

    def scraped() -> dict[str, float]:
        series = scrape(lane_proxy)
        return {
            event: value(series, "litellm_fastpath_realtime_pool_events_total", event=event)
            for event in ("hits", "misses")
        }

    # The lane's own pools are folded into the metrics every second.
    wait_until(
        lambda: scraped() == {event: counts.get(event, 0) for event in ("hits", "misses")},
        lambda: f"scraped {scraped()}, counted {counts}",
    )
    series = scrape(lane_proxy)
    assert (
        value(series, "litellm_fastpath_realtime_pool_events_total", event="dials")
        >= (counts["hits"])
    )
    wait_until(
        lambda: value(scrape(lane_proxy), "litellm_fastpath_realtime_pool_warm") > 0,
        lambda: "no warm session on /metrics",
    )
