"""Type stubs of the Rust extension (checked with `mypy.stubtest` in CI)."""

import asyncio
from collections.abc import Callable
from typing import Any, Final, final

# PyO3 keeps the module's `__all__`; stubtest checks this list against it.
__all__ = [
    "CallHandle",
    "Declined",
    "Deployment",
    "DeploymentSlots",
    "DeploymentUsage",
    "FastpathError",
    "GroupUsage",
    "InternalError",
    "InvalidRequestError",
    "InvalidResponseError",
    "LaneCachePrices",
    "LaneClaim",
    "LaneCost",
    "LaneDeployment",
    "LaneMessages",
    "LaneMessagesStreams",
    "LanePricing",
    "LaneRealtimeSession",
    "LaneReplay",
    "LaneStreams",
    "PreparedCall",
    "PreparedStream",
    "StreamHandle",
    "UpstreamConnectionError",
    "UpstreamStatus",
    "UpstreamStatusError",
    "UpstreamStreamError",
    "UpstreamTimeoutError",
    "__version__",
    "decline_codes",
    "lane_backlog",
    "lane_claim",
    "lane_configure",
    "lane_counts",
    "lane_enter_gauge",
    "lane_forget_group_lists",
    "lane_learn_messages_headers",
    "lane_messages_cost",
    "lane_next_realtime_sessions",
    "lane_next_replays",
    "lane_realtime_counts",
    "lane_realtime_replayed",
    "lane_reasons",
    "lane_release_hold",
    "lane_replayed",
    "lane_served",
    "lane_set_cooling",
    "lane_set_gauge",
    "lane_set_groups",
    "lane_set_key",
    "lane_set_rate_counting",
    "lane_set_readings",
    "lane_set_realtime",
    "lane_stop",
    "lane_stream_tail",
    "lane_tpm_estimate",
    "lane_upstream_buckets",
    "prepare_chat",
    "prepare_chat_stream",
    "prepare_embedding",
    "prepare_messages",
    "prepare_transcription",
    "provider_registry",
    "start_lane",
    "warm_counts",
    "warm_upstreams",
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
class UpstreamStatus:
    @property
    def status(self) -> int: ...
    @property
    def body(self) -> str: ...
    @property
    def headers(self) -> dict[str, str]: ...

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
def provider_registry() -> list[dict[str, str | bool]]: ...
def warm_upstreams(targets: list[tuple[Deployment, float, int]], interval_s: float) -> int: ...
def warm_counts() -> dict[str, int]: ...
def start_lane(
    listen_fd: int, app_socket: str, shared_socket: bool, keep_alive_timeout: float | None
) -> None: ...
def lane_stop() -> None: ...
def lane_configure(
    off: str | None,
    headers: list[tuple[str, str]],
    openai_headers: list[str],
    end_users: bool = False,
) -> None: ...

@final
class LaneCachePrices:
    def __new__(cls, *, read: float, write_5m: float, write_1h: float) -> LaneCachePrices: ...
    @property
    def read(self) -> float: ...
    @property
    def write_5m(self) -> float: ...
    @property
    def write_1h(self) -> float: ...

@final
class LanePricing:
    def __new__(
        cls,
        *,
        input: float,
        output: float,
        cache_read: float | None = None,
        anthropic_cache: LaneCachePrices | None = None,
    ) -> LanePricing: ...
    @property
    def input(self) -> float: ...
    @property
    def output(self) -> float: ...
    @property
    def cache_read(self) -> float | None: ...
    @property
    def anthropic_cache(self) -> LaneCachePrices | None: ...

@final
class LaneStreams:
    def __new__(cls, *, timeout: float, asks_usage: bool) -> LaneStreams: ...

@final
class LaneMessagesStreams:
    def __new__(cls, *, timeout: float, held: bool) -> LaneMessagesStreams: ...

@final
class LaneMessages:
    def __new__(
        cls,
        deployment: Deployment,
        *,
        headers: list[tuple[str, str]],
        versioned_headers: list[tuple[str, str]],
        timeout: float,
        streams: LaneMessagesStreams | None = None,
        api_base: str | None = None,
    ) -> LaneMessages: ...

@final
class LaneDeployment:
    def __new__(
        cls,
        deployment: Deployment,
        *,
        id: str,
        params: dict[str, Any],
        timeout: float,
        headers: list[tuple[str, str]],
        pricing: LanePricing | None = None,
        streams: LaneStreams | None = None,
        messages: LaneMessages | None = None,
        weight: float | None = None,
        slots: DeploymentSlots | None = None,
        usage: GroupUsage | None = None,
        routing: DeploymentUsage | None = None,
    ) -> LaneDeployment: ...

@final
class GroupUsage:
    def __new__(cls, *, rpm_limit: int | None, tpm_limit: int | None) -> GroupUsage: ...
    def read(self, minute: int, rpm: int, tpm: int) -> None: ...
    def counted(self, rpm: int, tokens: int) -> None: ...

@final
class DeploymentUsage:
    def __new__(cls, *, tpm_limit: int | None, rpm_limit: int | None) -> DeploymentUsage: ...
    def read(self, minute: int, tpm: int, rpm: int) -> None: ...
    def counted(self, rpm: int, tokens: int) -> None: ...
    def pending(self) -> bool: ...

@final
class DeploymentSlots:
    def __new__(cls, limit: int) -> DeploymentSlots: ...
    @property
    def limit(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    def take(self) -> bool: ...
    def give_back(self) -> None: ...

@final
class LaneRealtimeSession:
    @property
    def path(self) -> str: ...
    @property
    def headers(self) -> list[tuple[str, str]]: ...
    @property
    def client(self) -> tuple[str, int] | None: ...
    @property
    def server(self) -> tuple[str, int] | None: ...
    @property
    def deployment_id(self) -> str: ...
    @property
    def frames(self) -> list[tuple[bool, str]]: ...
    @property
    def ended_by_client(self) -> bool: ...
    @property
    def close_code(self) -> int | None: ...
    @property
    def close_reason(self) -> str: ...

@final
class LaneReplay:
    @property
    def path(self) -> str: ...
    @property
    def headers(self) -> list[tuple[str, str]]: ...
    @property
    def body(self) -> bytes: ...
    @property
    def client(self) -> tuple[str, int] | None: ...
    @property
    def server(self) -> tuple[str, int] | None: ...
    @property
    def ticket(self) -> str: ...

@final
class LaneClaim:
    @property
    def deployment_id(self) -> str: ...
    @property
    def call_id_added(self) -> bool: ...
    @property
    def call(self) -> PreparedCall | PreparedStream: ...
    @property
    def hold(self) -> int | None: ...
    @property
    def rate_limited(self) -> bool: ...
    @property
    def rate_counts(self) -> list[tuple[int, int]] | None: ...
    @property
    def parallel_counts(self) -> list[int] | None: ...
    @property
    def tokens_reserved(self) -> tuple[int, list[int]] | None: ...
    @property
    def usage(self) -> str | None: ...
    @property
    def awaits_tail(self) -> bool: ...
    @property
    def stream_failed(self) -> bool: ...

@final
class LaneCost:
    @property
    def total(self) -> float: ...
    @property
    def input(self) -> float: ...
    @property
    def output(self) -> float: ...
    @property
    def cache_read(self) -> float: ...
    @property
    def cache_creation(self) -> float: ...

def lane_set_groups(
    groups: dict[str, list[LaneDeployment]],
    reservation_rates: dict[str, tuple[float, float, int]] = ...,
) -> None: ...
def lane_release_hold(hold: int) -> None: ...
def lane_learn_messages_headers(
    deployment_id: str, key: str, headers: list[tuple[str, str]]
) -> None: ...
def lane_messages_cost(usage_json: str, pricing: LanePricing) -> LaneCost | None: ...
def lane_set_cooling(groups: list[str]) -> None: ...
def lane_set_key(
    key_hash: str,
    groups: list[str] | None,
    expires_at: float | None,
    valid_for: float,
    spend: float,
    *,
    headroom: float | None = None,
    key_headers: list[tuple[str, str]] = ...,
    rates: tuple[
        list[tuple[str, str, int, int, float]],
        list[tuple[str, str, int, int, float]],
        list[tuple[str, str, int, int]],
        bool,
    ]
    | None = None,
    release: int | None = None,
) -> None: ...
def lane_set_rate_counting(
    redis: tuple[str, int, str | None, str | None, int] | None,
    script: str,
    window_size: int,
    token_scripts: tuple[str, str],
    gauge_scripts: tuple[str, str, int],
) -> None: ...
def lane_enter_gauge(gauge_key: str, limit: int, registered: int) -> tuple[bool, int]: ...
def lane_set_gauge(gauge_key: str, registered: int) -> None: ...
def lane_set_readings(readings: list[tuple[str, str, str, int, float]]) -> None: ...
def lane_tpm_estimate(body: bytes, min_limit: int) -> int | None: ...
def lane_forget_group_lists() -> None: ...
def lane_claim(ticket: str) -> LaneClaim | None: ...
def lane_stream_tail(ticket: str, tail: bytes) -> None: ...
def lane_counts() -> dict[str, int]: ...
def lane_backlog() -> int: ...
def lane_served() -> list[tuple[str, str, int, list[int], float]]: ...
def lane_upstream_buckets() -> list[float]: ...
def lane_next_replays(
    event_loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], settle: Any
) -> None: ...
def lane_replayed() -> None: ...
def lane_set_realtime(
    groups: dict[str, list[tuple[str, float, str, str, int, float]]],
    logged_types: list[str] | None,
    notice: Callable[[int | None, str], tuple[str | None, int, str]],
) -> None: ...
def lane_next_realtime_sessions(
    event_loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], settle: Any
) -> None: ...
def lane_realtime_replayed() -> None: ...
def lane_realtime_counts() -> dict[str, int]: ...
