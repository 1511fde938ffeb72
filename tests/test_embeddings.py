"""Embeddings in Rust, differential against LiteLLM's Python path in the SDK.

Every case goes once through `rust=True` and once through LiteLLM's own path against the same
recording upstream: the upstream must receive the same requests (JSON) and the caller the same
`EmbeddingResponse`, every float compared by its bits. Shapes the fast path does not serve must
be declined before any I/O, so both arms then answer alike; upstream faults must surface as the
same LiteLLM exceptions, after exactly one upstream request per input on the Rust path.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
from typing import Any

import litellm
import pytest

import litellm_fastpath
from devtools.deployments import EMBEDDING_MODELS, embedding_deployment_kwargs, served_by_rust
from devtools.polling import wait_until_async
from devtools.upstream import RecordingUpstream, Reply

KINDS = tuple(EMBEDDING_MODELS)


@pytest.fixture(autouse=True)
def quiet_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    # LiteLLM prints a "Give Feedback" banner for every mapped exception; it changes nothing else.
    monkeypatch.setattr(litellm, "suppress_debug_info", True)


def float_bits(value: Any) -> Any:
    """`value` with every float replaced by its IEEE-754 bits: equality is bit-for-bit."""
    if isinstance(value, float):
        return struct.pack("<d", value).hex()
    if isinstance(value, list):
        return [float_bits(item) for item in value]
    if isinstance(value, dict):
        return {key: float_bits(item) for key, item in value.items()}
    return value


def client_view(response: Any) -> dict[str, Any]:
    return {
        "dump": float_bits(response.model_dump()),
        "item_types": [type(item).__name__ for item in response.data],
    }


async def both_arms(
    upstream: RecordingUpstream, kind: str, **call: Any
) -> tuple[tuple[Any, list[Any]], tuple[Any, list[Any]]]:
    """(rust outcome, its upstream requests), (python outcome, its upstream requests)."""
    outcomes = []
    for rust in (True, False):
        upstream.clear()
        kwargs = {**embedding_deployment_kwargs(kind, upstream.url), **call}
        try:
            outcome: Any = await litellm.aembedding(**kwargs, rust=rust)
        except Exception as exc:
            outcome = exc
        outcomes.append((outcome, [(r.path, r.json()) for r in upstream.requests]))
    return outcomes[0], outcomes[1]


_TIME_TAKEN = re.compile(r"time taken=\d+(?:\.\d+)? seconds")


def describe(outcome: Any) -> Any:
    if isinstance(outcome, Exception):
        # LiteLLM reports a timeout's measured duration; only that varies.
        message = _TIME_TAKEN.sub("time taken=<t> seconds", str(outcome))
        return (type(outcome).__name__, getattr(outcome, "status_code", None), message)
    return client_view(outcome)


# Served in Rust: (kind, call kwargs). Non-ASCII, empty strings and token ids included.
SERVED: list[tuple[str, dict[str, Any]]] = [
    ("openai", {"input": "hello"}),
    ("openai", {"input": ["a", "b", "", "é世🙂", 'quote " and \\ and \u2028']}),
    ("openai", {"input": [1, 2, 3]}),
    ("openai", {"input": [[1, 2], [3]]}),
    ("openai", {"input": ["x"], "dimensions": 4, "encoding_format": "float", "user": "u1"}),
    ("openai", {"input": ["x", "y"], "encoding_format": "base64"}),
    ("openai-compatible", {"input": ["hello"], "user": "u2"}),
    ("openai-compatible", {"input": "hello", "encoding_format": "float"}),
    ("titan-v1", {"input": "hello"}),
    ("titan-v1", {"input": ["hello", "", "日本語のテキスト"]}),
    ("titan-v2", {"input": ["a", "bb"], "dimensions": 4, "normalize": True}),
    ("titan-v2", {"input": "a", "normalize": False, "encoding_format": "float"}),
    ("titan-v2", {"input": "a", "encoding_format": "base64"}),
    ("cohere", {"input": ["hello world", "é"]}),
    ("cohere", {"input": "hello", "input_type": "search_query", "truncate": "END"}),
    ("cohere", {"input": ["a", "b"], "encoding_format": "float", "dimensions": 8}),
    ("cohere-v4", {"input": ["a"], "encoding_format": "base64"}),
]


@pytest.mark.parametrize(("kind", "call"), SERVED)
async def test_served_in_rust_like_python(
    upstream: RecordingUpstream, kind: str, call: dict[str, Any]
) -> None:
    (rust, rust_sent), (python, python_sent) = await both_arms(upstream, kind, **call)
    assert litellm_fastpath.decline_counts() == {}
    assert not isinstance(rust, Exception), describe(rust)
    assert served_by_rust(rust) and not served_by_rust(python)
    assert rust_sent == python_sent
    assert describe(rust) == describe(python)


@pytest.mark.parametrize("kind", ["openai", "cohere"])
async def test_batch_of_2048_inputs(upstream: RecordingUpstream, kind: str) -> None:
    inputs = [f"input {i} · {'x' * (i % 7)}" for i in range(2048)]
    (rust, rust_sent), (python, python_sent) = await both_arms(upstream, kind, input=inputs)
    assert served_by_rust(rust)
    assert len(rust.data) == 2048
    assert rust_sent == python_sent
    assert describe(rust) == describe(python)


async def test_titan_sends_one_request_per_input_in_order(upstream: RecordingUpstream) -> None:
    inputs = [f"text {i}" for i in range(64)]
    (rust, rust_sent), (python, python_sent) = await both_arms(upstream, "titan-v1", input=inputs)
    assert served_by_rust(rust)
    assert [body["inputText"] for _path, body in rust_sent] == inputs
    assert rust_sent == python_sent
    assert describe(rust) == describe(python)


# Decimal texts whose correctly rounded float64 a sloppy parser misses, and values at the edges.
HARD_FLOATS = [
    "0.1",
    "-0.0",
    "5e-324",
    "2.4703282292062328e-324",  # rounds up to the smallest subnormal
    "1.7976931348623157e308",
    "2.2250738585072011e-308",
    "9007199254740993",  # 2**53 + 1: ties to even
    "0.30000000000000004441",
    "1.00000000000000011102230246251565404236316680908203125",  # exactly halfway
    "7.3177701707893310e+15",
    "123456789012345678901234567890e-20",
    "-0.000000000000000000000000000000000000001234567890123456789",
    "3",
    "-17",
]


@pytest.mark.parametrize("kind", ["openai", "titan-v2", "cohere"])
async def test_floats_are_parsed_bit_for_bit(upstream: RecordingUpstream, kind: str) -> None:
    vector = "[" + ",".join(HARD_FLOATS) + "]"
    if kind == "openai":
        raw = '{"object":"list","data":[{"object":"embedding","index":0,"embedding":%s}],'
        raw += '"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}'
    elif kind == "titan-v2":
        raw = '{"embedding":%s,"embeddingsByType":{"float":%s},"inputTextTokenCount":2}'
        raw = raw.replace("%s", vector, 1)
    else:
        raw = '{"id":"x","embeddings":[%s],"response_type":"embeddings_floats","texts":["a"]}'
    body = (raw % vector).encode()
    outcomes = []
    for rust in (True, False):
        upstream.enqueue(Reply(body=body))
        kwargs = {**embedding_deployment_kwargs(kind, upstream.url), "input": ["a"]}
        outcomes.append(await litellm.aembedding(**kwargs, rust=rust))
    rust_response, python_response = outcomes
    assert served_by_rust(rust_response)
    assert float_bits(rust_response.data[0]["embedding"]) == float_bits(
        python_response.data[0]["embedding"]
    )
    assert describe(rust_response) == describe(python_response)


def test_sync_embedding_matches_python(upstream: RecordingUpstream) -> None:
    kwargs = {**embedding_deployment_kwargs("openai", upstream.url), "input": ["a", "b"]}
    rust = litellm.embedding(**kwargs, rust=True)
    python = litellm.embedding(**kwargs)
    assert served_by_rust(rust) and not served_by_rust(python)
    assert describe(rust) == describe(python)


# -- declined: LiteLLM's path serves (or refuses) these exactly as without `rust` --------------

DECLINED: list[tuple[str, dict[str, Any], str]] = [
    ("openai", {"input": []}, "embedding_input"),
    ("openai", {"input": [1.5]}, "embedding_input"),
    ("openai", {"input": {"a": 1}}, "embedding_input"),
    ("openai", {"input": [[]]}, "embedding_input"),
    ("openai", {"input": [[1], []]}, "embedding_input"),
    ("openai", {"input": ["a", 1]}, "embedding_input"),
    ("openai", {"input": [True]}, "embedding_input"),
    ("openai", {"input": [-1]}, "embedding_input"),
    ("openai", {"input": ("a", "b")}, "embedding_input"),
    ("openai", {"input": None}, "embedding_input"),
    ("openai", {"input": "a", "encoding_format": "int8"}, "param_type"),
    ("openai", {"input": "a", "dimensions": "4"}, "param_type"),
    ("openai", {"input": "a", "dimensions": 0}, "param_type"),
    ("openai", {"input": "a", "input_type": "query"}, "unsupported_param"),
    ("openai", {"input": "a", "extra_body": {"foo": 1}}, "extra_body"),
    ("openai-compatible", {"input": "a", "dimensions": 4}, "model_specific"),
    ("titan-v1", {"input": "a", "dimensions": 4}, "unsupported_param"),
    ("titan-v1", {"input": [1, 2]}, "embedding_input"),
    ("titan-v2", {"input": "a", "user": "u"}, "unsupported_param"),
    ("titan-v2", {"input": "a", "normalize": "yes"}, "param_type"),
    ("titan-v2", {"input": "a", "foo": "bar"}, "unsupported_param"),
    ("cohere", {"input": ["data:image/png;base64,AAAA"]}, "embedding_input"),
    ("cohere", {"input": "a", "normalize": True}, "unsupported_param"),
    ("cohere", {"input": "a", "input_type": 3}, "param_type"),
]


@pytest.mark.parametrize(("kind", "call", "code"), DECLINED)
async def test_declined_shapes_answer_like_python(
    upstream: RecordingUpstream, kind: str, call: dict[str, Any], code: str
) -> None:
    if code == "extra_body":
        code = "unsupported_param"
    (rust, rust_sent), (python, python_sent) = await both_arms(upstream, kind, **call)
    assert litellm_fastpath.decline_counts() == {code: 1}
    assert not served_by_rust(rust)
    assert rust_sent == python_sent
    assert describe(rust) == describe(python)


@pytest.mark.parametrize(
    "model",
    [
        "bedrock/amazon.titan-embed-g1-text-02",
        "bedrock/amazon.titan-embed-image-v1",
        "bedrock/us.amazon.titan-embed-text-v2:0",
        "bedrock/invoke/cohere.embed-english-v3",
        "bedrock/amazon.nova-2-multimodal-embeddings-v1:0",
    ],
)
async def test_other_bedrock_embedding_models_are_declined(
    upstream: RecordingUpstream, model: str
) -> None:
    kwargs = {**embedding_deployment_kwargs("titan-v1", upstream.url), "model": model}
    outcomes = []
    for rust in (True, False):
        upstream.clear()
        try:
            outcome: Any = await litellm.aembedding(**kwargs, input=["a"], rust=rust)
        except Exception as exc:
            outcome = exc
        outcomes.append((describe(outcome), [(r.path, r.json()) for r in upstream.requests]))
    assert litellm_fastpath.decline_counts() == {"model_specific": 1}
    assert outcomes[0] == outcomes[1]


def test_default_encoding_format_from_the_environment_is_left_to_litellm(
    upstream: RecordingUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITELLM_DEFAULT_EMBEDDING_ENCODING_FORMAT", "float")
    kwargs = {**embedding_deployment_kwargs("openai", upstream.url), "input": "a"}
    response = litellm.embedding(**kwargs, rust=True)
    assert not served_by_rust(response)
    assert litellm_fastpath.decline_counts() == {"litellm_option": 1}


# -- upstream faults ---------------------------------------------------------------------------

ERROR_BODIES = {
    "openai": {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}},
    "bedrock": {"message": "boom"},
}


def _error_path(kind: str) -> str:
    return "/embeddings" if kind.startswith("openai") else "/invoke"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 429, 500, 503])
@pytest.mark.parametrize("kind", ["openai", "titan-v2", "cohere"])
async def test_status_errors_match_python(
    upstream: RecordingUpstream, kind: str, status: int
) -> None:
    body = ERROR_BODIES["openai" if kind.startswith("openai") else "bedrock"]
    # A default reply, not a queue: LiteLLM's OpenAI path retries some statuses itself.
    upstream.set_default(_error_path(kind), Reply(status=status, json=body))
    (rust, rust_sent), (python, _python_sent) = await both_arms(upstream, kind, input=["a", "b"])
    assert litellm_fastpath.decline_counts() == {}
    assert isinstance(rust, Exception) and isinstance(python, Exception)
    # One upstream request: Titan stops at its first failing input, nothing is retried.
    assert len(rust_sent) == 1
    assert describe(rust) == describe(python)


@pytest.mark.parametrize("body", [b"plain failure", b""])
@pytest.mark.parametrize("kind", ["openai", "titan-v1", "cohere"])
async def test_non_json_error_bodies_match_python(
    upstream: RecordingUpstream, kind: str, body: bytes
) -> None:
    upstream.set_default(_error_path(kind), Reply(status=400, body=body))
    (rust, rust_sent), (python, _) = await both_arms(upstream, kind, input=["a"])
    assert len(rust_sent) == 1
    assert describe(rust) == describe(python)


@pytest.mark.parametrize("kind", ["openai", "titan-v1", "cohere"])
async def test_unparsable_answer_is_the_same_exception(
    upstream: RecordingUpstream, kind: str
) -> None:
    upstream.set_default(_error_path(kind), Reply(body=b"{not json"))
    (rust, rust_sent), (python, _) = await both_arms(upstream, kind, input=["a"])
    assert isinstance(rust, Exception) and isinstance(python, Exception)
    assert len(rust_sent) == 1
    assert (type(rust), rust.status_code) == (type(python), python.status_code)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["titan-v2", "cohere"])
async def test_answer_without_vectors_is_the_same_exception(
    upstream: RecordingUpstream, kind: str
) -> None:
    upstream.set_default(_error_path(kind), Reply(json={"foo": 1}))
    (rust, _), (python, _) = await both_arms(upstream, kind, input=["a"])
    assert isinstance(rust, Exception) and isinstance(python, Exception)
    assert (type(rust), rust.status_code) == (type(python), python.status_code)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["openai", "titan-v2", "cohere"])
async def test_timeout_is_the_same_exception_after_one_request(
    upstream: RecordingUpstream, kind: str
) -> None:
    upstream.set_default(_error_path(kind), Reply(action="stall", delay_s=3))
    rust_kwargs = {**embedding_deployment_kwargs(kind, upstream.url), "input": ["a"]}
    with pytest.raises(Exception) as rust:
        await litellm.aembedding(**rust_kwargs, timeout=0.3, max_retries=0, rust=True)
    assert len(upstream.requests) == 1
    upstream.clear()
    with pytest.raises(Exception) as python:
        await litellm.aembedding(**rust_kwargs, timeout=0.3, max_retries=0)
    assert describe(rust.value) == describe(python.value)


@pytest.mark.parametrize("kind", ["openai", "titan-v2", "cohere"])
async def test_disconnect_is_the_same_exception_after_one_request(
    upstream: RecordingUpstream, kind: str
) -> None:
    upstream.set_default(_error_path(kind), Reply(action="disconnect"))
    (rust, rust_sent), (python, _) = await both_arms(upstream, kind, input=["a"])
    assert isinstance(rust, Exception) and isinstance(python, Exception)
    assert len(rust_sent) == 1
    # The message says what failed in our words (README, deliberate differences).
    assert describe(rust)[:2] == describe(python)[:2]


async def test_cancelled_call_closes_the_upstream_request(upstream: RecordingUpstream) -> None:
    upstream.set_default("/embeddings", Reply(action="stall", delay_s=5))
    kwargs = {**embedding_deployment_kwargs("openai", upstream.url), "input": ["a"]}
    task = asyncio.ensure_future(litellm.aembedding(**kwargs, rust=True))
    await wait_until_async(lambda: upstream.requests, "the call never reached the upstream")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(upstream.requests) == 1


def test_secrets_stay_out_of_errors(upstream: RecordingUpstream) -> None:
    upstream.set_default("/invoke", Reply(status=400, json={"message": "bad"}))
    kwargs = {
        **embedding_deployment_kwargs("titan-v1", upstream.url),
        "aws_secret_access_key": "AWS-SECRET-XYZ",
        "input": ["a"],
    }
    with pytest.raises(litellm.BadRequestError) as raised:
        litellm.embedding(**kwargs, rust=True)
    assert "AWS-SECRET-XYZ" not in str(raised.value)
    assert "AWS-SECRET-XYZ" not in repr(raised.value.__dict__)


def test_upstream_body_is_json_the_provider_accepts(upstream: RecordingUpstream) -> None:
    kwargs = {**embedding_deployment_kwargs("titan-v2", upstream.url), "input": ["é"]}
    litellm.embedding(**kwargs, rust=True)
    (request,) = upstream.requests
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.body) == {"inputText": "é"}
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
