"""See the fast path work: `python -m litellm_fastpath.demo [N]`.

Starts a tiny mock OpenAI provider and a real LiteLLM proxy on loopback, with two models of the
same deployment: `plain` (served by LiteLLM's Python path) and `fast` (`rust: true`). Sends N
interleaved requests to each and prints which path served them and how long they took.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

HOST = "127.0.0.1"
MASTER_KEY = "sk-demo-master"
MODELS = ("plain", "fast")
REPLY = json.dumps(
    {
        "id": "chatcmpl-demo",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the mock provider"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15},
    }
).encode()


class MockProvider(BaseHTTPRequestHandler):
    """Answers every OpenAI `/chat/completions` call with the same completion."""

    protocol_version = "HTTP/1.1"  # keep-alive, like a real provider
    # Headers and body go out in two writes; with Nagle on, the body waits for a delayed ACK.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        found = self.path.rstrip("/").endswith("/chat/completions")
        body = REPLY if found else b'{"error": {"message": "not found"}}'
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def write_config(workdir: Path, mock_url: str) -> Path:
    deployment = {"model": "openai/gpt-4o-mini", "api_base": mock_url, "api_key": "sk-mock"}
    config = {
        "model_list": [
            {"model_name": "plain", "litellm_params": deployment},
            {"model_name": "fast", "litellm_params": {**deployment, "rust": True}},
        ],
        "litellm_settings": {"callbacks": ["litellm_fastpath.proxy.accelerator"]},
        "general_settings": {"master_key": MASTER_KEY},
    }
    path = workdir / "config.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
    return path


def start_proxy(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {
        "LITELLM_MASTER_KEY": MASTER_KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DISABLE_SCHEMA_UPDATE": "True",
        "NO_PROXY": f"{HOST},localhost",
        "no_proxy": f"{HOST},localhost",
    }
    cmd = [sys.executable, "-m", "litellm.proxy.proxy_cli", "--config", str(config)]
    cmd += ["--port", str(port), "--host", HOST, "--num_workers", "1"]
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_live(client: httpx.Client, proxy: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proxy.poll() is not None:
            sys.exit(f"proxy exited with {proxy.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if client.get("/health/liveliness").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    sys.exit(f"proxy not live after 120s:\n{log.read_text()[-3000:]}")


def stop_proxy(proxy: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proxy.pid, sig)  # the whole group: uvicorn's workers too
        except ProcessLookupError:
            return
        try:
            proxy.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            pass


def send(client: httpx.Client, model: str) -> tuple[float, str]:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello"}]}
    started = time.perf_counter()
    resp = client.post("/chat/completions", json=body)
    elapsed_ms = (time.perf_counter() - started) * 1000
    resp.raise_for_status()
    return elapsed_ms, resp.headers.get("x-litellm-rust", "absent")


def run(client: httpx.Client, n: int) -> None:
    for model in MODELS * 3:  # warm up connections, caches and both code paths
        send(client, model)
    latencies: dict[str, list[float]] = {m: [] for m in MODELS}
    rust_count = dict.fromkeys(MODELS, 0)
    for i in range(n):
        for model in MODELS:
            ms, header = send(client, model)
            latencies[model].append(ms)
            rust_count[model] += header == "true"
            if i < 3:
                print(f"  request {i + 1} to {model!r:8} x-litellm-rust: {header:6} {ms:6.1f} ms")
    print(f"\n{'model':8} {'served by':12} {'p50 ms':>8} {'p90 ms':>8}")
    for model in MODELS:
        count = rust_count[model]
        served = "Rust" if count == n else "Python" if count == 0 else f"mixed {count}/{n}"
        p50 = statistics.median(latencies[model])
        p90 = statistics.quantiles(latencies[model], n=10)[8]
        print(f"{model:8} {served:12} {p50:8.1f} {p90:8.1f}")
    ratio = statistics.median(latencies["plain"]) / statistics.median(latencies["fast"])
    print(f"\np50 plain / fast: {ratio:.2f}x ({n} requests each, sequential, one worker)")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    # A plain `kill` should clean up like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    mock = ThreadingHTTPServer((HOST, 0), MockProvider)
    mock.daemon_threads = True
    threading.Thread(target=mock.serve_forever, daemon=True).start()
    proxy = None
    with tempfile.TemporaryDirectory(prefix="fastpath-demo-") as tmp:
        try:
            config = write_config(Path(tmp), f"http://{HOST}:{mock.server_address[1]}")
            port = free_port()
            print(f"starting the LiteLLM proxy on {HOST}:{port} (takes a few seconds)...")
            proxy = start_proxy(config, port, Path(tmp) / "proxy.log")
            headers = {"Authorization": f"Bearer {MASTER_KEY}"}
            url = f"http://{HOST}:{port}"
            with httpx.Client(base_url=url, headers=headers, trust_env=False, timeout=30) as c:
                wait_live(c, proxy, Path(tmp) / "proxy.log")
                print("proxy is live; sending requests\n")
                run(c, n)
        except KeyboardInterrupt:
            print("\ninterrupted")
            raise SystemExit(130) from None
        finally:
            if proxy is not None:
                stop_proxy(proxy)
            mock.shutdown()
            mock.server_close()


if __name__ == "__main__":
    main()
