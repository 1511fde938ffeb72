"""Shared fixtures: a recording upstream on loopback and deployments of each provider pointing at
it (`deployment_kwargs`, shared with the benches and the demo), so every test can send the same
request through the Rust path and LiteLLM's Python path."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger

import litellm_fastpath
from litellm_fastpath.mock_provider import PROVIDERS as PROVIDERS
from litellm_fastpath.mock_provider import deployment_kwargs as deployment_kwargs
from tests.harness import ProxyProcess, RecordingUpstream


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[RecordingUpstream]:
    with RecordingUpstream() as server:
        yield server


@pytest.fixture
def upstream(upstream_server: RecordingUpstream) -> Iterator[RecordingUpstream]:
    upstream_server.reset()
    yield upstream_server
    upstream_server.reset()


REPO_ROOT = Path(__file__).resolve().parents[1]


def twin_models(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """`plain-<name>` and `rust-<name>`: one deployment, without and with `rust: true`."""
    return [
        {"model_name": f"plain-{name}", "litellm_params": dict(params)},
        {"model_name": f"rust-{name}", "litellm_params": {**params, "rust": True}},
    ]


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
    """The real proxy with the accelerator and `tests.proxy_logger` (events in `callback_log`),
    plus `callbacks` and `litellm_settings`; router retries off unless `router_settings` say
    otherwise, since the tests count upstream requests per call."""
    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return ProxyProcess(
        model_list,
        litellm_settings={
            "callbacks": [
                "litellm_fastpath.proxy.accelerator",
                "tests.proxy_logger.recorder",
                *callbacks,
            ],
            **litellm_settings,
        },
        router_settings={"num_retries": 0} if router_settings is None else router_settings,
        workers=workers,
        extra_env={
            "PYTHONPATH": pythonpath,
            "FASTPATH_TEST_CALLBACK_LOG": str(callback_log),
            **(env or {}),
        },
    )


@pytest.fixture(scope="module")
def e2e_upstream() -> Iterator[RecordingUpstream]:
    """A recording upstream for one module's proxy (module-scoped, like the proxy)."""
    with RecordingUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def callback_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file `tests.proxy_logger` writes one JSON line per logged event to."""
    path = tmp_path_factory.mktemp("callbacks") / "events.jsonl"
    path.touch()
    return path


@pytest.fixture(autouse=True, scope="session")
def fastpath_installed() -> Iterator[None]:
    litellm_fastpath.install()
    yield
    litellm_fastpath.uninstall()


@pytest.fixture(autouse=True)
def fresh_decline_counts() -> None:
    litellm_fastpath.reset_decline_counts()


def served_by_rust(response: Any) -> bool:
    headers = (getattr(response, "_hidden_params", {}) or {}).get("additional_headers") or {}
    return headers.get("x-litellm-rust") == "true" and "x-litellm-fastpath" in headers


def comparable(response: Any) -> dict[str, Any]:
    """A response as the client sees it, minus the fields that differ on every call."""
    dumped = response.model_dump()
    dumped.pop("id", None)
    dumped.pop("created", None)
    return dumped


@pytest.fixture
def litellm_module() -> Any:
    return litellm


class Recorder(CustomLogger):
    def __init__(self) -> None:
        super().__init__()
        self.successes: list[tuple[dict[str, Any], Any]] = []
        self.failures: list[dict[str, Any]] = []

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self.successes.append((kwargs, response_obj))

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self.failures.append(kwargs)


@pytest.fixture(scope="module")
def module_recorder() -> Iterator[Recorder]:
    # LiteLLM copies `litellm.callbacks` into its internal callback lists on first use, so one
    # recorder serves the module and is removed from every list afterwards.
    recorder = Recorder()
    litellm.callbacks = [*litellm.callbacks, recorder]
    yield recorder
    for name in (
        "callbacks",
        "_async_success_callback",
        "_async_failure_callback",
        "success_callback",
        "failure_callback",
    ):
        callbacks = getattr(litellm, name)
        if recorder in callbacks:
            callbacks.remove(recorder)


@pytest.fixture
def recorder(module_recorder: Recorder) -> Recorder:
    module_recorder.successes.clear()
    module_recorder.failures.clear()
    return module_recorder
