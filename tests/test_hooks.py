"""A configured callback's per-deployment hooks, which LiteLLM runs inside `acompletion`,
`aembedding` and `atranscription`: a call they may act on goes to LiteLLM's Python path
(`deployment_hook`), so the hook does what it does without the fast path; LiteLLM's own
callbacks whose hooks leave a call alone keep it on the fast path. The lane's gate (which
callbacks leave it on) is checked against the same hooks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import litellm
import pytest
from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.integrations.custom_logger import CustomLogger
from litellm.types.utils import ModelResponse

import litellm_fastpath
from devtools.deployments import deployment_kwargs, embedding_deployment_kwargs, served_by_rust
from devtools.upstream import RecordingUpstream, Reply
from litellm_fastpath import compat, hooks
from litellm_fastpath.lane import accounting, groups
from tests.test_transcription import AUDIO, bedrock_kwargs, named

# One loop for the module: LiteLLM's logging worker binds to the first it sees.
ON_ONE_LOOP = pytest.mark.asyncio(loop_scope="module")

HELLO = [{"role": "user", "content": "Hello"}]
STAMP = " [stamped]"


class RequestStamp(CustomLogger):
    """Changes the request after the deployment is chosen."""

    async def async_pre_call_deployment_hook(self, kwargs: dict, call_type: Any) -> dict:
        messages = [dict(m) for m in kwargs["messages"]]
        messages[-1]["content"] += STAMP
        return {**kwargs, "messages": messages}


class AnswerStamp(CustomLogger):
    """Changes the answer the deployment gave."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    async def async_post_call_success_deployment_hook(
        self, request_data: dict, response: Any, call_type: Any
    ) -> Any:
        self.seen.append(call_type)
        if isinstance(response, ModelResponse):
            message = response.choices[0].message  # type: ignore[union-attr]
            message.content = (message.content or "") + STAMP
        return response


class FailureNote(CustomLogger):
    """Notes each failed deployment attempt."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[str] = []

    async def async_post_call_failure_deployment_hook(
        self, request_data: Any, exception: Exception, call_type: Any, fallback_depth: Any = None
    ) -> None:
        self.failures.append(type(exception).__name__)


class LogsOnly(CustomLogger):
    async def async_log_success_event(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """`litellm.callbacks` as a proxy's `callbacks:` configure it, for one test."""
    callbacks: list[Any] = []
    monkeypatch.setattr(litellm, "callbacks", callbacks)
    yield callbacks


