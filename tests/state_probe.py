"""A proxy callback for the accounting tests: `callbacks: ["tests.state_probe.probe"]`.

It overrides none of a callback's methods (so the lane may account for requests without their
replay where it is the only callback besides LiteLLM's own) and adds routes to the proxy's app:

- `GET /state-probe/state`: what LiteLLM keeps of the requests this worker answered (the
  router's counts, its cache and the rate limiter's counters in the worker), the lane's counts,
  and what the recording callback (once added) received;
- `POST /state-probe/recorder`: adds a callback that records every success and failure it is
  given, as an operator's logging callback would be (`litellm.callbacks`, at runtime);
- `GET /state-probe/payloads`: what that callback was given for each success, as JSON (its
  `kwargs`, the standard logging payload among them, and the response object);
- `POST /state-probe/settings` `{"info_logs": bool}`: sets LiteLLM's loggers to INFO (or
  back); `{"redactor": bool}` adds (or removes) a callback with its own redaction of the payloads
  it is given.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

import litellm
from fastapi import Request
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy import proxy_server

from litellm_fastpath import _native, lane

STATE_PATH = "/state-probe/state"
RECORDER_PATH = "/state-probe/recorder"
PAYLOADS_PATH = "/state-probe/payloads"
SETTINGS_PATH = "/state-probe/settings"
# LiteLLM's loggers (at INFO a replay logs per request).
LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


class _Recorder(CustomLogger):
    """Counts each event by model group and call id (a call logged twice shows as 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: collections.Counter[str] = collections.Counter()
        self.payloads: list[dict[str, Any]] = []

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, *_: Any, **__: Any
    ) -> None:
        self._note("success", kwargs)
        response = response_obj.model_dump() if hasattr(response_obj, "model_dump") else None
        self.payloads.append({"kwargs": _jsonable(kwargs), "response": _jsonable(response)})

    async def async_log_failure_event(self, kwargs: Any, *_: Any, **__: Any) -> None:
        self._note("failure", kwargs)

    async def async_post_call_failure_hook(self, request_data: Any, *_: Any, **__: Any) -> None:
        # As operators' logging callbacks often have one: never called for an answer.
        model = request_data.get("model") if isinstance(request_data, dict) else None
        self.events[f"failure_hook:{model}:{id(request_data)}"] += 1

    def _note(self, event: str, kwargs: Any) -> None:
        payload = kwargs.get("standard_logging_object") or {}
        self.events[f"{event}:{payload.get('model_group')}:{kwargs.get('litellm_call_id')}"] += 1


_recorder: list[_Recorder] = []


class _Redactor(CustomLogger):
    """An operator's logging callback that hides the messages from its own view of each payload
    (LiteLLM's per-callback redaction hook, which the lane's batch does not run): counts each
    success by model group and the messages it was shown."""

    def __init__(self) -> None:
        super().__init__()
        self.events: collections.Counter[str] = collections.Counter()

    def redact_standard_logging_payload_from_model_call_details(
        self, model_call_details: dict
    ) -> dict:
        payload = model_call_details.get("standard_logging_object") or {}
        return {
            **model_call_details,
            "standard_logging_object": {**payload, "messages": "<hidden>"},
        }

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, *_: Any, **__: Any
    ) -> None:
        payload = kwargs.get("standard_logging_object") or {}
        self.events[f"{payload.get('model_group')}:{payload.get('messages')}"] += 1


_redactor = _Redactor()
# Where the proxy registers a callback from its config, and (removing) every list LiteLLM may
# have copied it to on a request's way.
_REGISTERED = ("callbacks", "_async_success_callback", "_async_failure_callback")
_COPIED = ("input_callback", "success_callback", "failure_callback")


def _set_redactor(on: bool) -> None:
    for name in _REGISTERED if on else _REGISTERED + _COPIED:
        listed = getattr(litellm, name)
        while not on and _redactor in listed:
            listed.remove(_redactor)
        if on and _redactor not in listed:
            listed.append(_redactor)


def _jsonable(value: Any, depth: int = 0) -> Any:
    if depth > 12:
        return "<deep>"
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return f"<{type(value).__qualname__}>"  # an object, by kind (its address differs)


def _cache(cache: Any) -> dict[str, Any]:
    found = {}
    for key, value in dict(cache.cache_dict).items():
        if str(key).endswith("_max_parallel_requests_client"):
            # A deployment's slots, by its calls in flight: none is as good as no slot object
            # (the router makes one with none when it first calls the deployment; the lane
            # installs its shared one up front).
            if value.in_flight:
                found[str(key)] = {"in_flight": value.in_flight}
            continue
        found[str(key)] = _jsonable(value)
    return found


async def _state() -> dict[str, Any]:
    router = proxy_server.llm_router
    limiter_cache = proxy_server.proxy_logging_obj.internal_usage_cache.dual_cache
    events: collections.Counter[str] = collections.Counter()
    for recorder in _recorder:
        for name, count in recorder.events.items():
            event, group, _ = name.split(":", 2)
            events[f"{event}:{group}"] += 1
            events["logged_twice"] += count > 1
    return {
        "router": {
            "total_calls": dict(router.total_calls),
            "success_calls": dict(router.success_calls),
            "fail_calls": dict(router.fail_calls),
            "cache": _cache(router.cache.in_memory_cache),
        },
        "limiter": {
            k: v for k, v in _cache(limiter_cache.in_memory_cache).items() if k.startswith("{")
        },
        "lane": lane.counts() if lane.is_running() else None,
        "lane_backlog": _native.lane_backlog() if lane.is_running() else 0,
        "recorded": dict(events),
        "redacted": dict(_redactor.events),
    }


async def _payloads() -> list[dict[str, Any]]:
    return [payload for recorder in _recorder for payload in recorder.payloads]


async def _add_recorder() -> dict[str, bool]:
    if not _recorder:
        _recorder.append(_Recorder())
        # As the proxy registers a callback from its config: in each list LiteLLM reads.
        manager = litellm.logging_callback_manager
        manager.add_litellm_callback(_recorder[0])
        manager.add_litellm_async_success_callback(_recorder[0])
        manager.add_litellm_async_failure_callback(_recorder[0])
    return {"added": True}


_levels: dict[str, int] = {}


async def _settings(request: Request) -> dict[str, bool]:
    body = await request.json()
    if "info_logs" in body:
        for name in LITELLM_LOGGERS:
            found = logging.getLogger(name)
            if body["info_logs"]:
                _levels.setdefault(name, found.level)
                found.setLevel(logging.INFO)
            elif name in _levels:
                found.setLevel(_levels.pop(name))
    if "redactor" in body:
        _set_redactor(bool(body["redactor"]))
    return {key: bool(value) for key, value in body.items()}


async def _after_startup() -> None:
    while proxy_server.shared_aiohttp_session is None:
        await asyncio.sleep(0.05)
    proxy_server.app.add_api_route(STATE_PATH, _state, methods=["GET"])
    proxy_server.app.add_api_route(RECORDER_PATH, _add_recorder, methods=["POST"])
    proxy_server.app.add_api_route(PAYLOADS_PATH, _payloads, methods=["GET"])
    proxy_server.app.add_api_route(SETTINGS_PATH, _settings, methods=["POST"])


class Probe(CustomLogger):
    pass


_task = asyncio.get_event_loop().create_task(_after_startup())
probe = Probe()
