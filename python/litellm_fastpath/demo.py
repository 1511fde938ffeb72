"""See the fast path work: `python -m litellm_fastpath.demo [N]`.

Starts the package's mock provider (`litellm_fastpath.mock_provider`) and a real LiteLLM proxy on
loopback, with two models of the same deployment: `plain` (served by LiteLLM's Python path) and
`fast` (`rust: true`). Sends N interleaved chat requests to each and prints which path served them
and how long they took; then the same for streamed answers (200 chunks, whole stream timed), for
an embeddings deployment (`plain-embed`, `fast-embed`) and for Anthropic's `/v1/messages`
(`plain-claude`, `fast-claude`).
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
import time
from pathlib import Path

import httpx

from litellm_fastpath.mock_provider import (
    HOST,
    ServerProcess,
    deployment_kwargs,
    embedding_deployment_kwargs,
)

MASTER_KEY = "sk-demo-master"
# (title, proxy route, request body without the model, model names: Python path, Rust path)
WORKLOADS = (
    (
        "chat",
        "/chat/completions",
        {"messages": [{"role": "user", "content": "Say hello"}]},
        ("plain", "fast"),
    ),
    (
        "streamed chat, 200 chunks",
        "/chat/completions",
        {"messages": [{"role": "user", "content": "Say hello"}], "stream": True, "max_tokens": 200},
        ("plain", "fast"),
    ),
    (
        "embeddings",
        "/embeddings",
        {"input": ["Say hello", "to the fast path"]},
        ("plain-embed", "fast-embed"),
    ),
    (
        "Anthropic Messages API",
        "/v1/messages",
        {"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 64},
        ("plain-claude", "fast-claude"),
    ),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def write_config(workdir: Path, mock_url: str) -> Path:
    deployment = deployment_kwargs("openai", mock_url)
    embedding = embedding_deployment_kwargs("openai", mock_url)
    claude = deployment_kwargs("anthropic", mock_url)
    config = {
        "model_list": [
            {"model_name": "plain", "litellm_params": deployment},
            {"model_name": "fast", "litellm_params": {**deployment, "rust": True}},
            {"model_name": "plain-embed", "litellm_params": embedding},
            {"model_name": "fast-embed", "litellm_params": {**embedding, "rust": True}},
            {"model_name": "plain-claude", "litellm_params": claude},
            {"model_name": "fast-claude", "litellm_params": {**claude, "rust": True}},
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


def send(client: httpx.Client, route: str, body: dict[str, object]) -> tuple[float, str]:
    started = time.perf_counter()
    resp = client.post(route, json=body)
    elapsed_ms = (time.perf_counter() - started) * 1000
    resp.raise_for_status()
    return elapsed_ms, resp.headers.get("x-litellm-rust", "absent")


def run(client: httpx.Client, n: int) -> None:
    for title, route, body, models in WORKLOADS:
        print(f"== {title} ({route}) ==")
        for model in models * 3:  # warm up connections, caches and both code paths
            send(client, route, {"model": model, **body})
        latencies: dict[str, list[float]] = {m: [] for m in models}
        rust_count = dict.fromkeys(models, 0)
        for i in range(n):
            for model in models:
                ms, header = send(client, route, {"model": model, **body})
                latencies[model].append(ms)
                rust_count[model] += header == "true"
                if i < 2:
                    print(
                        f"  request {i + 1} to {model!r:13} x-litellm-rust: {header:6} {ms:6.1f} ms"
                    )
        print(f"\n{'model':12} {'served by':12} {'p50 ms':>8} {'p90 ms':>8}")
        for model in models:
            count = rust_count[model]
            served = "Rust" if count == n else "Python" if count == 0 else f"mixed {count}/{n}"
            p50 = statistics.median(latencies[model])
            p90 = statistics.quantiles(latencies[model], n=10)[8]
            print(f"{model:12} {served:12} {p50:8.1f} {p90:8.1f}")
        plain, fast = models
        ratio = statistics.median(latencies[plain]) / statistics.median(latencies[fast])
        print(f"\np50 {plain} / {fast}: {ratio:.2f}x ({n} requests each, sequential, one worker)\n")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    # A plain `kill` should clean up like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    proxy = None
    with tempfile.TemporaryDirectory(prefix="fastpath-demo-") as tmp, ServerProcess() as mock:
        try:
            config = write_config(Path(tmp), mock.url)
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


if __name__ == "__main__":
    main()
