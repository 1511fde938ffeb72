"""Tests of the test harness itself: real sockets, real proxy, no mocks."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.polling import PROMPTLY_S
from devtools.processes import ProxyGoneError, ProxyProcess
from devtools.procfs import proc_state, process_tree
from devtools.upstream import Recorded, RecordingUpstream, Reply

BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
BEDROCK_PATH = "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"


@pytest.fixture
def upstream() -> Iterator[RecordingUpstream]:
    with RecordingUpstream() as up:
        yield up


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    # trust_env=False: an HTTP(S)_PROXY in the environment must not capture loopback traffic.
    with httpx.Client(trust_env=False, timeout=5.0) as c:
        yield c


def _post(
    client: httpx.Client, upstream: RecordingUpstream, path: str, body: Any
) -> httpx.Response:
    return client.post(f"{upstream.url}{path}", json=body, headers={"X-Trace-Id": "abc"})


# -- default responses -------------------------------------------------------------------------


def test_chat_completions_default(upstream: RecordingUpstream, client: httpx.Client) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    resp = _post(client, upstream, "/v1/chat/completions?api-version=1", body)

    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    data = resp.json()
    assert data["id"] == "chatcmpl-upstream"
    assert data["object"] == "chat.completion"
    assert isinstance(data["created"], int)
    assert data["model"] == "gpt-4o-mini"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "Hello from upstream"}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    assert data["system_fingerprint"] == "fp_test"

    (rec,) = upstream.requests
    assert (rec.method, rec.path, rec.query) == ("POST", "/v1/chat/completions", "api-version=1")
    assert rec.params == {"api-version": ["1"]}
    assert rec.headers["x-trace-id"] == "abc"  # keys are lowercased
    assert ("X-Trace-Id", "abc") in rec.raw_headers  # original spelling kept
    assert rec.json() == body
    assert rec.chunked is False
    assert rec.http_version == "HTTP/1.1"


def test_anthropic_messages_default(upstream: RecordingUpstream, client: httpx.Client) -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": []}
    resp = _post(client, upstream, "/v1/messages", body)

    assert resp.status_code == 200
    assert resp.json() == {
        "id": "msg_upstream",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Hello from upstream"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 11,
            "output_tokens": 7,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def test_bedrock_converse_default(upstream: RecordingUpstream, client: httpx.Client) -> None:
    resp = _post(client, upstream, BEDROCK_PATH, {"messages": []})

    assert resp.status_code == 200
    assert resp.json() == {
        "output": {"message": {"role": "assistant", "content": [{"text": "Hello from upstream"}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18},
        "metrics": {"latencyMs": 12},
    }
    assert upstream.requests[0].path == BEDROCK_PATH  # recorded still percent-encoded


def test_unknown_path_is_404_json(upstream: RecordingUpstream, client: httpx.Client) -> None:
    resp = client.get(f"{upstream.url}/v1/unknown")
    assert resp.status_code == 404
    assert resp.json()["error"]["type"] == "not_found"
    assert upstream.requests[0].method == "GET"


# -- scripting ---------------------------------------------------------------------------------


def test_model_listings_are_not_recorded(upstream: RecordingUpstream, client: httpx.Client) -> None:
    """A proxy's background `GET .../models` at startup never counts among a test's calls."""
    assert client.get(f"{upstream.url}/v1/models").status_code == 404
    client.post(f"{upstream.url}/v1/chat/completions", json={"model": "m", "messages": []})
    assert [(r.method, r.path) for r in upstream.requests] == [("POST", "/v1/chat/completions")]


def test_enqueue_is_fifo_then_falls_back(upstream: RecordingUpstream, client: httpx.Client) -> None:
    upstream.enqueue(
        Reply(status=429, json={"error": "slow down"}, headers={"Retry-After": "1"}),
        Reply(body=b"not json", headers={"Content-Type": "text/plain"}),
    )
    upstream.enqueue(Reply(status=500))  # no body given => path default body with this status
    chat = {"model": "m", "messages": []}

    first = _post(client, upstream, "/chat/completions", chat)
    second = _post(client, upstream, "/chat/completions", chat)
    third = _post(client, upstream, "/chat/completions", chat)
    fourth = _post(client, upstream, "/chat/completions", chat)

    assert (first.status_code, first.json(), first.headers["retry-after"]) == (
        429,
        {"error": "slow down"},
        "1",
    )
    assert (second.status_code, second.content, second.headers["content-type"]) == (
        200,
        b"not json",
        "text/plain",
    )
    assert (third.status_code, third.json()["id"]) == (500, "chatcmpl-upstream")
    assert (fourth.status_code, fourth.json()["id"]) == (200, "chatcmpl-upstream")
    assert len(upstream.requests) == 4


def test_set_default_persists_and_queue_wins(
    upstream: RecordingUpstream, client: httpx.Client
) -> None:
    upstream.set_default("/completions", Reply(json={"which": "short"}))
    upstream.set_default("/chat/completions", Reply(json={"which": "long"}))
    upstream.enqueue(Reply(json={"which": "queued"}))
    chat = {"model": "m"}

    seen = [_post(client, upstream, "/v1/chat/completions", chat).json()["which"] for _ in range(3)]
    assert seen == ["queued", "long", "long"]  # longest matching suffix wins
    assert _post(client, upstream, "/v1/completions", chat).json() == {"which": "short"}

    upstream.set_default("/chat/completions", None)
    assert _post(client, upstream, "/chat/completions", chat).json()["which"] == "short"
    upstream.reset()
    assert upstream.requests == []
    assert _post(client, upstream, "/chat/completions", chat).json()["id"] == "chatcmpl-upstream"


def test_delay_and_keep_alive(upstream: RecordingUpstream) -> None:
    upstream.enqueue(Reply(delay_s=0.3))
    conn = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=5)
    try:
        started = time.monotonic()
        conn.request("POST", "/chat/completions", body=b'{"model":"m"}')
        assert conn.getresponse().read()
        assert time.monotonic() - started >= 0.3
        sock = conn.sock
        conn.request("POST", "/chat/completions", body=b'{"model":"m"}')
        assert conn.getresponse().status == 200
        assert conn.sock is sock  # same TCP connection reused: server honours keep-alive
    finally:
        conn.close()


def test_chunked_request_is_decoded_and_flagged(upstream: RecordingUpstream) -> None:
    pieces = [b'{"model": ', b'"chunky", ', b'"messages": []}']
    conn = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=5)
    try:
        # An iterator has no length, so http.client must frame it with chunked encoding.
        conn.request("POST", "/v1/chat/completions", body=iter(pieces), encode_chunked=True)
        resp = conn.getresponse()
        assert json.loads(resp.read())["model"] == "chunky"
        # A follow-up on the same connection proves the chunk framing was fully consumed.
        conn.request("POST", "/v1/chat/completions", body=b'{"model": "sized"}')
        assert json.loads(conn.getresponse().read())["model"] == "sized"
    finally:
        conn.close()

    chunked, sized = upstream.requests
    assert chunked.chunked is True
    assert chunked.headers["transfer-encoding"] == "chunked"
    assert chunked.body == b"".join(pieces)
    assert chunked.json() == {"model": "chunky", "messages": []}
    assert sized.chunked is False
    assert sized.body == b'{"model": "sized"}'


# -- failure injection -------------------------------------------------------------------------


def test_disconnect_without_response(upstream: RecordingUpstream, client: httpx.Client) -> None:
    upstream.enqueue(Reply(action="disconnect"))
    with pytest.raises(httpx.RemoteProtocolError, match="without sending"):
        _post(client, upstream, "/chat/completions", {"model": "m"})
    assert len(upstream.requests) == 1  # the request was still read and recorded


def test_disconnect_mid_body(upstream: RecordingUpstream) -> None:
    upstream.enqueue(Reply(action="disconnect_mid_body"))
    conn = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=5)
    try:
        conn.request("POST", "/chat/completions", body=b'{"model":"m"}')
        resp = conn.getresponse()
        assert resp.status == 200  # status and headers did arrive
        advertised = int(resp.headers["Content-Length"])
        with pytest.raises(http.client.IncompleteRead) as info:
            resp.read()
        assert 0 < len(info.value.partial) < advertised
    finally:
        conn.close()


def test_disconnect_mid_body_httpx(upstream: RecordingUpstream, client: httpx.Client) -> None:
    upstream.enqueue(Reply(action="disconnect_mid_body"))
    with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
        _post(client, upstream, "/chat/completions", {"model": "m"})


def test_stall_times_out_client(upstream: RecordingUpstream, client: httpx.Client) -> None:
    upstream.enqueue(Reply(action="stall"))  # no delay_s: stalls until the server stops
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        client.post(f"{upstream.url}/chat/completions", json={"model": "m"}, timeout=0.3)
    assert time.monotonic() - started < PROMPTLY_S
    assert upstream.wait_for(1, timeout=1)[0].json() == {"model": "m"}


def test_stall_with_delay_then_closes(upstream: RecordingUpstream, client: httpx.Client) -> None:
    upstream.enqueue(Reply(action="stall", delay_s=0.2))
    started = time.monotonic()
    with pytest.raises(httpx.RemoteProtocolError):
        _post(client, upstream, "/chat/completions", {"model": "m"})
    assert time.monotonic() - started >= 0.2


def test_wait_for(upstream: RecordingUpstream, client: httpx.Client) -> None:
    with pytest.raises(TimeoutError):
        upstream.wait_for(1, timeout=0.1)
    worker = threading.Thread(target=_post, args=(client, upstream, "/v1/messages", {"model": "m"}))
    worker.start()
    try:
        assert upstream.wait_for(1, timeout=5)[0].path == "/v1/messages"
    finally:
        worker.join()
    upstream.clear()
    assert upstream.requests == []


def test_stop_is_prompt_with_stalled_and_idle_connections() -> None:
    up = RecordingUpstream().start()
    errors: list[BaseException] = []

    def stalled_call() -> None:
        try:
            with httpx.Client(trust_env=False, timeout=30) as c:
                c.post(f"{up.url}/chat/completions", json={"model": "m"})
        except httpx.HTTPError as exc:
            errors.append(exc)

    idle = http.client.HTTPConnection("127.0.0.1", up.port, timeout=5)
    try:
        idle.request("POST", "/v1/messages", body=b"{}")
        idle.getresponse().read()  # leaves a keep-alive handler blocked reading the next request
        up.enqueue(Reply(action="stall", delay_s=60))
        caller = threading.Thread(target=stalled_call)
        caller.start()
        up.wait_for(2, timeout=5)

        started = time.monotonic()
        up.stop()
        assert time.monotonic() - started < PROMPTLY_S  # not the 60 s stall
        caller.join(timeout=5)
        assert not caller.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], httpx.RemoteProtocolError)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{idle.port}/", trust_env=False, timeout=1)
    finally:
        idle.close()
        up.stop()  # idempotent


# -- the real proxy ----------------------------------------------------------------------------


def _show(label: str, rec: Recorded, resp: httpx.Response) -> None:
    # Printed on purpose: run with -s to see what the stock proxy sends and returns on the wire.
    print(f"\n===== {label} =====")
    print(f"upstream saw: {rec.method} {rec.path}{'?' + rec.query if rec.query else ''}")
    for name, value in rec.raw_headers:
        print(f"  > {name}: {value}")
    print(f"  > body: {rec.body.decode(errors='replace')}")
    print(f"proxy returned: {resp.status_code}")
    for name, value in resp.headers.multi_items():
        print(f"  < {name}: {value}")
    print(f"  < body: {resp.text}")


@pytest.mark.proxy
@pytest.mark.timeout(240)
def test_proxy_routes_three_providers_to_upstream(upstream: RecordingUpstream) -> None:
    model_list = [
        {
            "model_name": "plain-openai",
            "litellm_params": {
                "model": "openai/gpt-4o-mini",
                "api_base": upstream.url,
                "api_key": "sk-upstream",
            },
        },
        {
            "model_name": "plain-claude",
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": upstream.url,
                "api_key": "sk-ant",
            },
        },
        {
            "model_name": "plain-bedrock",
            "litellm_params": {
                "model": f"bedrock/converse/{BEDROCK_MODEL}",
                "aws_bedrock_runtime_endpoint": upstream.url,
                "aws_access_key_id": "AKIDTEST",
                "aws_secret_access_key": "secret",
                "aws_region_name": "us-east-1",
            },
        },
    ]
    expected_paths = {
        "plain-openai": "/chat/completions",
        "plain-claude": "/v1/messages",
        "plain-bedrock": BEDROCK_PATH,
    }
    with ProxyProcess(model_list) as proxy:
        print(f"\nproxy live after {proxy.startup_s:.1f}s, rss {proxy.rss_bytes() / 2**20:.0f} MiB")
        assert proxy.rss_bytes() > 0
        for model, path in expected_paths.items():
            upstream.clear()
            resp = proxy.post(
                "/chat/completions",
                json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
            )
            assert resp.status_code == 200, f"{model}: {resp.text}\n{proxy.log_text()[-3000:]}"
            (rec,) = upstream.requests
            _show(model, rec, resp)
            assert rec.path == path
            assert rec.chunked is False
            assert resp.json()["choices"][0]["message"]["content"] == "Hello from upstream"
        pid = proxy.pid
        log = proxy.log_text()
        print("proxy log lines with WARNING/ERROR:")
        print("\n".join(line for line in log.splitlines() if "WARNING" in line or "ERROR" in line))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped


def plain_openai(upstream: RecordingUpstream) -> dict[str, Any]:
    """One plain OpenAI deployment on the recording upstream."""
    return {
        "model_name": "plain-openai",
        "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": upstream.url, "api_key": "k"},
    }


@pytest.mark.proxy
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_proxy_stop_reaps_every_worker(upstream: RecordingUpstream) -> None:
    model = plain_openai(upstream)
    with ProxyProcess([model], workers=2) as proxy:
        tree = process_tree(proxy.pid)
        print(f"\n2 workers live after {proxy.startup_s:.1f}s; tree {tree}")
        print(f"rss {proxy.rss_bytes() / 2**20:.0f} MiB")
        assert len(tree) >= 3  # the uvicorn supervisor plus two workers
        resp = proxy.post("/chat/completions", json={"model": "plain-openai", "messages": []})
        assert resp.status_code == 200, resp.text
    survivors = [pid for pid in tree if proc_state(pid) not in (None, "Z")]
    assert survivors == [], "stop() left processes running"


@pytest.mark.proxy
@pytest.mark.timeout(240)
def test_a_proxy_that_died_says_so(upstream: RecordingUpstream) -> None:
    """A request to a proxy whose process has exited names its exit and shows its log."""
    model = plain_openai(upstream)
    with ProxyProcess([model]) as proxy:
        pid = proxy.pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while proc_state(pid) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ProxyGoneError, match=f"proxy exited with -{int(signal.SIGKILL)}"):
            proxy.get("/health/liveliness")
