"""Servers in processes of their own, on loopback: the real LiteLLM proxy (`ProxyProcess`), and any
server that prints `READY <port>` once it listens (`ServerProcess`: the mock provider, the media
benches' sink). Each runs in its own session and is killed as a whole process group."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import httpx
import yaml  # type: ignore[import-untyped,unused-ignore]  # no stubs in the venv

from devtools.procfs import group_members, proc_state, proc_status, process_tree

MASTER_KEY = "sk-test-master"
HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[1]

# Keep the proxy offline, deterministic and DB-less; every key here is read by litellm 1.106.12.
_OFFLINE_ENV = {
    # Otherwise every process fetches the cost map from GitHub, with retries, at import.
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "DISABLE_SCHEMA_UPDATE": "True",  # never run prisma migrations
    "PYTHONUNBUFFERED": "1",  # so the log file is current when we show its tail
    # Loopback must never be routed through an HTTP proxy configured in the outer environment.
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
    # A worker that dies of a signal or a Rust abort leaves its stacks in the log.
    "PYTHONFAULTHANDLER": "1",
    "RUST_BACKTRACE": "1",
}
# A DB or Redis URL in the outer environment would make the proxy try to connect at startup.
_DROPPED_ENV = (
    "DATABASE_URL",
    "DATABASE_URL_READ_REPLICA",
    "DIRECT_URL",
    "REDIS_URL",
    "REDIS_HOST",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
_LOG_TAIL_CHARS = 6000
# How a worker's fast lane logs its first configuration (see `lane.groups._configure`), or that
# it will never have one.
_LANE_STATUS = re.compile(r"fastpath_lane: (off \(|serving model groups)")
_LANE_NEVER = re.compile(r"fastpath_lane: (refresh failed|.*the lane stays off)")
_LANE_STATUS_TIMEOUT_S = 15.0


class ProxyStartError(RuntimeError):
    pass


class ProxyGoneError(RuntimeError):
    """The proxy process exited while a test still talked to it."""


def free_port(host: str = HOST) -> int:
    # Racy: the port is free again before the proxy binds it, so start() retries on EADDRINUSE.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ProxyProcess:
    """The real `litellm --config ...` proxy in its own session, killed as a whole process group."""

    def __init__(
        self,
        model_list: list[dict[str, Any]],
        litellm_settings: dict[str, Any] | None = None,
        general_settings: dict[str, Any] | None = None,
        *,
        router_settings: dict[str, Any] | None = None,
        workers: int = 1,
        extra_env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 90.0,
        workdir: Path | None = None,
    ) -> None:
        self.model_list = model_list
        self.litellm_settings = litellm_settings
        self.general_settings = (
            {"master_key": MASTER_KEY} if general_settings is None else general_settings
        )
        self.router_settings = router_settings
        self.workers = workers
        self.extra_env = dict(extra_env or {})
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            # Kept after stop() only when the caller passes a workdir; ours is throwaway.
            self._tmp = tempfile.TemporaryDirectory(prefix="litellm-proxy-")
            workdir = Path(self._tmp.name)
        self.workdir = workdir
        self.config_path = workdir / "config.yaml"
        self.log_path = workdir / "proxy.log"
        self.port = 0
        self.startup_s = 0.0  # spawn-to-live time of the successful attempt, for reporting
        self._proc: subprocess.Popen[bytes] | None = None
        self._client: httpx.Client | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ProxyProcess:
        if self._proc is not None:
            return self
        self._write_config()
        for attempt in range(3):
            self.port = free_port()
            started = time.monotonic()
            self._spawn()
            try:
                self._wait_ready()
                self._wait_lane_configured()
                self.startup_s = time.monotonic() - started
                break
            except ProxyStartError:
                lost_port_race = "address already in use" in self.log_text().lower()
                self._kill_group()
                if not lost_port_race or attempt == 2:
                    raise
        # trust_env=False: outer HTTP(S)_PROXY settings must not intercept loopback calls.
        self._client = httpx.Client(base_url=self.url, trust_env=False, timeout=60.0)
        return self

    def stop(self, term_timeout: float = 10.0) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc is not None:
            self._kill_group(term_timeout)
            self._proc = None

    def __enter__(self) -> ProxyProcess:
        try:
            return self.start()
        except BaseException:
            self.stop()
            self._cleanup_tmp()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        self._cleanup_tmp()

    # -- introspection ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("proxy is not running")
        return self._proc.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def rss_bytes(self) -> int:
        """Resident memory of the proxy and all its descendants (uvicorn workers included)."""
        return proc_status(process_tree(self.pid))["VmRSS"]

    # -- HTTP ------------------------------------------------------------------------------

    def request(
        self, method: str, path: str, *, headers: Mapping[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        """Any request with the master key added (an explicit Authorization header wins)."""
        if self._client is None:
            raise RuntimeError("proxy is not running")
        merged = {"Authorization": f"Bearer {MASTER_KEY}", **(headers or {})}
        try:
            return self._client.request(method, path, headers=merged, **kwargs)
        except (httpx.ReadError, httpx.RemoteProtocolError) as err:
            # A kept-alive connection the server closed as the request went out (HTTP/1.1's
            # keep-alive race; seen once in CI on a probe's read): a GET is sent again, once,
            # on a new connection, where the proxy is still running.
            gone = self._gone(err)
            if method != "GET" or gone is not err:
                raise gone from err
            try:
                return self._client.request(method, path, headers=merged, **kwargs)
            except httpx.TransportError as again:
                raise self._gone(again) from again
        except httpx.TransportError as err:
            raise self._gone(err) from err

    def _gone(self, err: httpx.TransportError) -> Exception:
        """A failed connection says why where the proxy has died: its exit and its log.

        Refused for a new connection; reset or closed for one the client kept alive.
        """
        code = None if self._proc is None else self._proc.poll()
        if code is None and self._proc is not None and proc_state(self._proc.pid) in ("Z", None):
            # A dead multi-threaded process shows as a zombie before it can be reaped (its
            # other threads are still exiting).
            try:
                code = self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                return err
        if code is None:
            return err
        return ProxyGoneError(f"proxy exited with {code}: {err}\n{self._tail()}")

    def post(
        self,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        files: Any = None,
        data: Any = None,
        timeout: float | None = 60.0,
    ) -> httpx.Response:
        return self.request(
            "POST", path, json=json, headers=headers, files=files, data=data, timeout=timeout
        )

    def get(
        self, path: str, *, headers: Mapping[str, str] | None = None, timeout: float | None = 60.0
    ) -> httpx.Response:
        return self.request("GET", path, headers=headers, timeout=timeout)

    # -- internals -------------------------------------------------------------------------

    def _write_config(self) -> None:
        config: dict[str, Any] = {"model_list": self.model_list}
        if self.litellm_settings is not None:
            config["litellm_settings"] = self.litellm_settings
        if self.general_settings:
            config["general_settings"] = self.general_settings
        if self.router_settings is not None:
            config["router_settings"] = self.router_settings
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        return env | _OFFLINE_ENV | self.extra_env

    def _spawn(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "litellm.proxy.proxy_cli",
            "--config",
            str(self.config_path),
            "--port",
            str(self.port),
            "--host",
            HOST,
            "--num_workers",
            str(self.workers),
            *self.extra_args,
        ]
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            # New session => own process group, so stop() also reaps uvicorn's worker children.
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.workdir,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                code = self._proc.poll()
                if code is not None:
                    raise ProxyStartError(
                        f"proxy exited with {code} during startup\n{self._tail()}"
                    )
                try:
                    if client.get(f"{self.url}/health/liveliness").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                time.sleep(0.1)
        raise ProxyStartError(
            f"proxy not live after {self.startup_timeout:.0f}s on {self.url}\n{self._tail()}"
        )

    def _wait_lane_configured(self) -> None:
        """With the fast lane on, until every worker's lane has had LiteLLM's router state
        handed to it (a refresh after startup): before that it sends every request to the proxy
        (`lane_model`), which tests counting the lane's reasons would read as theirs."""
        if not (self.litellm_settings or {}).get("fastpath_lane"):
            return
        deadline = time.monotonic() + _LANE_STATUS_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.log_text()
            if len(_LANE_STATUS.findall(text)) >= self.workers or _LANE_NEVER.search(text):
                return
            time.sleep(0.05)
        # A proxy without a router never configures its lane: the tests see what it does.

    def _tail(self) -> str:
        return f"--- {self.log_path} (tail) ---\n{self.log_text()[-_LOG_TAIL_CHARS:]}"

    def _kill_group(self, term_timeout: float = 10.0) -> None:
        if self._proc is not None:
            stop_group(self._proc, term_timeout)

    def _cleanup_tmp(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def stop_group(proc: subprocess.Popen[bytes], term_timeout: float) -> None:
    """SIGTERM to the process group `proc` leads (its session), SIGKILL to what is left after
    `term_timeout`; returns once every member is gone, so callers see freed ports and memory."""
    # The session id equals the leader's pid and stays valid while any member lives.
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + term_timeout
    try:
        proc.wait(timeout=term_timeout)
    except subprocess.TimeoutExpired:
        pass
    # Workers may outlive the leader; wait for them too.
    if not _wait_group_gone(pgid, deadline):
        _signal_group(pgid, signal.SIGKILL)
        proc.wait()
        if not _wait_group_gone(pgid, time.monotonic() + 5.0):
            raise RuntimeError(f"process group {pgid} survived SIGKILL")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # group already empty


def _wait_group_gone(pgid: int, deadline: float) -> bool:
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class ServerProcess:
    """`python -m <module> --port 0 ...` in its own session (killed as a group), for a server
    that prints `READY <port>` once it listens (by default the mock provider)."""

    def __init__(
        self,
        module: str = "devtools.mock_provider",
        args: tuple[str, ...] = (),
        timeout: float = 15.0,
    ):
        self.cmd = [sys.executable, "-m", module, "--port", "0", *args]
        self.timeout = timeout
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=REPO_ROOT,  # where `python -m` finds `devtools` and `benches`
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        deadline, line = time.monotonic() + self.timeout, b""
        while not line and time.monotonic() < deadline and self.proc.poll() is None:
            if select.select([self.proc.stdout], [], [], 0.2)[0]:
                line = self.proc.stdout.readline()
        if not line.startswith(b"READY "):
            self.__exit__()
            raise RuntimeError(f"{' '.join(self.cmd[1:3])} did not start (got {line!r})")
        self.port = int(line.split()[1])
        return self

    def __exit__(self, *exc_info: object) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_group(proc, 5.0)
            if proc.stdout is not None:
                proc.stdout.close()
