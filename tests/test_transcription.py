"""Bedrock transcription in Rust: the same upload through `rust=True` and through LiteLLM
1.106.12's own route must give the upstream the same Converse body — except for two deliberate
differences the design asks for: no `system` block (Voxtral rejects a system message next to
audio) and the `language` in the instruction (LiteLLM drops it) — and the caller the same answer."""

from __future__ import annotations

import asyncio
import base64
import gc
import io
import sys
import time
from collections.abc import Iterator
from typing import Any

import litellm
import pytest

import litellm_fastpath
from tests.conftest import served_by_rust
from tests.harness import ProxyProcess, RecordingUpstream, Reply

MODEL = "bedrock/mistral.voxtral-mini-3b-2507"
AUDIO = bytes(range(256)) * 40


def bedrock_kwargs(url: str) -> dict[str, Any]:
    return {
        "model": MODEL,
        "aws_access_key_id": "AKIDTEST",
        "aws_secret_access_key": "secret-test-key",
        "aws_region_name": "us-east-1",
        "api_base": url,
    }


def named(data: bytes, name: str = "speech.wav") -> io.BytesIO:
    """What the proxy hands LiteLLM for a multipart upload."""
    file = io.BytesIO(data)
    file.name = name
    return file


def without_deliberate_differences(body: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in body.items() if k != "system"}
    return body


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"prompt": "Names: Bob, Alice."},
        {"temperature": 0.2},
        # What the proxy's form parsing hands LiteLLM: forwarded as given on both routes.
        {"temperature": "0.2"},
        {"response_format": "json"},
        # What the proxy's rate limiter adds for a key with a tpm limit: LiteLLM ignores it.
        {"max_tokens": 64},
    ],
)
async def test_upstream_body_and_response_match_litellm(
    upstream: RecordingUpstream, params: dict[str, Any]
) -> None:
    kwargs = bedrock_kwargs(upstream.url)
    fast = await litellm.atranscription(file=named(AUDIO), rust=True, **kwargs, **params)
    fast_request = upstream.wait_for(1)[-1]
    upstream.clear()
    slow = await litellm.atranscription(file=named(AUDIO), **kwargs, **params)
    slow_request = upstream.wait_for(1)[-1]

    assert served_by_rust(fast)
    assert fast._hidden_params["additional_headers"]["x-litellm-fastpath"]
    assert "x-litellm-fastpath" not in slow._hidden_params["additional_headers"]
    assert fast_request.path == slow_request.path == "/model/mistral.voxtral-mini-3b-2507/converse"
    assert "system" not in fast_request.json()
    assert fast_request.json() == without_deliberate_differences(slow_request.json())
    audio_block = fast_request.json()["messages"][0]["content"][0]["audio"]
    assert base64.b64decode(audio_block["source"]["bytes"]) == AUDIO
    assert not fast_request.chunked
    assert fast.model_dump() == slow.model_dump()
    assert litellm_fastpath.decline_counts() == {}


async def test_language_goes_into_the_instruction(upstream: RecordingUpstream) -> None:
    kwargs = bedrock_kwargs(upstream.url)
    await litellm.atranscription(
        file=named(AUDIO), rust=True, language="fr", prompt="Noms: Bob.", **kwargs
    )
    content = upstream.requests[0].json()["messages"][0]["content"]
    assert content[1]["text"] == (
        "Transcribe the audio. The spoken language is fr. Respond with only the transcript. "
        "Additional context: Noms: Bob."
    )


@pytest.mark.parametrize(
    ("filename", "expected"),
    [("a.wav", "wav"), ("a.mp3", "mp3"), ("a.flac", "flac"), ("a.ogg", "ogg"), ("noext", "wav")],
)
async def test_audio_format_from_file_name(
    upstream: RecordingUpstream, filename: str, expected: str
) -> None:
    await litellm.atranscription(
        file=named(AUDIO, filename), rust=True, **bedrock_kwargs(upstream.url)
    )
    assert upstream.requests[0].json()["messages"][0]["content"][0]["audio"]["format"] == expected


async def test_unsupported_format_is_a_400_with_litellms_wording(
    upstream: RecordingUpstream,
) -> None:
    with pytest.raises(litellm.BadRequestError) as raised:
        await litellm.atranscription(
            file=named(AUDIO, "speech.aac"), rust=True, **bedrock_kwargs(upstream.url)
        )
    assert raised.value.status_code == 400
    assert "Unsupported Bedrock audio format for file 'speech.aac'" in str(raised.value)
    assert upstream.requests == []


