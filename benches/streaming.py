"""Streamed chat through one proxy worker: the plain model, `rust: true` and the same model with
the fast lane on, arms interleaved, clients in their own process (method and commands:
benches/README.md)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from benches._common import (
    arg_parser,
    finish,
    log,
    machine,
    machine_line,
    percentile,
    start_proxy,
    table,
)
from devtools.deployments import deployment_kwargs, twin_models
from devtools.processes import MASTER_KEY, ServerProcess
from devtools.procfs import cpu_seconds, proc_status, process_tree

ARMS = ("plain", "rust", "lane")


# -- the client process ----------------------------------------------------------------------


async def _one_stream(client: Any, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    start = time.perf_counter()
    first = first_content = last = None
    chunks = 0
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter() - start
            if first is None:
                first = now
            if first_content is None and '"content"' in line and '"content":""' not in line:
                first_content = now
            last = now
            chunks += 1
    return {"ttft": first_content, "first": first, "last": last, "chunks": chunks}


async def _client(spec: dict[str, Any]) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        body = {"model": spec["model"], "messages": [{"role": "user", "content": "hi"}]}
        body |= {"stream": True, "max_tokens": spec["chunks"]}
        headers = {"Authorization": f"Bearer {spec['key']}"} if spec.get("key") else {}
        url = spec["url"]
        results: list[Any] = []
        deadline = time.perf_counter() + spec.get("seconds", 0)
        started = time.perf_counter()

        async def worker() -> None:
            for _ in range(spec["rounds"]):
                results.append(await _one_stream(client, url, body, headers))
                if spec.get("seconds") and time.perf_counter() > deadline:
                    return

        await asyncio.gather(*(worker() for _ in range(spec["concurrency"])))
        return {"streams": results, "wall": time.perf_counter() - started}


def run_client(spec: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benches.streaming", "--client", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


# -- the driver --------------------------------------------------------------------------------


def twin_proxy(models: dict[str, dict[str, Any]], lane: bool = False, **env: str) -> Any:
    """A started proxy with `plain-<name>` and `rust-<name>` models of each deployment (router
    retries off), with the fast lane when `lane`."""
    twins = [m for name, params in models.items() for m in twin_models(name, params)]
    return start_proxy(twins, lane=lane, env=env, router_settings={"num_retries": 0})


def spec(server: Any, model: str, route: str = "/chat/completions", **kw: Any) -> dict[str, Any]:
    """What a client process streams: `model` through `server`, a proxy (with its master key)."""
    return {"url": f"{server.url}{route}", "model": model, "key": MASTER_KEY, **kw}


def _model(arm: str, kind: str) -> str:
    """The model an arm streams from (the lane arm: the `rust` model, on the lane proxy)."""
    return f"{'rust' if arm == 'lane' else arm}-{kind}"


PACE_S = 0.020
# The mock writes upstream event k at k x PACE_S after the request. For 50 text pieces the
# client's last chunk (the finish reason) comes from event 51 (OpenAI: role, 50 pieces), 54
# (Anthropic: message_start, block start, ping, 50 deltas, block stop) or 52 (Bedrock:
# messageStart, 50 deltas, block stop); the direct baseline is OpenAI's.
PACED_SPAN_S = {"openai": 51 * PACE_S, "anthropic": 54 * PACE_S, "bedrock": 52 * PACE_S}


def added_ms(arm: list[float], direct: list[float], q: float) -> float:
    """The arm's percentile `q` of times (s) over the direct fetch's, in ms."""
    return (percentile(sorted(arm), q) - percentile(sorted(direct), q)) * 1000


def measure(quick: bool, provider: str) -> dict[str, Any]:
    seconds, reps, rounds = (4, 1, 20) if quick else (12, 3, 60)
    data: dict[str, Any] = {"provider": provider}
    with ServerProcess() as mock, ServerProcess(args=("--chunk-delay-ms", "20")) as paced:
        models = {
            kind: deployment_kwargs(provider, url)
            for kind, url in (("fast", mock.url), ("paced", paced.url))
        }
        with twin_proxy(models) as proxy, twin_proxy(models, lane=True) as lane_proxy:
            proxies = {"plain": proxy, "rust": proxy, "lane": lane_proxy}
            pids = {arm: process_tree(server.pid) for arm, server in proxies.items()}

            def streams(arm: str, kind: str, **kw: Any) -> list[dict[str, Any]]:
                if arm == "direct":
                    url = paced.url if kind == "paced" else mock.url
                    target = {"url": f"{url}/v1/chat/completions", "model": "gpt-4o-mini"}
                    return run_client({**target, **kw})["streams"]
                return run_client(spec(proxies[arm], _model(arm, kind), **kw))["streams"]

            for arm in ARMS:  # warm-up (the lane learns the key from the proxy's first request)
                streams(arm, "fast", chunks=100, concurrency=4, rounds=5)
            time.sleep(1)
            throughput: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
            ttft1, ttft20, lag = ({arm: [] for arm in (*ARMS, "direct")} for _ in range(3))
            for rep in range(reps):
                for arm in ARMS:
                    log(f"rep {rep} {arm}: throughput")
                    cpu0 = cpu_seconds(pids[arm])
                    kw = {"chunks": 1000, "concurrency": 8, "rounds": 10**6, "seconds": seconds}
                    result = run_client(spec(proxies[arm], _model(arm, "fast"), **kw))
                    chunks = sum(s["chunks"] for s in result["streams"])
                    cpu_ms = (cpu_seconds(pids[arm]) - cpu0) * 1e3
                    rate = {
                        "chunks_per_s": chunks / result["wall"],
                        "cpu_ms_per_chunk": cpu_ms / chunks,
                    }
                    throughput[arm].append(rate)
                for arm in ("direct", *ARMS):
                    log(f"rep {rep} {arm}: first chunk and pacing")
                    few = streams(arm, "fast", chunks=8, concurrency=1, rounds=rounds)
                    ttft1[arm] += [s["ttft"] for s in few]
                    many = streams(arm, "fast", chunks=200, concurrency=20, rounds=2)
                    ttft20[arm] += [s["ttft"] for s in many]
                    span = PACED_SPAN_S["openai" if arm == "direct" else provider]
                    paced_streams = streams(arm, "paced", chunks=50, concurrency=20, rounds=1)
                    lag[arm] += [s["last"] - span for s in paced_streams]
            for arm in ARMS:
                data[arm] = {
                    "chunks_per_s": max(s["chunks_per_s"] for s in throughput[arm]),
                    "cpu_ms_per_chunk": min(s["cpu_ms_per_chunk"] for s in throughput[arm]),
                    "ttft1_added_p50_ms": added_ms(ttft1[arm], ttft1["direct"], 50),
                    "ttft1_added_p99_ms": added_ms(ttft1[arm], ttft1["direct"], 99),
                    "ttft20_added_p99_ms": added_ms(ttft20[arm], ttft20["direct"], 99),
                    "paced20_last_chunk_added_p99_ms": added_ms(lag[arm], lag["direct"], 99),
                }
            data["raw"] = {"throughput": throughput}
            # The lane arm's streams the proxy served itself (its first, which teaches the lane
            # the key, and any the lane left to it): uvicorn's access log counts them.
            via_proxy = lane_proxy.log_text().count('"POST /chat/completions')
            data["lane"]["streams_via_proxy"] = via_proxy
    for arm in ARMS:
        log(f"{arm}: RSS over a fresh proxy's first 10,000-chunk stream")
        with (
            ServerProcess() as mock,
            twin_proxy(
                {"fast": deployment_kwargs(provider, mock.url)}, lane=arm == "lane"
            ) as fresh,
        ):
            fresh_pids = process_tree(fresh.pid)
            run_client(spec(fresh, _model(arm, "fast"), chunks=8, concurrency=1, rounds=1))
            time.sleep(1)
            before = proc_status(fresh_pids)["VmRSS"]
            run_client(spec(fresh, _model(arm, "fast"), chunks=10_000, concurrency=1, rounds=1))
            time.sleep(0.5)
            data[arm]["rss_growth_mib"] = (proc_status(fresh_pids)["VmRSS"] - before) / 2**20
    return data


ROWS = (
    ("chunks/s one worker sustains", "chunks_per_s", "≥ 4x", 0),
    ("proxy CPU per chunk (ms)", "cpu_ms_per_chunk", "≤ 0.25x", 3),
    ("first chunk, added p50, 1 stream (ms)", "ttft1_added_p50_ms", "≤ 0.6x", 2),
    ("first chunk, added p99, 1 stream (ms)", "ttft1_added_p99_ms", "≤ 0.6x", 2),
    ("first chunk, added p99, 20 streams of 200 chunks (ms)", "ttft20_added_p99_ms", "≤ 0.1x", 1),
    (
        "last chunk late, added p99, 20 paced streams (ms)",
        "paced20_last_chunk_added_p99_ms",
        "≤ 0.1x",
        1,
    ),
    ("RSS growth, first 10k-chunk stream (MiB)", "rss_growth_mib", "≤ 0.25x", 1),
)


def render(data: dict[str, Any]) -> str:
    rows = []
    for label, key, bar, digits in ROWS:
        py, rs, ln = data["plain"][key], data["rust"][key], data["lane"][key]
        ratios = [f"{x / py:.2f}" if py else "nan" for x in (rs, ln)]
        values = [f"{x:.{digits}f}" for x in (py, rs, ln)]
        rows.append([label, *values[:2], ratios[0], values[2], ratios[1], bar])
    head = ["metric", "Python", "Rust", "Rust/Python", "Rust, lane on", "lane/Python", "bar"]
    title = f"# Streaming through one proxy worker ({data['provider']}, mock provider)"
    return "\n".join(
        [title, "", machine_line(data["machine"]), "", *table(head, rows, "lrrrrrl"), ""]
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--client"]:
        print(json.dumps(asyncio.run(_client(json.loads(argv[1])))))
        return 0
    parser = arg_parser(__doc__ or "", "a short run: fewer and shorter steps")
    parser.add_argument("--provider", choices=("openai", "anthropic", "bedrock"), default="openai")
    args = parser.parse_args(argv)
    info = machine(args.wait_quiet)
    data = {**measure(args.quick, args.provider), "machine": info}
    name = "streaming" if args.provider == "openai" else f"streaming-{args.provider}"
    finish(args, name, render(data), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
