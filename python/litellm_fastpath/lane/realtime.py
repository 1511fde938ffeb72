"""The Rust realtime relay's Python side (#25): which groups the lane relays, how a client is
told that the provider closed its session, and the replay of every relayed session.

The lane relays a GA `/v1/realtime` session of a `rust: true` OpenAI realtime group in Rust
when its deployment's pool has a warm provider session (see `src/lane/realtime`). Afterwards
the session's record (the frames LiteLLM's relay reads for its logging, and how it ended) runs
here through the proxy's own realtime endpoint: LiteLLM authenticates, runs its pre-call hooks,
takes the router's slot (the deployment the lane used), relays the recorded frames between a
client and a provider that exist only in memory, and logs the session once, with its usage and
cost, as it logs a session it relayed itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import litellm

from litellm_fastpath import _native, claims, compat
from litellm_fastpath import realtime as pool
from litellm_fastpath.bridge import settle
from litellm_fastpath.lane import slots

logger = logging.getLogger("litellm_fastpath")

# Replays running at once (each is a few milliseconds of the proxy's Python).
REPLAY_CONCURRENCY = 8
_groups: frozenset[str] = frozenset()


def served_groups() -> frozenset[str]:
    """The realtime groups the lane relays now."""
    return _groups


def configure(
    router: Any, off: bool, weights: Callable[[list[dict[str, Any]]], list[float | None]]
) -> None:
    """Hands the lane the groups it relays: those whose every deployment is a `rust: true`
    OpenAI realtime deployment with a pool (a group the router could route elsewhere is the
    proxy's). `weights`: the lane's simple-shuffle weights for a group's deployments."""
    global _groups
    relayed: dict[str, list[tuple[str, float, str, str, int, float]]] = {}
    if not off:
        by_group: dict[str, list[dict[str, Any]]] = {}
        for deployment in router.model_list:
            by_group.setdefault(deployment["model_name"], []).append(deployment)
        for name, deployments in by_group.items():
            # The router holds a deployment's slot for a whole session (its generic call).
            if any(slots.limit(router, deployment) for deployment in deployments):
                continue
            targets = [pool.dial_target(deployment) for deployment in deployments]
            if not targets or any(target is None for target in targets):
                continue
            rows = []
            for target, weight in zip(targets, weights(deployments), strict=True):
                assert target is not None
                binding, url, api_key = target
                rows.append(
                    (
                        binding.deployment_id,
                        1.0 if weight is None else float(weight),
                        url,
                        f"Bearer {api_key}",
                        binding.size,
                        binding.idle_s,
                    )
                )
            relayed[name] = rows
    _groups = frozenset(relayed)
    pool.set_relayed_in_rust(frozenset(row[0] for rows in relayed.values() for row in rows))
    logged = litellm.logged_real_time_event_types
    if logged == "*":
        types = None
    else:
        types = [str(t) for t in (logged or compat.DefaultLoggedRealTimeEventTypes)]
    _native.lane_set_realtime(relayed, types, close_notice)


def close_notice(code: int | None, reason: str) -> tuple[str | None, int, str]:
    """What LiteLLM's relay tells the client when the provider closes (`_close_client`): an
    `error` event unless the close was normal, and the close code and reason, redacted."""
    close = compat.backend_close_from(provider_closed(code, reason))
    message = compat.redact_internal_details_from_client_message(close.message)
    redacted = compat.redact_internal_details_from_client_message(close.reason)
    event = None
    if close.code != 1000:
        event = compat.realtime_error_event(message, error_type="server_error")
    reason_sent = compat.websocket_close_reason(redacted, fallback=message)
    return event, compat.client_close_code(close.code), reason_sent


def provider_closed(code: int | None, reason: str) -> Exception:
    """The exception the `websockets` client raises when the provider closes with `code` (None:
    the connection ended without a close frame)."""
    from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK
    from websockets.frames import Close

    if code is None:
        return ConnectionClosedError(None, None)
    kind = ConnectionClosedOK if code in (1000, 1001) else ConnectionClosedError
    return kind(Close(code, reason), None)


async def replay_relayed() -> None:
    """Takes the sessions the lane relayed, as they end, and replays each through the proxy."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(REPLAY_CONCURRENCY)
    running: set[asyncio.Task[None]] = set()
    while True:
        future: asyncio.Future[list[_native.LaneRealtimeSession]] = loop.create_future()
        _native.lane_next_realtime_sessions(loop, future, settle)
        for record in await future:
            await slots.acquire()
            # Each replay in a context of its own (the router's forced pick, the recorded
            # provider).
            task = loop.create_task(_replay(record), context=contextvars.Context())
            running.add(task)
            task.add_done_callback(running.discard)
            task.add_done_callback(lambda _: slots.release())


async def _replay(record: _native.LaneRealtimeSession) -> None:
    try:
        await replay_session(record)
    except Exception as err:  # one session's replay never stops the others; no frame logged
        logger.warning("fastpath_lane: a realtime session's replay failed (%s)", type(err).__name__)
    finally:
        _native.lane_realtime_replayed()


async def replay_session(record: _native.LaneRealtimeSession) -> None:
    """One relayed session through the proxy's realtime endpoint, against its record."""
    from starlette.websockets import WebSocket

    path, _, query = record.path.partition("?")
    session = RecordedSession(record)
    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "scheme": "ws",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in record.headers],
        "client": record.client,
        "server": record.server,
        "subprotocols": [],
        "state": {},
        "app": compat.proxy_server().app,
    }
    websocket = WebSocket(scope, receive=session.client_receive, send=session.client_send)
    models = parse_qs(query).get("model")
    model = models[0] if models else None
    key = await compat.user_api_key_auth_websocket(websocket)
    claims.force_deployment(record.deployment_id)
    token = pool.replaying.set(session)
    try:
        await compat.proxy_realtime_endpoint(
            websocket=websocket, model=model, intent=None, guardrails=None, user_api_key_dict=key
        )
    finally:
        pool.replaying.reset(token)


