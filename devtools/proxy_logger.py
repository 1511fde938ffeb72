"""A proxy callback for the end-to-end tests and benches: `callbacks:
["devtools.proxy_logger.recorder"]`, or the whole proxy from `logged_proxy`.

Each success or failure event LiteLLM delivers becomes one JSON line in the file named by the
`FASTPATH_TEST_CALLBACK_LOG` environment variable, so a test can read what the proxy's logging
saw for a call served by Rust and for the same call served by Python; `events_for` reads it back.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

from devtools.polling import ABSENCE_S, wait_until
from devtools.processes import REPO_ROOT, ProxyProcess

LOG_ENV = "FASTPATH_TEST_CALLBACK_LOG"
RECORDER = "devtools.proxy_logger.recorder"


def recorder_env(callback_log: Path) -> dict[str, str]:
    """What a proxy's environment needs for `RECORDER` to load and write to `callback_log`."""
    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": pythonpath, LOG_ENV: str(callback_log)}


def logged_proxy(
    model_list: list[dict[str, Any]],
    callback_log: Path,
    *,
    callbacks: tuple[str, ...] = (),
    workers: int = 1,
    env: dict[str, str] | None = None,
    router_settings: dict[str, Any] | None = None,
    **litellm_settings: Any,
) -> ProxyProcess:
    """The real proxy with the accelerator and `RECORDER` (events in `callback_log`), plus
    `callbacks` and `litellm_settings`; router retries off unless `router_settings` say
    otherwise, since the tests count upstream requests per call."""
    return ProxyProcess(
        model_list,
        litellm_settings={
            "callbacks": ["litellm_fastpath.proxy.accelerator", RECORDER, *callbacks],
            **litellm_settings,
        },
        router_settings={"num_retries": 0} if router_settings is None else router_settings,
        workers=workers,
        extra_env={**recorder_env(callback_log), **(env or {})},
    )


def _response_cost(kwargs: dict[str, Any]) -> Any:
    cost = kwargs.get("response_cost")
    if cost is None:
        cost = (kwargs.get("standard_logging_object") or {}).get("response_cost")
    return cost


def _model_group(kwargs: dict[str, Any]) -> Any:
    metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
    # `/v1/messages` keeps it in the standard logging payload only.
    return metadata.get("model_group") or (kwargs.get("standard_logging_object") or {}).get(
        "model_group"
    )


def _usage(response_obj: Any) -> dict[str, Any] | None:
    usage = getattr(response_obj, "usage", None)
    if usage is None:
        return None
    return {
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),
    }


def _requester_ip(kwargs: dict[str, Any]) -> Any:
    metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
    return metadata.get("requester_ip_address")


def _rust_header(response_obj: Any) -> bool:
    hidden = getattr(response_obj, "_hidden_params", None) or {}
    return (hidden.get("additional_headers") or {}).get("x-litellm-rust") == "true"


def _lane_counts() -> dict[str, int] | None:
    """The fast lane's counts in this worker (None when the lane is off)."""
    from litellm_fastpath import lane

    return lane.counts() if lane.is_running() else None


def _realtime_pool_counts() -> dict[str, int]:
    from litellm_fastpath import realtime_pool_counts

    return realtime_pool_counts()


class Recorder(CustomLogger):
    """Appends one JSON line per logged event."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def _write(self, event: dict[str, Any]) -> None:
        path = os.environ.get(LOG_ENV)
        if not path:
            return
        line = json.dumps(event, default=str) + "\n"
        with self._lock, open(path, "a", encoding="utf-8") as f:
            f.write(line)

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._write(
            {
                "event": "success",
                "model": kwargs.get("model"),
                "model_group": _model_group(kwargs),
                "response_cost": _response_cost(kwargs),
                "usage": _usage(response_obj),
                "rust": _rust_header(response_obj),
                "lane": _lane_counts(),
                "realtime_pool": _realtime_pool_counts(),
                "pid": os.getpid(),
                "requester_ip": _requester_ip(kwargs),
                "payload": kwargs.get("standard_logging_object"),
            }
        )

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        exception = kwargs.get("exception")
        self._write(
            {
                "event": "failure",
                "model": kwargs.get("model"),
                "model_group": _model_group(kwargs),
                "response_cost": _response_cost(kwargs),
                "usage": _usage(response_obj),
                "rust": _rust_header(response_obj),
                "status_code": getattr(exception, "status_code", None),
                "lane": _lane_counts(),
                "realtime_pool": _realtime_pool_counts(),
                "exception": type(exception).__name__ if exception is not None else None,
                "payload": kwargs.get("standard_logging_object"),
            }
        )


recorder = Recorder()


def read_events(log: Path) -> list[dict[str, Any]]:
    """Every event written so far; a line still being written (no newline yet) is left out."""
    complete = log.read_text().rpartition("\n")[0]
    return [json.loads(line) for line in complete.splitlines()]


def lane_counts(log: Path) -> dict[str, int]:
    """The fast lane's counts as the last logged event saw them (empty: no lane)."""
    events = read_events(log)
    return next((e["lane"] for e in reversed(events) if e.get("lane") is not None), {})


def wait_for_count(log: Path, name: str, at_least: int, timeout: float = 10.0) -> dict[str, int]:
    """The lane's counts (`lane_counts`) once the count of `name` has reached `at_least`."""

    def reached() -> dict[str, int] | None:
        counts = lane_counts(log)
        return counts if counts.get(name, 0) >= at_least else None

    return wait_until(reached, lambda: lane_counts(log), timeout=timeout)


def events_for(log: Path, model_group: str, count: int, timeout: float = 10.0) -> list[dict]:
    """The events of `model_group` in `log`, once there are at least `count` of them."""
    return wait_for_events(log, lambda e: e.get("model_group") == model_group, count, timeout)


def wait_for_events(
    log: Path,
    matches: Callable[[dict[str, Any]], bool],
    count: int,
    timeout: float = 10.0,
    grace: float = ABSENCE_S,
) -> list[dict]:
    """The events in `log` that `matches`, once there are at least `count` of them (all there
    are after `timeout`).

    LiteLLM logs on a background worker, so events land shortly after the response; a duplicate
    would land within `grace` seconds more."""

    def matching() -> list[dict[str, Any]]:
        return [e for e in read_events(log) if matches(e)]

    try:
        wait_until(lambda: len(matching()) >= count, timeout=timeout)
    except AssertionError:
        return matching()
    time.sleep(grace)
    return matching()
