"""`/v1/messages` (`litellm.anthropic_messages`): LiteLLM's Python path, LiteLLM's own native
route (`LITELLM_RUST=1`, Anthropic only) and the fast path (`rust: true`), against the mock:
in-process per-call median and CPU (a small and a coding-agent request, `anthropic/…` and Bedrock
Invoke), and through one proxy worker the first streamed event's added latency at 20 concurrent
streams (method and commands: benches/README.md)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from benches._common import (
    MESSAGES,
    arg_parser,
    finish,
    log,
    machine,
    machine_line,
    table,
)
from benches.inprocess import arm_stats, interleaved_calls
from benches.streaming import added_ms, run_client, spec, twin_proxy
from devtools.deployments import bedrock_invoke_kwargs, deployment_kwargs
from devtools.processes import ServerProcess
from devtools.procfs import cpu_seconds, process_tree

ANTHROPIC_MODEL = "claude-sonnet-4-5"
IN_ARMS = ("python", "native", "rust")


def requests() -> dict[str, dict[str, Any]]:
    """A small request, and a coding agent's: a long system prompt, 10 tools, a tool exchange."""
    properties = {"path": {"type": "string"}, "limit": {"type": "integer"}}
    schema = {"type": "object", "properties": properties, "required": ["path"]}
    tools = [
        {"name": f"tool_{i}", "description": f"Tool {i}", "input_schema": schema} for i in range(10)
    ]
    text = [{"type": "text", "text": "You are a coding agent. " * 200}]
    text += [{"type": "text", "text": "Rules. " * 100, "cache_control": {"type": "ephemeral"}}]
    use = {"type": "tool_use", "id": "toolu_1", "name": "tool_0", "input": {"path": "a"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fn main() {}\n" * 50}
    turns = [{"role": "user", "content": [{"type": "text", "text": "Fix main.rs"}]}]
    turns += [{"role": "assistant", "content": [{"type": "text", "text": "Reading it."}, use]}]
    turns += [{"role": "user", "content": [result]}]
    agent = {"system": text, "messages": turns, "tools": tools, "max_tokens": 1024}
    return {"small": {"messages": MESSAGES, "max_tokens": 64}, "agent": agent}


def deployment(provider: str, url: str) -> dict[str, Any]:
    """Claude on `anthropic/…` or on Bedrock Invoke, at the mock."""
    return (
        deployment_kwargs(provider, url) if provider == "anthropic" else bedrock_invoke_kwargs(url)
    )


# -- in-process ----------------------------------------------------------------------------------


async def bench_in_process(url: str, args: Any) -> list[dict[str, Any]]:
    import litellm

    import litellm_fastpath

    litellm_fastpath.install()

    def arm(name: str, kwargs: dict[str, Any]) -> Callable[[], Awaitable[bool]]:
        async def call() -> bool:
            """One call; whether the arm it was meant for served it."""
            if name == "native":
                os.environ["LITELLM_RUST"] = "1"
            else:
                os.environ.pop("LITELLM_RUST", None)
            litellm_fastpath.reset_decline_counts()
            rust = {"rust": True} if name == "rust" else {}
            native = "_hidden_params" in await litellm.anthropic_messages(**kwargs, **rust)
            if name == "rust":
                return not litellm_fastpath.decline_counts() and not native
            return native == (name == "native")

        return call

    results = []
    for provider in ("anthropic", "bedrock"):
        arms = ("python", "native", "rust") if provider == "anthropic" else ("python", "rust")
        for name, request in requests().items():
            kwargs = {**deployment(provider, url), **request}
            calls = {a: arm(a, kwargs) for a in arms}
            blocks = (200 if args.quick else 1000) // 50
            data = await interleaved_calls(calls, 20, blocks, 50)
            row: dict[str, Any] = {"provider": provider, "request": name}
            row["arms"] = {a: arm_stats(d) for a, d in data.items()}
            py = row["arms"]["python"]["median_ms"]
            for a in arms[1:]:
                row[f"ratio_{a}_python"] = row["arms"][a]["median_ms"] / py
            log(f"in-process {provider}/{name}: " + json.dumps(row["arms"]))
            results.append(row)
    os.environ.pop("LITELLM_RUST", None)
    return results


# -- through the proxy, streaming ------------------------------------------------------------------
# The clients are `benches.streaming`'s (own process; the time to the first `data:` line).


def bench_streaming(mock_url: str, quick: bool) -> dict[str, Any]:
    reps, rounds = (1, 2) if quick else (3, 4)
    firsts: dict[str, list[float]] = {arm: [] for arm in (*IN_ARMS, "direct")}
    cpu_per_stream: dict[str, list[float]] = {arm: [] for arm in IN_ARMS}
    claude = {"claude": deployment("anthropic", mock_url)}
    with twin_proxy(claude) as proxy, twin_proxy(claude, LITELLM_RUST="1") as native:
        targets = {"python": (proxy, "plain-claude"), "rust": (proxy, "rust-claude")}
        targets["native"] = (native, "plain-claude")

        def streams(arm: str, rounds: int = rounds) -> dict[str, Any]:
            kw = {"chunks": 200, "concurrency": 20, "rounds": rounds}
            if arm == "direct":
                return run_client(
                    {"url": f"{mock_url}/v1/messages", "model": ANTHROPIC_MODEL, **kw}
                )
            return run_client(spec(*targets[arm], route="/v1/messages", **kw))

        # Warm-up at full concurrency: first requests pay one-time imports and connection setup.
        for arm in targets:
            streams(arm, rounds=2)
        for rep in range(reps):
            firsts["direct"] += [s["first"] for s in streams("direct")["streams"]]
            for arm in targets:
                log(f"rep {rep} {arm}: 20 concurrent streams")
                pids = process_tree(targets[arm][0].pid)
                cpu0 = cpu_seconds(pids)
                r = streams(arm)
                cpu_per_stream[arm].append((cpu_seconds(pids) - cpu0) * 1e3 / len(r["streams"]))
                firsts[arm] += [s["first"] for s in r["streams"]]
    return {
        arm: {
            "streams": len(firsts[arm]),
            "first_event_added_p50_ms": added_ms(firsts[arm], firsts["direct"], 50),
            "first_event_added_p99_ms": added_ms(firsts[arm], firsts["direct"], 99),
            "proxy_cpu_ms_per_stream": min(cpu_per_stream[arm]),
        }
        for arm in IN_ARMS
    }


# -- report ----------------------------------------------------------------------------------------


def render(data: dict[str, Any]) -> str:
    rows = []
    for row in data["in_process"]:
        ms = {a: f"{v['median_ms']:.3f}" for a, v in row["arms"].items()}
        cpu = [f"{row['arms'][a]['cpu_ms_per_call']:.3f}" if a in ms else "—" for a in IN_ARMS]
        native = row["arms"].get("native")
        fast_native = row["arms"]["rust"]["median_ms"] / native["median_ms"] if native else None
        cells = [ms["python"], ms.get("native", "—"), ms["rust"], f"{row['ratio_rust_python']:.3f}"]
        cells += [f"{fast_native:.2f}" if native else "—", " / ".join(cpu)]
        rows.append([row["provider"], row["request"], *cells])
    head = ["provider", "request", "Python", "LiteLLM native", "fast path"]
    head += ["fast/Python (bar ≤ 0.25)", "fast/native (bar ≤ 1)"]
    stream, stream_rows = data["streaming"], []
    for arm, label in zip(IN_ARMS, ("Python", "LiteLLM native", "fast path"), strict=True):
        a, py = stream[arm], stream["python"]["first_event_added_p99_ms"]
        p50, p99 = a["first_event_added_p50_ms"], a["first_event_added_p99_ms"]
        cpu = a["proxy_cpu_ms_per_stream"]
        stream_rows.append([label, f"{p50:.1f}", f"{p99:.1f}", f"{p99 / py:.2f}", f"{cpu:.1f}"])
    stream_head = ["arm", "added p50 (ms)", "added p99 (ms)"]
    stream_head += ["p99 / Python (bar ≤ 0.5 for the fast path)", "proxy CPU ms per stream"]
    lines = [
        "# `/v1/messages`: LiteLLM's Python path, LiteLLM's native route, the fast path",
        "",
        machine_line(data["machine"]),
        "",
        "## In-process, non-streaming: per-call median (ms), arms interleaved",
        "",
        *table([*head, "CPU ms/call Python / native / fast"], rows, "llrrrrrl"),
        "",
        "## Streaming through one proxy worker: first event, added over direct-to-mock",
        "",
        "20 concurrent streams of 200 events, back to back.",
        "",
        *table(stream_head, stream_rows),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = arg_parser(__doc__ or "", "a short run: fewer calls and streams").parse_args(argv)
    info = machine(args.wait_quiet)
    with ServerProcess() as mock:
        in_process = asyncio.run(bench_in_process(mock.url, args))
        streaming = bench_streaming(mock.url, args.quick)
    data = {"machine": info, "in_process": in_process, "streaming": streaming}
    finish(args, "messages", render(data), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
