"""Type stubs of the Rust extension (checked with `mypy.stubtest` in CI)."""

import asyncio
from collections.abc import Callable
from typing import Any, Final, final

# PyO3 keeps the module's `__all__`; stubtest checks this list against it.
__all__ = [
    "CallHandle",
    "Declined",
    "Deployment",
    "FastpathError",
    "InternalError",
    "InvalidRequestError",
    "InvalidResponseError",
    "PreparedCall",
    "PreparedStream",
    "StreamHandle",
    "UpstreamConnectionError",
    "UpstreamStatusError",
    "UpstreamStreamError",
    "UpstreamTimeoutError",
    "__version__",
    "decline_codes",
    "lane_backlog",
    "lane_claim",
    "lane_configure",
    "lane_counts",
    "lane_forget_group_lists",
    "lane_learn_messages_headers",
    "lane_messages_cost",
    "lane_next_replays",
    "lane_reasons",
    "lane_replayed",
    "lane_set_cooling",
    "lane_set_groups",
    "lane_set_key",
    "lane_stop",
    "lane_stream_tail",
    "prepare_chat",
    "prepare_chat_stream",
    "prepare_embedding",
    "prepare_messages",
    "prepare_transcription",
    "start_lane",
]

__version__: Final[str]

class FastpathError(Exception): ...
class InvalidRequestError(FastpathError): ...
class UpstreamStatusError(FastpathError): ...
class UpstreamTimeoutError(FastpathError): ...
class UpstreamConnectionError(FastpathError): ...
class InvalidResponseError(FastpathError): ...
class UpstreamStreamError(FastpathError): ...
class InternalError(FastpathError): ...

@final
class Deployment:
    def __new__(
        cls,
        provider: str,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        extra_headers: list[tuple[str, str]] | None = None,
        timeout: float = 600.0,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        aws_region: str | None = None,
        aws_endpoint: str | None = None,
        default_max_tokens: int | None = None,
    ) -> Deployment: ...
    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def api_base(self) -> str | None: ...

@final
class Declined:
    @property
    def code(self) -> str: ...
    @property
    def detail(self) -> str: ...

@final
class CallHandle:
    def cancel(self) -> None: ...
    def done(self) -> bool: ...

@final
class PreparedCall:
    @property
    def url(self) -> str: ...
    def start(
        self,
        event_loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        settle: Callable[[asyncio.Future[Any], bool, Any], None],
    ) -> CallHandle: ...
    def send_blocking(self) -> tuple[dict[str, Any], dict[str, str]]: ...

@final
class StreamHandle:
    def next(
        self,
        event_loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        settle: Callable[[asyncio.Future[Any], bool, Any], None],
        frames_model: str | None = None,
        limit: int = ...,
    ) -> None: ...
    def next_blocking(self) -> tuple[list[dict[str, Any]] | bytes | None, str, Any]: ...
    def stop(self) -> None: ...
    def cancel(self) -> None: ...
    def close(self) -> None: ...
    def done(self) -> bool: ...

@final
class PreparedStream:
    @property
    def url(self) -> str: ...
    def start(
        self,
        event_loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        settle: Callable[[asyncio.Future[Any], bool, Any], None],
    ) -> StreamHandle: ...
    def start_blocking(self) -> tuple[StreamHandle, dict[str, str]]: ...

def prepare_chat_stream(
    deployment: Deployment,
    messages: object,
    params: dict[str, Any] | None,
    *,
    stream_options: dict[str, Any] | None = None,
    strip_usage: bool = False,
    repeat_limit: int = 100,
    timeout: float | None = None,
) -> PreparedStream | Declined: ...
def prepare_transcription(
    deployment: Deployment,
    audio: str | bytes | bytearray | memoryview,
    audio_format: str,
    *,
    language: str | None = None,
    prompt: str | None = None,
    temperature: float | str | None = None,
    timeout: float | None = None,
) -> PreparedCall: ...
def prepare_chat(
    deployment: Deployment,
    messages: object,
    params: dict[str, Any] | None,
    timeout: float | None = None,
) -> PreparedCall | Declined: ...
def prepare_embedding(
    deployment: Deployment,
    input: object,
    params: dict[str, Any] | None,
    timeout: float | None = None,
) -> PreparedCall | Declined: ...
def prepare_messages(
    deployment: Deployment,
    fields: list[tuple[str, Any]],
    headers: list[tuple[str, str]],
    *,
    stream: bool = False,
    timeout: float | None = None,
) -> tuple[PreparedCall | PreparedStream, bool] | Declined: ...
def decline_codes() -> list[str]: ...
def lane_reasons() -> list[str]: ...
def start_lane(
    listen_fd: int, app_socket: str, shared_socket: bool, keep_alive_timeout: float | None
) -> None: ...
def lane_stop() -> None: ...
def lane_configure(
    enabled: bool, headers: list[tuple[str, str]], openai_headers: list[str]
) -> None: ...
def lane_set_groups(groups: dict[str, list[tuple[Any, ...]]]) -> None: ...
def lane_learn_messages_headers(
    deployment_id: str, key: str, headers: list[tuple[str, str]]
) -> None: ...
def lane_messages_cost(
    usage_json: str, input: float, output: float, cache: tuple[float, float, float] | None
) -> tuple[float, float, float, float, float] | None: ...
def lane_set_cooling(groups: list[str]) -> None: ...
def lane_set_key(
    key_hash: str,
    groups: list[str] | None,
    expires_at: float | None,
    valid_for: float,
    spend: float,
) -> None: ...
def lane_forget_group_lists() -> None: ...
def lane_claim(ticket: str) -> tuple[str, bool, PreparedCall | PreparedStream] | None: ...
def lane_stream_tail(ticket: str, tail: bytes) -> None: ...
def lane_counts() -> dict[str, int]: ...
def lane_backlog() -> int: ...
def lane_next_replays(
    event_loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], settle: Any
) -> None: ...
def lane_replayed() -> None: ...
