"""Usage-based routing (`usage-based-routing-v2`) with the lane on: the lane picks as LiteLLM's
router picks (the deployment with the fewest tokens this minute, leaving out those at their
limits) and counts its requests and tokens on the router's counters, which LiteLLM's own picks
then read. A proxy with the lane against one without it, the same requests one after another:
each pick must be one the router's rule allows, on both arms, and both must leave the same
counters; near a deployment's limit the router decides, refusing alike (`lane_routing_limit`)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.answers import canned_response
from devtools.deployments import deployment_kwargs
from devtools.polling import wait_until
from devtools.processes import REPO_ROOT, ProxyProcess
from devtools.upstream import RecordingUpstream, Reply

PROBE = "tests.state_probe.probe"
STATE_PATH = "/state-probe/state"
ROUTING = {"num_retries": 0, "routing_strategy": "usage-based-routing-v2"}
# A group of two deployments whose answers count different tokens: the router keeps their
# tokens this minute level, so which one it picks next follows from the answers before.
PICKED = "routed"
TOKENS = {"routed-a": 10, "routed-b": 27}
# Two deployments allowed 3 requests a minute each (the router leaves one out once a request
# would reach its limit: 2 each), and a deployment with a tpm limit.
CAPPED = "routed-capped"
CAPPED_RPM = 3
TPM_CAPPED = "routed-tpm"
WARM = "routed-warm"
# The strategy's counters: `<id>:<model>:tpm|rpm:<HH-MM>`.
COUNTER = re.compile(r"^(?P<id>[^:]+):.*:(?P<kind>tpm|rpm):\d{2}-\d{2}$")


def answer(total_tokens: int) -> Reply:
    _, body = canned_response("POST", "/chat/completions", b'{"model": "gpt-4o-mini"}')
    body["usage"] = {
        "prompt_tokens": total_tokens - 5,
        "completion_tokens": 5,
        "total_tokens": total_tokens,
    }
    return Reply(json=body)


def models(upstream: RecordingUpstream) -> list[dict[str, Any]]:
    def deployment(group: str, deployment_id: str, **limits: int) -> dict[str, Any]:
        params = deployment_kwargs("openai", f"{upstream.url}/{deployment_id}")
        return {
            "model_name": group,
            "litellm_params": {**params, **limits, "rust": True},
            "model_info": {"id": deployment_id},
        }

    return [
        deployment(WARM, "routed-warm"),
        *(deployment(PICKED, deployment_id) for deployment_id in TOKENS),
        deployment(CAPPED, "capped-a", rpm=CAPPED_RPM),
        deployment(CAPPED, "capped-b", rpm=CAPPED_RPM),
        deployment(TPM_CAPPED, "tpm-capped", tpm=1_000_000),
    ]


@pytest.fixture(scope="module")
def arms(upstream_server: RecordingUpstream) -> Iterator[dict[str, ProxyProcess]]:
    """A proxy with the lane and one without it, routing by usage, with the same models."""
    for deployment_id, total in TOKENS.items():
        upstream_server.set_default(f"/{deployment_id}/chat/completions", answer(total))
    found: dict[str, ProxyProcess] = {}
    try:
        for name in ("lane", "plain"):
            settings: dict[str, Any] = {"callbacks": ["litellm_fastpath.proxy.accelerator", PROBE]}
            if name == "lane":
                settings["fastpath_lane"] = True
            found[name] = ProxyProcess(
                models(upstream_server),
                settings,
                router_settings=ROUTING,
                extra_env={"PYTHONPATH": str(REPO_ROOT)},
            ).start()
        for proxy in found.values():
            wait_until(lambda p=proxy: p.get(STATE_PATH).status_code == 200, "no probe")
            # The lane knows the master key once LiteLLM judged it (this answer's replay).
            warm = proxy.post("/chat/completions", json=chat(WARM, "warm"))
            assert warm.status_code == 200, warm.text

        def served_warm() -> bool:
            found["lane"].post("/chat/completions", json=chat(WARM, "warm"))
            return bool(lane_counts(found["lane"]).get("served"))

        wait_until(served_warm, "the lane never served the warm-up group")
        yield found
    finally:
        for deployment_id in TOKENS:
            upstream_server.set_default(f"/{deployment_id}/chat/completions", None)
        for proxy in found.values():
            proxy.stop()
            proxy._cleanup_tmp()


def chat(group: str, text: str) -> dict[str, Any]:
    return {"model": group, "messages": [{"role": "user", "content": text}]}


def counters(proxy: ProxyProcess, prefix: str) -> dict[str, dict[str, int]]:
    """The strategy's counters this minute of the deployments whose id starts with `prefix`:
    {id: {"tpm": n, "rpm": n}}, once the lane's batches are counted."""

    def settled() -> dict[str, Any] | None:
        state = proxy.get(STATE_PATH).json()
        return state if not state["lane_backlog"] else None

    state = wait_until(settled, "the lane's backlog never drained")
    found: dict[str, dict[str, int]] = {}
    for key, value in state["router"]["cache"].items():
        matched = COUNTER.match(key)
        if matched and matched["id"].startswith(prefix):
            found.setdefault(matched["id"], {})[matched["kind"]] = value
    return found


