"""Taking the proxy's socket: when the proxy imports our callback under uvicorn's startup with
`fastpath_lane: true`, the lane starts on the proxy's public socket and uvicorn serves a private
Unix socket behind it; at shutdown the lane stops taking connections and served requests'
replays finish first.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile
from typing import Any

from litellm_fastpath import _native, claims, compat, metrics
from litellm_fastpath.lane import accounting, groups, keys, middleware, realtime, reauth, replay

logger = logging.getLogger("litellm_fastpath")

SETTING = "fastpath_lane"
# How long a stopping worker waits for served requests' replays (their logging and spend).
DRAIN_S = 30.0
PEER_HEADER = b"x-fastpath-lane-peer"
_background: set[asyncio.Task[None]] = set()


def counts() -> dict[str, int]:
    """Requests the lane served, replayed through the proxy (its errors and unusual answers), or
    sent to the proxy, by reason (`lane_*`), in this worker; replays given LiteLLM's full auth,
    by why (`replay_litellm_auth:<why>`, see `reauth`); and served requests accounted for
    without a replay (`accounted`) or replayed, by why (`replay_needed:<why>`, see
    `accounting`)."""
    found = dict(_native.lane_counts())
    found.update({f"replay_litellm_auth:{why}": n for why, n in reauth.fallbacks.items()})
    found.update(accounting.counts())
    return found


def _configured() -> frozenset[str] | None:
    """The config file's other `litellm_settings` keys, when the file turns the lane on; None
    when it does not."""
    settings = compat.config_litellm_settings()
    if settings is None or settings.get(SETTING) is not True:
        return None
    return frozenset(settings) - {SETTING}


def _uvicorn_startup() -> tuple[Any, list[Any] | None] | None:
    """uvicorn's `Server` and the `sockets` it is about to serve on, from the startup frame
    our import runs under (the proxy imports callbacks during uvicorn's lifespan startup)."""
    import uvicorn

    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        return None
    for task in tasks:
        awaitable: Any = task.get_coro()
        while awaitable is not None:
            frame = getattr(awaitable, "cr_frame", None)
            if frame is None:
                break
            server = frame.f_locals.get("self")
            if frame.f_code.co_name == "startup" and isinstance(server, uvicorn.Server):
                return server, frame.f_locals.get("sockets")
            awaitable = getattr(awaitable, "cr_await", None)
    return None


def take_over() -> None:
    """Called when the proxy imports our callback: with the setting on, start the lane on the
    proxy's public socket and point uvicorn at a private Unix socket behind it."""
    if claims.lane_running():
        return
    litellm_settings = _configured()
    if litellm_settings is None:
        return
    found = _uvicorn_startup()
    if found is None:
        logger.warning("fastpath_lane: not under uvicorn's startup; the lane stays off")
        return
    server, sockets = found
    config = server.config
    if config.fd is not None or config.uds is not None or config.ssl is not None:
        logger.warning("fastpath_lane: uvicorn serves a socket file, fd or TLS; the lane stays off")
        return
    app_socket = os.path.join(tempfile.mkdtemp(prefix="litellm-fastpath-"), "app.sock")
    # Several workers share the parent's listening socket.
    shared = bool(sockets)
    if sockets:
        # Each worker's lane accepts on it, and each worker's uvicorn serves its own private
        # socket.
        public = sockets[0]
        private = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        private.bind(app_socket)
        private.listen(config.backlog)
        sockets[:] = [private]
    else:
        public = config.bind_socket()
        config.uds = app_socket
    public.listen(config.backlog)  # uvicorn's own servers would have called it
    config.loaded_app = _ClientAddress(config.loaded_app)
    _native.start_lane(
        public.fileno(),
        app_socket,
        shared_socket=shared,
        keep_alive_timeout=config.timeout_keep_alive,
    )
    server._litellm_fastpath_public_socket = public  # kept open for the worker's lifetime
    _wrap_shutdown(server)
    claims.lane_started()
    loop = asyncio.get_running_loop()
    _background.add(loop.create_task(groups.keep_current(litellm_settings)))
    _background.add(loop.create_task(replay.replay_served(keys.judged, keys.note_batched)))
    _background.add(loop.create_task(realtime.replay_relayed()))
    if metrics.recorder is not None:
        _background.add(loop.create_task(metrics.fold_lane_forever()))
    logger.info("fastpath_lane: serving on %s:%s", config.host, config.port)


class _ClientAddress:
    """uvicorn serves the lane's Unix socket, whose peer is the lane: this puts the client's
    address (from the lane's header) where uvicorn would have put it, ahead of uvicorn's own
    `X-Forwarded-For` handling, so LiteLLM sees requests as it did without the lane."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            peer = None
            headers = []
            for name, value in scope.get("headers") or ():
                if name == PEER_HEADER:
                    peer = value.decode("latin-1")
                else:
                    headers.append((name, value))
            if peer is not None:
                host, _, port = peer.rpartition(":")
                scope = {**scope, "headers": headers, "client": (host.strip("[]"), int(port))}
        await self.app(scope, receive, send)


def _wrap_shutdown(server: Any) -> None:
    """Stop taking connections, then let the replays of served requests finish (their logging
    and spend) while uvicorn still serves, then shut uvicorn down."""
    shutdown = server.shutdown

    async def drained_shutdown(*args: Any, **kwargs: Any) -> None:
        _native.lane_stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        while _still_logging() and loop.time() < deadline:
            await asyncio.sleep(0.02)
        # LiteLLM's own drain, next, waits for its in-flight count to reach zero.
        middleware.count_in_flight()
        metrics.fold_lane()
        await shutdown(*args, **kwargs)

    server.shutdown = drained_shutdown


def _still_logging() -> bool:
    """Served requests not yet handed to LiteLLM, or their logging still queued or running in
    its logging worker: its shutdown gives that queue seconds and cancels what runs, and a
    logging callback slower than the lane may still have hundreds there."""
    return bool(_native.lane_backlog() or compat.logging_queue_length() or compat.logging_running())