class RecordedSession:
    """A relayed session's two ends in memory: the client sends its recorded frames, the
    provider (what LiteLLM's `websockets.connect` returns in the replay) sends its own, and the
    session ends as it ended, once each side has said everything."""

    def __init__(self, record: _native.LaneRealtimeSession) -> None:
        self._from_client = deque(text for from_client, text in record.frames if from_client)
        self._from_provider = deque(text for from_client, text in record.frames if not from_client)
        self._ended_by_client = record.ended_by_client
        self._close = (record.close_code, record.close_reason)
        self._client_said_all = asyncio.Event()
        self._provider_said_all = asyncio.Event()
        self._connected = False

    # The client's side (an ASGI WebSocket's receive and send).
    async def client_receive(self) -> dict[str, Any]:
        if not self._connected:
            self._connected = True
            return {"type": "websocket.connect"}
        if self._from_client:
            return {"type": "websocket.receive", "text": self._from_client.popleft()}
        self._client_said_all.set()
        await self._provider_said_all.wait()
        if not self._ended_by_client:
            await asyncio.Event().wait()  # until the relay, ended by the provider, stops
        return {"type": "websocket.disconnect", "code": 1000}

    async def client_send(self, message: Any) -> None:
        """What LiteLLM sends the client went to the client already, from the lane."""

    # The provider's side (a `websockets` client connection).
    async def recv(self, decode: bool | None = None) -> str | bytes:
        if self._from_provider:
            text = self._from_provider.popleft()
            return text.encode() if decode is False else text
        self._provider_said_all.set()
        await self._client_said_all.wait()
        if self._ended_by_client:
            await asyncio.Event().wait()  # until the relay, ended by the client, stops
        raise provider_closed(*self._close)

    async def send(self, message: Any, *args: Any, **kwargs: Any) -> None:
        """What LiteLLM sends the provider went to the provider already, from the lane."""

    async def close(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def __aenter__(self) -> RecordedSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def __await__(self) -> Any:
        async def connected() -> RecordedSession:
            return self

        return connected().__await__()