@pytest.mark.parametrize(
    "file",
    [
        pytest.param(AUDIO, id="bytes"),
        pytest.param(bytearray(AUDIO), id="bytearray"),
        pytest.param(memoryview(AUDIO), id="memoryview"),
        pytest.param(("speech.wav", AUDIO, "audio/wav"), id="tuple"),
        pytest.param(("speech.wav", io.BytesIO(AUDIO)), id="tuple-file"),
    ],
)
async def test_every_input_kind_sends_the_same_audio(
    upstream: RecordingUpstream, file: Any
) -> None:
    response = await litellm.atranscription(file=file, rust=True, **bedrock_kwargs(upstream.url))
    assert served_by_rust(response)
    block = upstream.requests[0].json()["messages"][0]["content"][0]["audio"]
    assert base64.b64decode(block["source"]["bytes"]) == AUDIO


def test_sync_transcription(upstream: RecordingUpstream) -> None:
    response = litellm.transcription(file=named(AUDIO), rust=True, **bedrock_kwargs(upstream.url))
    assert served_by_rust(response)
    assert response.text == "Hello from upstream"


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"timestamp_granularities": ["word"]}, "unsupported_param"),
        ({"response_format": "verbose_json"}, "response_format"),
    ],
)
async def test_unsupported_params_decline_to_litellm(
    upstream: RecordingUpstream, extra: dict[str, Any], code: str
) -> None:
    response = await litellm.atranscription(
        file=named(AUDIO), rust=True, **bedrock_kwargs(upstream.url), **extra
    )
    assert "x-litellm-fastpath" not in response._hidden_params.get("additional_headers", {})
    assert litellm_fastpath.decline_counts() == {code: 1}
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("file", [b"", named(b"")], ids=["bytes", "upload"])
async def test_empty_audio_is_refused_like_litellm(upstream: RecordingUpstream, file: Any) -> None:
    errors = []
    for rust in (True, False):
        if hasattr(file, "seek"):
            file.seek(0)
        with pytest.raises(Exception) as raised:
            await litellm.atranscription(file=file, **bedrock_kwargs(upstream.url), rust=rust)
        # LiteLLM appends its own traceback to the message: compare the message itself.
        message = str(raised.value).splitlines()[0]
        errors.append((type(raised.value), raised.value.status_code, message))
    assert errors[0] == errors[1]
    assert errors[0][0] is litellm.APIConnectionError
    assert upstream.requests == []
    assert litellm_fastpath.decline_counts() == {}


def _raised_by(error: BaseException) -> tuple[Any, ...]:
    return (type(error), error.status_code, error.model, error.llm_provider)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=429, json={"message": "Too many requests"}),
        Reply(status=500, json={"message": "boom"}),
        Reply(status=400, body=b"not json"),
    ],
    ids=["429", "500", "400-text"],
)
async def test_upstream_statuses_raise_what_litellms_route_raises(
    upstream: RecordingUpstream, reply: Reply
) -> None:
    """LiteLLM's own (Rust) transcription route raises an `APIError` of the provider's status,
    whatever it is: the same class, status, message and model, after one request each."""
    raised = []
    for rust in (True, False):
        upstream.enqueue(reply)
        with pytest.raises(litellm.APIError) as error:
            await litellm.atranscription(
                file=named(AUDIO), rust=rust, **bedrock_kwargs(upstream.url)
            )
        raised.append((*_raised_by(error.value), str(error.value)))
    assert raised[0] == raised[1]
    assert raised[0][1] == reply.status
    assert len(upstream.requests) == 2


@pytest.mark.parametrize(
    "reply",
    [Reply(action="disconnect"), Reply(body=b"not json")],
    ids=["disconnect", "not-json"],
)
async def test_other_faults_raise_what_litellms_route_raises(
    upstream: RecordingUpstream, reply: Reply
) -> None:
    """A fault without a status: the class, status and model LiteLLM's route gives it (each
    names the cause in its own words)."""
    raised = []
    for rust in (True, False):
        upstream.enqueue(reply)
        with pytest.raises(litellm.APIConnectionError) as error:
            await litellm.atranscription(
                file=named(AUDIO), rust=rust, **bedrock_kwargs(upstream.url)
            )
        raised.append(_raised_by(error.value))
    assert raised[0] == raised[1]


