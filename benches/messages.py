"""`/v1/messages` (`litellm.anthropic_messages`): LiteLLM's Python path, LiteLLM's own native
route (`LITELLM_RUST=1`, Anthropic only) and the fast path (`rust: true`), against the package's
mock provider (method: benches/README.md).

- in-process, non-streaming: per-call median latency and CPU, arms interleaved in blocks, for a
  small request and a coding-agent request (long system prompt, tools, a tool exchange), on
  `anthropic/…` (three arms) and Bedrock Invoke (two arms: LiteLLM's native route has no
  Bedrock);
- through one proxy worker, streaming: time to the first event added over the same stream
  fetched from the mock directly, 20 concurrent streams of 200 events back to back (p50/p99);
  the native arm is a second proxy started with `LITELLM_RUST=1` (same config, no `rust: true`).

`python -m benches.messages [--quick]`; results in benches/results/messages.{md,json,png}.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from benches._common import (
    arg_parser,
    cpu_seconds,
    log,
    machine,
    machine_line,
    median,
    percentile,
    write_results,
)
from benches.streaming import run_client

ANTHROPIC_MODEL = "claude-sonnet-4-5"
BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
IN_PROCESS_BAR = 0.25
TTFT_BAR = 0.5


def _tool(i: int) -> dict[str, Any]:
    return {
        "name": f"tool_{i}",
        "description": f"Tool {i}",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    }


def requests() -> dict[str, dict[str, Any]]:
    agent = {
        "system": [
            {"type": "text", "text": "You are a coding agent. " * 200},
            {"type": "text", "text": "Rules. " * 100, "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Fix main.rs"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading it."},
                    {"type": "tool_use", "id": "toolu_1", "name": "tool_0", "input": {"path": "a"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "fn main() {}\n" * 50,
                    }
                ],
            },
        ],
        "tools": [_tool(i) for i in range(10)],
        "max_tokens": 1024,
    }
    return {
        "small": {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 64},
        "agent": agent,
    }


def deployment(provider: str, url: str) -> dict[str, Any]:
    if provider == "anthropic":
        return {"model": f"anthropic/{ANTHROPIC_MODEL}", "api_base": url, "api_key": "sk-bench"}
    return {
        "model": f"bedrock/{BEDROCK_MODEL}",
        "api_base": url,
        "aws_access_key_id": "AKIDBENCH",
        "aws_secret_access_key": "secret",
        "aws_region_name": "us-east-1",
    }


# -- in-process ----------------------------------------------------------------------------------


async def _call(litellm: Any, arm: str, kwargs: dict[str, Any]) -> tuple[float, float, bool]:
    """One call of `arm`: (latency ms, CPU ms, served by the arm it was meant for)."""
    import litellm_fastpath

    if arm == "native":
        os.environ["LITELLM_RUST"] = "1"
    else:
        os.environ.pop("LITELLM_RUST", None)
    litellm_fastpath.reset_decline_counts()
    c0, t0 = time.process_time(), time.perf_counter()
    answer = await litellm.anthropic_messages(**kwargs, **({"rust": True} if arm == "rust" else {}))
    t1, c1 = time.perf_counter(), time.process_time()
    native = "_hidden_params" in answer
    if arm == "rust":
        served = not litellm_fastpath.decline_counts() and not native
    else:
        served = native == (arm == "native")
    return (t1 - t0) * 1000, (c1 - c0) * 1000, served


async def bench_in_process(url: str, args: Any) -> list[dict[str, Any]]:
    import litellm

    import litellm_fastpath

    litellm_fastpath.install()
    calls = 200 if args.quick else 1000
    block = 50
    results = []
    for provider in ("anthropic", "bedrock"):
        arms = ("python", "native", "rust") if provider == "anthropic" else ("python", "rust")
        for name, request in requests().items():
            kwargs = {**deployment(provider, url), **request}
            for _ in range(20):
                for arm in arms:
                    await _call(litellm, arm, kwargs)
            data: dict[str, dict[str, list[float]]] = {a: {"lat": [], "cpu": []} for a in arms}
            misrouted = {a: 0 for a in arms}
            for _ in range(calls // block):
                for arm in arms:
                    for _ in range(block):
                        lat, cpu, served = await _call(litellm, arm, kwargs)
                        if not served:
                            misrouted[arm] += 1
                            continue
                        data[arm]["lat"].append(lat)
                        data[arm]["cpu"].append(cpu)
            row: dict[str, Any] = {"provider": provider, "request": name, "arms": {}}
            for arm in arms:
                lat = sorted(data[arm]["lat"])
                row["arms"][arm] = {
                    "calls": len(lat),
                    "median_ms": median(lat),
                    "p99_ms": percentile(lat, 99),
                    "cpu_ms_per_call": sum(data[arm]["cpu"]) / max(1, len(data[arm]["cpu"])),
                    "misrouted": misrouted[arm],
                }
            py = row["arms"]["python"]["median_ms"]
            row["ratio_rust_python"] = row["arms"]["rust"]["median_ms"] / py
            if "native" in arms:
                row["ratio_native_python"] = row["arms"]["native"]["median_ms"] / py
            log(f"in-process {provider}/{name}: " + json.dumps(row["arms"]))
            results.append(row)
    os.environ.pop("LITELLM_RUST", None)
    return results


# -- through the proxy, streaming ------------------------------------------------------------------
# The clients are `benches.streaming`'s (own process; the time to the first `data:` line).


def _proxy(mock_url: str, native: bool) -> Any:
    from tests.conftest import twin_models
    from tests.harness import ProxyProcess

    models = twin_models("claude", deployment("anthropic", mock_url))
    return ProxyProcess(
        models,
        litellm_settings={"callbacks": ["litellm_fastpath.proxy.accelerator"]},
        router_settings={"num_retries": 0},
        extra_env={"LITELLM_RUST": "1"} if native else {},
    )


def bench_streaming(mock_url: str, quick: bool) -> dict[str, Any]:
    from benches._common import process_tree
    from tests.harness.proxy import MASTER_KEY

    reps = 1 if quick else 3
    rounds = 2 if quick else 4
    firsts: dict[str, list[float]] = {"python": [], "native": [], "rust": [], "direct": []}
    cpu_per_stream: dict[str, list[float]] = {"python": [], "native": [], "rust": []}
    with _proxy(mock_url, native=False) as proxy, _proxy(mock_url, native=True) as native:
        targets = {
            "python": (proxy, "plain-claude"),
            "rust": (proxy, "rust-claude"),
            "native": (native, "plain-claude"),
        }

        def spec(arm: str, **kw: Any) -> dict[str, Any]:
            server, model = targets[arm]
            return {"url": f"{server.url}/v1/messages", "model": model, "key": MASTER_KEY, **kw}

        direct = {"url": f"{mock_url}/v1/messages", "model": ANTHROPIC_MODEL}
        # Warm-up at full concurrency: first requests pay one-time imports and connection setup.
        for arm in targets:
            run_client(spec(arm, chunks=200, concurrency=20, rounds=2))
        for rep in range(reps):
            d = run_client({**direct, "chunks": 200, "concurrency": 20, "rounds": rounds})
            firsts["direct"] += [s["first"] for s in d["streams"]]
            for arm in targets:
                log(f"rep {rep} {arm}: 20 concurrent streams")
                pids = process_tree(targets[arm][0].pid)
                cpu0 = cpu_seconds(pids)
                r = run_client(spec(arm, chunks=200, concurrency=20, rounds=rounds))
                cpu_per_stream[arm].append((cpu_seconds(pids) - cpu0) * 1e3 / len(r["streams"]))
                firsts[arm] += [s["first"] for s in r["streams"]]
    out: dict[str, Any] = {}
    direct_sorted = sorted(firsts["direct"])
    for arm in ("python", "native", "rust"):
        values = sorted(firsts[arm])
        out[arm] = {
            "streams": len(values),
            "first_event_added_p50_ms": (percentile(values, 50) - percentile(direct_sorted, 50))
            * 1e3,
            "first_event_added_p99_ms": (percentile(values, 99) - percentile(direct_sorted, 99))
            * 1e3,
            "proxy_cpu_ms_per_stream": min(cpu_per_stream[arm]),
        }
    return out


# -- report ----------------------------------------------------------------------------------------


def render(data: dict[str, Any]) -> str:
    lines = [
        "# `/v1/messages`: LiteLLM's Python path, LiteLLM's native route, the fast path",
        "",
        machine_line(data["machine"]),
        "",
        "## In-process, non-streaming: per-call median (ms), arms interleaved",
        "",
        "| provider | request | Python | LiteLLM native | fast path | fast/Python (bar ≤ 0.25) "
        "| fast/native (bar ≤ 1) | CPU ms/call Python / native / fast |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in data["in_process"]:
        arms = row["arms"]
        native = arms.get("native")
        native_ms = f"{native['median_ms']:.3f}" if native else "—"
        fast_native = f"{arms['rust']['median_ms'] / native['median_ms']:.2f}" if native else "—"
        cpu = " / ".join(
            f"{arms[a]['cpu_ms_per_call']:.3f}" if a in arms else "—"
            for a in ("python", "native", "rust")
        )
        lines.append(
            f"| {row['provider']} | {row['request']} | {arms['python']['median_ms']:.3f} | "
            f"{native_ms} | {arms['rust']['median_ms']:.3f} | {row['ratio_rust_python']:.3f} | "
            f"{fast_native} | {cpu} |"
        )
    stream = data["streaming"]
    py = stream["python"]
    lines += [
        "",
        "## Streaming through one proxy worker: first event, added over direct-to-mock",
        "",
        "20 concurrent streams of 200 events, back to back.",
        "",
        "| arm | added p50 (ms) | added p99 (ms) | p99 / Python (bar ≤ 0.5 for the fast path) "
        "| proxy CPU ms per stream |",
        "|---|---:|---:|---:|---:|",
    ]
    for arm, label in (("python", "Python"), ("native", "LiteLLM native"), ("rust", "fast path")):
        a = stream[arm]
        ratio = a["first_event_added_p99_ms"] / py["first_event_added_p99_ms"]
        lines.append(
            f"| {label} | {a['first_event_added_p50_ms']:.1f} | "
            f"{a['first_event_added_p99_ms']:.1f} | {ratio:.2f} | "
            f"{a['proxy_cpu_ms_per_stream']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any]) -> Any:
    def draw(plt: Any) -> Any:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
        rows = [r for r in data["in_process"] if r["provider"] == "anthropic"]
        labels = [r["request"] for r in rows]
        width = 0.27
        for i, (arm, name) in enumerate(
            (("python", "Python"), ("native", "native"), ("rust", "fast"))
        ):
            axes[0].bar(
                [x + (i - 1) * width for x in range(len(rows))],
                [r["arms"][arm]["median_ms"] for r in rows],
                width,
                label=name,
            )
        axes[0].set_xticks(range(len(rows)), labels)
        axes[0].set_title("anthropic, in-process median ms/call")
        axes[0].legend()
        stream = data["streaming"]
        arms = ("python", "native", "rust")
        axes[1].bar(
            ["Python", "native", "fast"], [stream[a]["first_event_added_p99_ms"] for a in arms]
        )
        axes[1].set_title("first event added p99 ms, 20 streams")
        return fig

    return draw


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = arg_parser(__doc__ or "", "a short run: fewer calls and streams")
    args = parser.parse_args(argv)
    from litellm_fastpath.mock_provider import ServerProcess

    info = machine(args.wait_quiet)
    with ServerProcess() as mock:
        in_process = asyncio.run(bench_in_process(mock.url, args))
        streaming = bench_streaming(mock.url, args.quick)
    data = {"machine": info, "in_process": in_process, "streaming": streaming}
    markdown = render(data)
    print(markdown)
    if not args.no_write:
        write_results("messages", markdown, data, plot=plot(data), alt="/v1/messages arms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