def lane_counts(proxy: ProxyProcess) -> dict[str, int]:
    return proxy.get(STATE_PATH).json()["lane"] or {}


def wait_for_a_fresh_minute(needed_s: float) -> None:
    """The strategy's counters start over each minute: a test that fills them starts early in
    one."""
    if time.time() % 60 > 60 - needed_s:
        time.sleep(60 - time.time() % 60 + 0.5)


def test_each_pick_is_the_deployment_with_the_fewest_tokens(
    arms: dict[str, ProxyProcess],
) -> None:
    """One request after another: each arm picks a deployment with the fewest tokens this
    minute (either on a tie), its tokens counted before the next pick; both arms end with the
    same counters (ties only ever come first: 10 and 27 tokens meet again at 270)."""
    wait_for_a_fresh_minute(20)
    for name, proxy in arms.items():
        tokens = dict.fromkeys(TOKENS, 0)
        for index in range(12):
            answered = proxy.post("/chat/completions", json=chat(PICKED, f"pick {index}"))
            assert answered.status_code == 200, answered.text
            assert answered.headers.get("x-litellm-rust") == "true"
            picked = answered.headers["x-litellm-model-id"]
            fewest = min(tokens.values())
            assert tokens[picked] == fewest, (name, index, picked, tokens)
            tokens[picked] += TOKENS[picked]
            if name == "plain":
                # LiteLLM counts an answer's tokens in its logging, after the answer: its next
                # pick reads them once that ran (the lane's own count has them at once).
                wait_until(
                    lambda p=proxy, i=picked, n=tokens[picked]: (
                        counters(p, i).get(i, {}).get("tpm") == n
                    ),
                    "LiteLLM never counted the answer's tokens",
                )
        found = {i: counters(proxy, i).get(i) for i in TOKENS}
        expected = {i: {"tpm": n, "rpm": n // TOKENS[i]} for i, n in tokens.items()}
        assert found == expected, name
    for deployment_id in TOKENS:
        lane, plain = (counters(arms[name], deployment_id) for name in ("lane", "plain"))
        assert lane == plain
    assert lane_counts(arms["lane"]).get("served", 0) >= 12


def test_near_a_deployments_rpm_limit_the_router_decides(arms: dict[str, ProxyProcess]) -> None:
    """Two deployments allowed 3 requests a minute: the router takes 2 on each (it leaves a
    deployment out once one more request would reach its limit), then refuses with its 429.
    The lane picks while no deployment is near its limit and leaves the rest to the router,
    which has counted the lane's picks by then: the same answers on both arms."""
    wait_for_a_fresh_minute(15)
    answers: dict[str, list[tuple[int, str]]] = {}
    for name, proxy in arms.items():
        answers[name] = []
        for index in range(6):
            answered = proxy.post("/chat/completions", json=chat(CAPPED, f"capped {index}"))
            error = answered.json().get("error", {}) if answered.status_code != 200 else {}
            answers[name].append((answered.status_code, str(error.get("type"))))
    assert answers["lane"] == answers["plain"]
    assert [status for status, _ in answers["plain"]] == [200] * 4 + [429] * 2
    lane, plain = (counters(arms[name], "capped-") for name in ("lane", "plain"))
    assert lane == plain
    counts = lane_counts(arms["lane"])
    assert counts.get("lane_routing_limit", 0) >= 2, counts


def test_a_prompt_the_lane_cannot_bound_goes_to_the_router(arms: dict[str, ProxyProcess]) -> None:
    """A deployment with a tpm limit: the router leaves it out when the prompt's tokens (its
    token counter's) would pass the limit. The lane bounds a text prompt by its size and picks;
    a body naming an image, a file or a document (counted by LiteLLM by their content, not
    their bytes) it leaves to the router: the same answer either way."""
    before = lane_counts(arms["lane"])
    for text in ("a text prompt", "what is in this image?"):
        body = chat(TPM_CAPPED, text)
        answered = {
            name: proxy.post("/chat/completions", json=body) for name, proxy in arms.items()
        }
        for reply in answered.values():
            assert reply.status_code == 200, reply.text
            assert reply.headers.get("x-litellm-rust") == "true"
        lane, plain = (answered[name].json() for name in ("lane", "plain"))
        for found in (lane, plain):
            found.pop("id"), found.pop("created")
        assert lane == plain
    after = lane_counts(arms["lane"])
    assert after.get("lane_routing_limit", 0) == before.get("lane_routing_limit", 0) + 1, after
    assert after.get("served", 0) == before.get("served", 0) + 1, after
    assert counters(arms["lane"], "tpm-capped") == counters(arms["plain"], "tpm-capped")
