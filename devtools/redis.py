"""A throwaway `redis-server` on a free loopback port (Debian's package; `.ci/run` installs it),
for tests and benches that run LiteLLM with Redis as its production setup does."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator

from devtools.polling import wait_until
from devtools.processes import free_port


class RedisServer:
    """Started on construction, keeping nothing on disk; `env()` points a proxy at it."""

    def __init__(self, executable: str | None = None) -> None:
        executable = executable or shutil.which("redis-server")
        if executable is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        no_disk = ("--save", "", "--appendonly", "no")
        self._proc = subprocess.Popen(
            [executable, "--port", str(self.port), "--bind", "127.0.0.1", *no_disk],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def env(self) -> dict[str, str]:
        return {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(self.port)}

    def wait_ready(self) -> None:
        wait_until(lambda: self._answers_ping() or self._proc.poll() is not None, "no PONG")
        assert self._proc.poll() is None, "redis-server exited"

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    @contextlib.contextmanager
    def unresponsive(self) -> Iterator[None]:
        """The server stopped (SIGSTOP) for the block: connections stay open and nothing is
        answered, as with a server that hangs; it goes on afterwards."""
        self._proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