async def both_arms(call: Any, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The call with `rust=True`, then through LiteLLM's own path."""
    return await call(**kwargs, rust=True), await call(**kwargs)


@ON_ONE_LOOP
async def test_a_request_hook_sends_the_call_to_python(
    upstream: RecordingUpstream, configured: list[Any]
) -> None:
    configured.append(RequestStamp())
    kwargs = {**deployment_kwargs("openai", upstream.url), "messages": HELLO}
    fast, slow = await both_arms(litellm.acompletion, kwargs)
    assert not served_by_rust(fast) and not served_by_rust(slow)
    assert litellm_fastpath.decline_counts() == {"deployment_hook": 1}
    sent = [r.json()["messages"][-1]["content"] for r in upstream.requests]
    assert sent == ["Hello" + STAMP] * 2


@ON_ONE_LOOP
async def test_an_answer_hook_sends_the_call_to_python(
    upstream: RecordingUpstream, configured: list[Any]
) -> None:
    hook = AnswerStamp()
    configured.append(hook)
    kwargs = {**deployment_kwargs("anthropic", upstream.url), "messages": HELLO}
    fast, slow = await both_arms(litellm.acompletion, kwargs)
    assert not served_by_rust(fast)
    assert litellm_fastpath.decline_counts() == {"deployment_hook": 1}
    assert fast.choices[0].message.content == slow.choices[0].message.content
    assert fast.choices[0].message.content.endswith(STAMP)
    assert len(hook.seen) == 2


@ON_ONE_LOOP
async def test_a_failure_hook_sends_the_call_to_python(
    upstream: RecordingUpstream, configured: list[Any]
) -> None:
    hook = FailureNote()
    configured.append(hook)
    kwargs = {**deployment_kwargs("openai", upstream.url), "messages": HELLO}
    raised = []
    for rust in (True, False):
        upstream.enqueue(Reply(status=500, json={"error": {"message": "down"}}))
        with pytest.raises(litellm.InternalServerError) as err:
            await litellm.acompletion(**kwargs, rust=rust, max_retries=0)
        raised.append(type(err.value))
    assert raised[0] is raised[1]
    assert litellm_fastpath.decline_counts() == {"deployment_hook": 1}
    assert hook.failures == ["InternalServerError"] * 2


@ON_ONE_LOOP
async def test_embeddings_and_transcriptions_meet_the_hooks_too(
    upstream: RecordingUpstream, configured: list[Any]
) -> None:
    hook = AnswerStamp()
    configured.append(hook)
    embedding = {**embedding_deployment_kwargs("openai", upstream.url), "input": "hi"}
    fast, _ = await both_arms(litellm.aembedding, embedding)
    assert not served_by_rust(fast)
    upstream.set_default("/invoke", Reply(json={"outputs": [{"text": "hello"}]}))
    for rust in (True, False):
        answer = await litellm.atranscription(
            file=named(AUDIO), rust=rust, **bedrock_kwargs(upstream.url)
        )
        assert not served_by_rust(answer)
    assert litellm_fastpath.decline_counts() == {"deployment_hook": 2}
    assert len(hook.seen) == 4


def _skills_hook() -> Any:
    from litellm.proxy.hooks.litellm_skills.main import SkillsInjectionHook

    return SkillsInjectionHook()


@ON_ONE_LOOP
@pytest.mark.parametrize(
    "callback",
    [LogsOnly, CustomGuardrail, _skills_hook],
    ids=["logging-only", "guardrail-without-guardrails", "litellm-skills-hook"],
)
async def test_callbacks_whose_hooks_leave_the_call_alone_keep_the_fast_path(
    upstream: RecordingUpstream, configured: list[Any], callback: Any
) -> None:
    configured.append(callback())
    kwargs = {**deployment_kwargs("openai", upstream.url), "messages": HELLO}
    assert served_by_rust(await litellm.acompletion(**kwargs, rust=True))
    assert litellm_fastpath.decline_counts() == {}


def test_a_hook_set_on_the_instance_counts() -> None:
    callback = LogsOnly()
    assert not hooks.overrides(callback, "async_pre_call_deployment_hook")
    callback.async_pre_call_deployment_hook = RequestStamp().async_pre_call_deployment_hook  # type: ignore[method-assign]
    assert hooks.overrides(callback, "async_pre_call_deployment_hook")


# -- the lane's gate -------------------------------------------------------------------------

# CustomLogger methods through which a callback changes a request or answer the lane would serve
# (or whose calls the fast path leaves to LiteLLM's Python path): each keeps the lane off.
ACTING = (
    *hooks.CLIENT_HOOKS,
    "async_pre_call_hook",
    "async_moderation_hook",
    "async_post_call_success_hook",
    "async_post_call_response_headers_hook",
    "async_post_call_streaming_hook",
    "async_post_call_streaming_iterator_hook",
    "async_post_call_streaming_deployment_hook",
    "async_pre_routing_hook",
    "async_filter_deployments",
    "async_pre_call_check",
    "async_get_chat_completion_prompt",
    "get_chat_completion_prompt",
    "async_should_run_chat_completion_agentic_loop",
    "async_should_run_agentic_loop",
    "async_pre_request_hook",
    "async_logging_hook",
    "translate_completion_output_params_streaming",
)


def _replacing(name: str) -> Any:
    def replaced(self: Any, *args: Any, **kwargs: Any) -> Any:
        return None

    return type(f"Replaces_{name}", (CustomLogger,), {name: replaced})()


@pytest.mark.parametrize("name", ACTING)
def test_a_callback_replacing_an_acting_hook_keeps_the_lane_off(name: str) -> None:
    assert name in accounting._hook_names(compat.CustomLogger)
    assert not groups._idle_hook(_replacing(name))


@pytest.mark.parametrize(
    "name",
    [
        "async_log_success_event",
        "async_log_failure_event",
        "log_success_event",
        "async_post_call_failure_hook",
        "log_model_group_rate_limit_error",
    ],
)
def test_a_callback_replacing_only_logging_or_failure_hooks_leaves_the_lane_on(
    name: str,
) -> None:
    assert groups._idle_hook(_replacing(name))


def test_the_lanes_idle_methods_are_customloggers() -> None:
    """A name LiteLLM renamed or dropped would be a verdict about nothing."""
    assert groups._SERVE_IDLE_METHODS <= accounting._hook_names(compat.CustomLogger)


# -- LiteLLM's call rules ----------------------------------------------------------------------


def _refuse(text: str) -> bool:
    return False


SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    },
}


