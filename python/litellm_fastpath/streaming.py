"""Streamed chat on the fast path: LiteLLM's own stream wrapper, fed by Rust.

`FastStream` is a `CustomStreamWrapper` (the router, the proxy and its cleanup all rely on that
class) whose chunks come from the Rust pump in batches, one asyncio handoff per batch however
many chunks it holds. Rust applies LiteLLM's chunk rules; this module keeps the wrapper's
bookkeeping (`chunks`, the completion start time, the end-of-stream logging, failures as
LiteLLM reports them).

Serving the proxy, and when nothing in the proxy looks at chunks one by one (no guardrail, no
per-chunk hook, no stream iterator hook but LiteLLM's own pass-through one), the wrapper hands
the proxy ready-to-send SSE frames (`bytes`, several chunks each), serialized in Rust exactly as
the proxy would serialize the chunk objects. The first chunk still goes out as an object, so the
proxy's own model-name rules decide the `model` every later frame carries.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import litellm

from litellm_fastpath import _native, compat, errors
from litellm_fastpath.bridge import settle
from litellm_fastpath.providers import PROVIDERS
from litellm_fastpath.routing import StreamRoute

# Iterator hooks known to pass chat chunks through untouched (LiteLLM's default proxy hook).
_PASS_THROUGH_ITERATOR_HOOKS = frozenset({"ResponsesIDSecurity"})


_LOGGING_TASKS: set[asyncio.Task[Any]] = set()


class _Frames(bytes):
    """SSE frames for the proxy to write as they are; `_hidden_params` like a chunk's, for the
    proxy's keep-alive and fallback bookkeeping."""

    _hidden_params: dict[str, Any]


def frames_allowed(kwargs: dict[str, Any]) -> bool:
    """Whether the proxy serves this call and looks at no chunk (see module docstring)."""
    if kwargs.get("proxy_server_request") is None:
        return False
    logging_obj = kwargs.get("litellm_logging_obj")
    if getattr(logging_obj, "call_type", "acompletion") != "acompletion":
        return False
    return proxy_stream_hooks_idle()


def proxy_stream_hooks_idle() -> bool:
    """Whether the proxy's stream hooks leave every chunk as it is: no guardrail, no chunk hook,
    and only iterator hooks that pass chunks through (False outside a running proxy)."""
    caps = compat.proxy_callback_capabilities()
    if caps is None or caps.has_guardrail or caps.has_streaming_chunk_override:
        return False
    return all(
        type(callback).__name__ in _PASS_THROUGH_ITERATOR_HOOKS
        for callback, _kind in caps.iterator_overrides
    )


def _litellm_usage(provider: str, answer: dict[str, Any]) -> Any:
    """The answer's usage as LiteLLM's stream parser for `provider` converts the provider's."""
    usage = answer.get("usage")
    convert = PROVIDERS[provider].chat.stream_usage
    return usage if usage is None or convert is None else convert(usage, answer)