async def test_disconnect_mid_upload_is_a_connection_error(upstream: RecordingUpstream) -> None:
    upstream.enqueue(Reply(action="disconnect"), Reply(action="disconnect"))
    with pytest.raises(litellm.APIConnectionError):
        await litellm.atranscription(
            file=named(AUDIO * 64), rust=True, **bedrock_kwargs(upstream.url)
        )
    assert len(upstream.requests) <= 1


async def test_cancel_stops_the_upload_and_releases_the_audio(upstream: RecordingUpstream) -> None:
    audio = bytes(8 * 1024 * 1024)  # its own object, so its refcount is ours to watch
    baseline = sys.getrefcount(audio)
    upstream.enqueue(Reply(action="stall", delay_s=30))
    task = asyncio.ensure_future(
        litellm.atranscription(file=audio, rust=True, **bedrock_kwargs(upstream.url))
    )
    await asyncio.to_thread(upstream.wait_for, 1, 10)
    assert sys.getrefcount(audio) > baseline  # Rust holds the object itself, not a copy
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0
    # Released by the runtime as the task is dropped: no further call into the extension.
    deadline = time.monotonic() + 3
    while sys.getrefcount(audio) > baseline and time.monotonic() < deadline:
        gc.collect()
        await asyncio.sleep(0.02)
    assert sys.getrefcount(audio) == baseline


@pytest.fixture(scope="module")
def transcription_proxy() -> Iterator[tuple[ProxyProcess, RecordingUpstream]]:
    with RecordingUpstream() as upstream:
        plain = {"model_name": "plain-voxtral", "litellm_params": bedrock_kwargs(upstream.url)}
        fast = {
            "model_name": "rust-voxtral",
            "litellm_params": {**bedrock_kwargs(upstream.url), "rust": True},
        }
        settings = {"callbacks": ["litellm_fastpath.proxy.accelerator"]}
        with ProxyProcess([plain, fast], litellm_settings=settings) as proxy:
            yield proxy, upstream


@pytest.mark.proxy
@pytest.mark.parametrize("path", ["/audio/transcriptions", "/v1/audio/transcriptions"])
def test_proxy_serves_rust_transcriptions(
    transcription_proxy: tuple[ProxyProcess, RecordingUpstream], path: str
) -> None:
    proxy, upstream = transcription_proxy
    answers = {}
    bodies = {}
    for model in ("rust-voxtral", "plain-voxtral"):
        upstream.clear()
        response = proxy.post(
            path,
            files={"file": ("speech.wav", AUDIO, "audio/wav")},
            data={"model": model, "prompt": "Names: Bob."},
        )
        assert response.status_code == 200, response.text
        answers[model] = response
        bodies[model] = upstream.wait_for(1)[-1].json()
        assert len(upstream.requests) == 1
    fast, slow = answers["rust-voxtral"], answers["plain-voxtral"]
    assert fast.headers["x-litellm-rust"] == "true"
    assert fast.headers["x-litellm-fastpath"] == litellm_fastpath.__version__
    assert slow.headers.get("x-litellm-rust") == "true"  # LiteLLM's own native route
    assert "x-litellm-fastpath" not in slow.headers
    litellm_headers = [
        {name for name in response.headers if name.startswith("x-litellm-")}
        - {"x-litellm-fastpath"}
        for response in (fast, slow)
    ]
    # LiteLLM's native route omits the overhead header; the fast path reports it, as for chat.
    assert litellm_headers[0] - litellm_headers[1] == {"x-litellm-overhead-duration-ms"}
    assert litellm_headers[1] <= litellm_headers[0]
    assert fast.json() == slow.json()
    assert bodies["rust-voxtral"] == without_deliberate_differences(bodies["plain-voxtral"])