@ON_ONE_LOOP
@pytest.mark.parametrize(
    ("setting", "value", "extra"),
    [
        ("pre_call_rules", [_refuse], {}),
        ("post_call_rules", [_refuse], {}),
        ("enable_json_schema_validation", True, {"response_format": SCHEMA}),
    ],
    ids=["pre-call-rules", "post-call-rules", "json-schema-validation"],
)
async def test_litellms_call_rules_send_the_call_to_python(
    upstream: RecordingUpstream,
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
    value: Any,
    extra: dict[str, Any],
) -> None:
    """Each refuses the call or its answer ("Hello from upstream" is no JSON object): the same
    error on both arms."""
    monkeypatch.setattr(litellm, setting, value)
    kwargs = {**deployment_kwargs("openai", upstream.url), "messages": HELLO, **extra}
    raised = []
    for rust in (True, False):
        with pytest.raises(litellm.APIResponseValidationError) as err:
            await litellm.acompletion(**kwargs, rust=rust)
        raised.append(str(err.value))
    assert raised[0] == raised[1]
    assert litellm_fastpath.decline_counts() == {"client_checks": 1}


def test_json_schema_validation_keeps_the_lane_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litellm, "enable_json_schema_validation", True)
    why = groups.off_reasons(None, frozenset(), {}, "sk-m", [], premium=False)
    assert "litellm.enable_json_schema_validation" in why


@ON_ONE_LOOP
async def test_pre_call_rules_send_a_messages_call_to_python(
    upstream: RecordingUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(litellm, "pre_call_rules", [_refuse])
    kwargs = {**deployment_kwargs("anthropic", upstream.url), "messages": HELLO, "max_tokens": 64}
    raised = []
    for rust in (True, False):
        with pytest.raises(litellm.APIResponseValidationError) as err:
            await litellm.anthropic_messages(**kwargs, rust=rust)
        raised.append(str(err.value))
    assert raised[0] == raised[1]
    assert litellm_fastpath.decline_counts() == {"client_checks": 1}
    assert not upstream.requests


@ON_ONE_LOOP
async def test_a_global_budget_sends_the_call_to_python(
    upstream: RecordingUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(litellm, "max_budget", 1e-9)
    monkeypatch.setattr(litellm, "_current_cost", 1.0)
    kwargs = {**deployment_kwargs("openai", upstream.url), "messages": HELLO}
    for rust in (True, False):
        with pytest.raises(litellm.BudgetExceededError):
            await litellm.acompletion(**kwargs, rust=rust)
    assert litellm_fastpath.decline_counts() == {"client_checks": 1}
    assert not upstream.requests


@ON_ONE_LOOP
@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
async def test_modify_params_sends_chat_to_python(
    upstream: RecordingUpstream, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    """LiteLLM then rewrites conversations per provider (for Bedrock here it opens one that
    starts with the assistant with a placeholder user turn; Rust would send it as given)."""
    monkeypatch.setattr(litellm, "modify_params", True)
    messages = [{"role": "assistant", "content": "Hi, how can I help?"}, *HELLO]
    kwargs = {**deployment_kwargs(provider, upstream.url), "messages": messages}
    fast, _ = await both_arms(litellm.acompletion, kwargs)
    assert not served_by_rust(fast)
    assert litellm_fastpath.decline_counts() == {"litellm_option": 1}
    sent = [r.json() for r in upstream.requests]
    assert sent[0] == sent[1]