class FastStream(compat.CustomStreamWrapper):
    sent_first_chunk: bool

    def __init__(
        self,
        handle: _native.StreamHandle,
        route: StreamRoute,
        logging_obj: Any,
        provider_headers: dict[str, str],
        frames: bool,
    ) -> None:
        super().__init__(
            completion_stream=handle,
            # The model id itself (`converse/<id>` is LiteLLM's routing name for it).
            model=route.deployment.model,
            logging_obj=logging_obj,
            custom_llm_provider=route.provider,
            stream_options=route.stream_options,
            _response_headers=provider_headers,
        )
        self._handle = handle
        self._route = route
        self._frames = frames
        self._ready: collections.deque[Any] = collections.deque()
        # The whole answer as one chunk dict, once the stream ended.
        self._answer: dict[str, Any] | None = None
        # A failure to raise once the chunks before it are out.
        self._failure: BaseException | None = None
        self._usage_chunk_sent = False
        self._done = False
        # The chunk objects the proxy was handed, while no frames were (`_record_served_text`).
        self._objects: list[Any] | None = []

    async def __anext__(self) -> Any:
        try:
            self._check_max_streaming_duration()
            while not self._ready:
                if self._failure is not None:
                    failure, self._failure = self._failure, None
                    raise failure
                if self._answer is not None:
                    return await self._complete()
                await self._fill()
            return self._ready.popleft()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            self._log_stream_failure_and_raise(exc)

    async def _fill(self) -> None:
        if self._done:
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        frames_model = self._frames_model()
        # Until the proxy saw the first chunk as an object, take one chunk only.
        limit = 1 if self._frames and not self.sent_first_chunk else 1 << 30
        self._handle.next(loop, future, settle, frames_model, limit)
        try:
            payload, text, end = await future
        except asyncio.CancelledError:
            self._handle.cancel()
            raise
        if self.logging_obj.completion_start_time is None and payload:
            self.logging_obj.update_completion_start_time(completion_start_time=compat.now())
        if isinstance(payload, bytes):
            if payload:
                frames = _Frames(payload)
                frames._hidden_params = self._base_hidden_params
                self._ready.append(frames)
                self._objects = None
                # What the wrapper keeps for the proxy's disconnect billing: the text so far.
                self.chunks.append(self._text_chunk(text))
        elif payload:
            for data in payload:
                chunk = litellm.ModelResponseStream(**data)
                self.chunks.append(chunk)
                self._ready.append(chunk)
                if self._objects is not None:
                    self._objects.append(chunk)
            self.sent_first_chunk = True
        self.response_uptil_now += text
        if end is None:
            return
        self._done = True
        if isinstance(end, BaseException):
            self._failure = errors.stream_failure(end, self._route)
        else:
            self._answer = end

    def _frames_model(self) -> str | None:
        if not self._frames or not self.sent_first_chunk:
            return None
        # Set by the proxy when it renamed the first chunk's model; otherwise ours stood.
        return getattr(self.logging_obj, "client_facing_stream_model", None) or self.model

    def _text_chunk(self, text: str) -> Any:
        return litellm.ModelResponseStream(
            model=self.model,
            choices=[compat.StreamingChoices(delta=compat.Delta(content=text))],
        )

    async def _complete(self) -> Any:
        """LiteLLM's `_finalize_completed_stream`, from the answer Rust assembled."""
        answer = self._answer
        assert answer is not None
        if not hasattr(self, "_complete_response"):
            latest = answer.pop("_latest")
            answer["usage"] = _litellm_usage(self._route.provider, answer)
            summary = litellm.ModelResponseStream(**answer)
            # LiteLLM's usage chunk carries the latest event's id and fingerprint.
            self.response_id = latest["id"]
            self.created = summary.created
            self.system_fingerprint = latest["system_fingerprint"]
            self._complete_response = litellm.stream_chunk_builder(
                chunks=[summary],
                messages=self.messages,
                logging_obj=self.logging_obj,
                count_prompt_tokens=self.count_prompt_tokens,
            )
        complete = self._complete_response
        if complete is not None:
            self._propagate_usage_cost_to_hidden_params(complete, self.custom_llm_provider)
            self._record_served_text(complete)
        if self.send_stream_usage and not self._usage_chunk_sent and not self._route.strip_usage:
            self._usage_chunk_sent = True
            response = self.model_response_creator()
            if complete is not None:
                response.usage = complete.usage
                compat.stamp_served_service_tier(response, complete)
            return response
        deferred = getattr(self.logging_obj, "_on_deferred_stream_complete", None)
        if deferred is not None:
            self.logging_obj._deferred_stream_complete_args = (complete, False)
        else:
            # As LiteLLM's wrapper: fire and forget; the set keeps the task alive until done.
            task = asyncio.create_task(
                self.logging_obj.dispatch_success_handlers(
                    complete,
                    cache_hit=False,
                    start_time=None,
                    end_time=None,
                    prefer_async_handlers=True,
                )
            )
            _LOGGING_TASKS.add(task)
            task.add_done_callback(_LOGGING_TASKS.discard)
        self._answer = None
        self._restore_consumer_correlation_context()
        raise StopAsyncIteration

    def _record_served_text(self, complete: Any) -> None:
        """The proxy records a stream's text as the chunk objects it served spell it (LiteLLM's
        served output texts, which its logging reads), and nothing once frames were among
        them: then the text is recorded here, as LiteLLM's path records it. A stream the lane
        wrote hands it its first chunk only: the rest of the text, which the lane served, is
        added to that chunk (already written; its frame went nowhere), so that the proxy's
        record reads the whole text."""
        if self._objects is None:
            texts = compat.served_output_texts(complete)
            compat.record_served_output_texts(self.logging_obj.model_call_details, texts)
            return
        if not self._objects:
            return
        choices = getattr(complete, "choices", None) or []
        whole = getattr(getattr(choices[0], "message", None), "content", None) if choices else None
        served = "".join(
            content
            for chunk in self._objects
            for choice in chunk.choices
            if choice.index == 0 and isinstance(content := choice.delta.content, str)
        )
        if not isinstance(whole, str) or whole == served or not whole.startswith(served):
            return
        for choice in self._objects[0].choices:
            if choice.index == 0:
                choice.delta.content = (choice.delta.content or "") + whole[len(served) :]
                return

    async def aclose(self) -> None:
        self._handle.cancel()
        await super().aclose()

    def __next__(self) -> Any:
        raise TypeError("use `async for`: this stream was started by litellm.acompletion")