@pytest.mark.proxy
def test_proxy_form_temperature_is_served_like_litellms_route(
    transcription_proxy: tuple[ProxyProcess, RecordingUpstream],
) -> None:
    """Form fields arrive as strings: `temperature` is served, forwarded as LiteLLM forwards it."""
    proxy, upstream = transcription_proxy
    bodies = {}
    for model in ("rust-voxtral", "plain-voxtral"):
        upstream.clear()
        response = proxy.post(
            "/v1/audio/transcriptions",
            files={"file": ("speech.wav", AUDIO, "audio/wav")},
            data={"model": model, "temperature": "0.2"},
        )
        assert response.status_code == 200, response.text
        if model == "rust-voxtral":
            assert response.headers["x-litellm-fastpath"] == litellm_fastpath.__version__
        bodies[model] = upstream.wait_for(1)[-1].json()
    assert bodies["rust-voxtral"]["inferenceConfig"] == bodies["plain-voxtral"]["inferenceConfig"]
    assert bodies["rust-voxtral"] == without_deliberate_differences(bodies["plain-voxtral"])


@pytest.mark.proxy
def test_proxy_text_response_format(
    transcription_proxy: tuple[ProxyProcess, RecordingUpstream],
) -> None:
    proxy, _upstream = transcription_proxy
    responses = [
        proxy.post(
            "/v1/audio/transcriptions",
            files={"file": ("speech.wav", AUDIO, "audio/wav")},
            data={"model": model, "response_format": "text"},
        )
        for model in ("rust-voxtral", "plain-voxtral")
    ]
    assert [r.status_code for r in responses] == [200, 200]
    assert responses[0].text == responses[1].text
    assert responses[0].headers.get("x-litellm-fastpath")


async def test_audio_paths_stay_with_litellm(upstream: RecordingUpstream, tmp_path: Any) -> None:
    path = tmp_path / "speech.wav"
    path.write_bytes(AUDIO)
    response = await litellm.atranscription(file=path, rust=True, **bedrock_kwargs(upstream.url))
    assert "x-litellm-fastpath" not in response._hidden_params["additional_headers"]
    assert litellm_fastpath.decline_counts() == {"audio_source": 1}


async def test_non_bedrock_transcription_stays_with_litellm(upstream: RecordingUpstream) -> None:
    upstream.set_default("/audio/transcriptions", Reply(json={"text": "hi"}))
    response = await litellm.atranscription(
        model="openai/whisper-1",
        file=named(AUDIO),
        api_key="sk-upstream",
        api_base=upstream.url,
        rust=True,
    )
    assert response.text == "hi"
    assert litellm_fastpath.decline_counts() == {"provider": 1}


def native_deployment(url: str) -> Any:
    """The Bedrock deployment of these tests, for driving `_native` directly."""
    return litellm_fastpath._native.Deployment(
        "bedrock",
        "mistral.voxtral-mini-3b-2507",
        aws_access_key_id="AKIDTEST",
        aws_secret_access_key="secret-test-key",
        aws_region="us-east-1",
        aws_endpoint=url,
    )


@pytest.mark.parametrize("kind", ["memoryview_of_bytearray", "array"])
def test_writable_buffers_are_copied_so_the_bytes_signed_are_the_bytes_sent(
    upstream: RecordingUpstream, kind: str
) -> None:
    """Python may change a writable buffer while Rust hashes and sends it: Rust must copy it."""
    import array

    original = bytes(range(256)) * 64
    backing = bytearray(original)
    audio: Any = (
        memoryview(backing) if kind == "memoryview_of_bytearray" else array.array("B", original)
    )
    deployment = native_deployment(upstream.url)
    prepared = litellm_fastpath._native.prepare_transcription(deployment, audio, "wav")
    changed = b"\xff" * len(original)
    if kind == "array":
        audio[:] = array.array("B", changed)
    else:
        backing[:] = changed
    prepared.send_blocking()
    sent = upstream.wait_for(1)[-1].json()
    block = sent["messages"][0]["content"][0]["audio"]
    assert base64.b64decode(block["source"]["bytes"]) == original


def test_read_only_buffers_are_held_not_copied_and_released_after_the_call(
    upstream: RecordingUpstream,
) -> None:
    view = memoryview(bytes(range(256)) * 4096)
    before = sys.getrefcount(view)
    deployment = native_deployment(upstream.url)
    prepared = litellm_fastpath._native.prepare_transcription(deployment, view, "wav")
    assert sys.getrefcount(view) > before  # the export is pinned: no copy was made
    prepared.send_blocking()
    assert upstream.wait_for(1)[-1].json()["messages"][0]["content"][0]["audio"]
    del prepared
    deadline = time.monotonic() + 3
    while sys.getrefcount(view) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sys.getrefcount(view) == before
