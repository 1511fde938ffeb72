"""See the fast path work: `python -m devtools.demo [N]` (`make demo`), from the repo's root.

Starts the mock provider (`devtools.mock_provider`) and a real LiteLLM proxy on loopback, with
two models of the same deployment: `plain` (served by LiteLLM's Python path) and `fast`
(`rust: true`). Sends N interleaved chat requests to each and prints which path served them
and how long they took; then the same for streamed answers (200 chunks, whole stream timed), for
an embeddings deployment (`plain-embed`, `fast-embed`) and for Anthropic's `/v1/messages`
(`plain-claude`, `fast-claude`).
"""

from __future__ import annotations

import signal
import statistics
import sys
import time
from typing import Any

from devtools.deployments import deployment_kwargs, embedding_deployment_kwargs
from devtools.processes import ProxyProcess, ServerProcess

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


def model_list(mock_url: str) -> list[dict[str, Any]]:
    """Each deployment twice: `plain*` (LiteLLM's Python path) and `fast*` (`rust: true`)."""
    deployments = {
        "": deployment_kwargs("openai", mock_url),
        "-embed": embedding_deployment_kwargs("openai", mock_url),
        "-claude": deployment_kwargs("anthropic", mock_url),
    }
    return [
        {"model_name": f"{arm}{suffix}", "litellm_params": {**params, **rust}}
        for suffix, params in deployments.items()
        for arm, rust in (("plain", {}), ("fast", {"rust": True}))
    ]


def send(proxy: ProxyProcess, route: str, body: dict[str, object]) -> tuple[float, str]:
    started = time.perf_counter()
    resp = proxy.post(route, json=body)
    elapsed_ms = (time.perf_counter() - started) * 1000
    resp.raise_for_status()
    return elapsed_ms, resp.headers.get("x-litellm-rust", "absent")


def run(proxy: ProxyProcess, n: int) -> None:
    for title, route, body, models in WORKLOADS:
        print(f"== {title} ({route}) ==")
        for model in models * 3:  # warm up connections, caches and both code paths
            send(proxy, route, {"model": model, **body})
        latencies: dict[str, list[float]] = {m: [] for m in models}
        rust_count = dict.fromkeys(models, 0)
        for i in range(n):
            for model in models:
                ms, header = send(proxy, route, {"model": model, **body})
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
    try:
        with ServerProcess() as mock:
            settings = {"callbacks": ["litellm_fastpath.proxy.accelerator"]}
            print("starting the LiteLLM proxy on loopback (takes a few seconds)...")
            with ProxyProcess(model_list(mock.url), settings, startup_timeout=120) as proxy:
                print(f"proxy is live on {proxy.url}; sending requests\n")
                run(proxy, n)
    except KeyboardInterrupt:
        print("\ninterrupted")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
