"""How the lane learns a request shape's provider-call arguments from two replays
(`lane/shapes.py`), and which callbacks let a served request's logging run in the batch
(`lane/accounting.py`). The proxy-level differential tests are in `test_lane_accounting.py`."""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from litellm.litellm_core_utils.litellm_logging import Logging

from litellm_fastpath.lane import accounting, shapes

HEADERS = [
    ("host", "127.0.0.1:4000"),
    ("content-length", "67"),
    ("authorization", "Bearer sk-master"),
    ("x-litellm-call-id", "call-1"),
]


def body(text: str, **extra: Any) -> bytes:
    return json.dumps(
        {"model": "g", "messages": [{"role": "user", "content": text}], **extra}
    ).encode()


def replay_arguments(text: str, trace_id: str | None = None, **changed: Any) -> dict[str, Any]:
    """A replay's provider-call arguments as the proxy and router build them: the body is the
    proxy's request data, sharing its messages and metadata with the arguments."""
    call_id = str(uuid.uuid4())
    messages = [{"role": "user", "content": text}]
    headers = {"host": "127.0.0.1:4000", "content-length": str(len(body(text)))}
    metadata = {
        "headers": headers,
        "model_group": "g",
        "queue_time_seconds": 0.001,
        "litellm_received_at": datetime.datetime.now(),
        **changed,
    }
    data = {"litellm_call_id": call_id, "messages": messages, "metadata": metadata, "model": "g"}
    logging_obj = Logging(
        model="openai/gpt-4o-mini",
        messages=messages,
        stream=False,
        call_type="acompletion",
        start_time=datetime.datetime.now(),
        litellm_call_id=call_id,
        function_id="f",
        litellm_trace_id=trace_id,
    )
    return {
        "model": "openai/gpt-4o-mini",
        "messages": messages,
        "metadata": metadata,
        "litellm_call_id": call_id,
        "litellm_trace_id": logging_obj.litellm_trace_id,
        "litellm_logging_obj": logging_obj,
        "proxy_server_request": {"body": data, "headers": headers, "arrival_time": 1.0},
        "rust": True,
    }


def learnt(shapes_: shapes.Shapes, *captures: dict[str, Any]) -> shapes.Template | None:
    found = shapes.shape_of("/chat/completions", "d1", HEADERS, body("a"))
    assert found is not None
    shape, _ = found
    for capture in captures:
        shapes_.learn(shape, capture["messages"], capture)
    return shapes_.template(shape)


def test_a_shape_leaves_out_the_messages_the_length_and_the_ids() -> None:
    a = shapes.shape_of("/chat/completions", "d1", HEADERS, body("a"))
    b = shapes.shape_of(
        "/chat/completions", "d1", [*HEADERS[:1], ("content-length", "70")], body("bbbb")
    )
    other = shapes.shape_of("/chat/completions", "d1", HEADERS, body("a", temperature=0.5))
    assert a is not None and b is not None and other is not None
    assert a[0][:2] == b[0][:2] and a[0][3] == b[0][3]
    assert a[1] == [{"role": "user", "content": "a"}]
    assert other[0] != a[0]
    assert shapes.shape_of("/chat/completions", "d1", HEADERS, b"[1]") is None
    assert shapes.shape_of("/chat/completions", "d1", HEADERS, b"{not json") is None


def test_a_request_gets_its_own_messages_ids_and_length_and_a_new_trace() -> None:
    template = learnt(shapes.Shapes(), replay_arguments("one"), replay_arguments("two"))
    assert template is not None
    messages = [{"role": "user", "content": "three"}]
    made = template.arguments(messages, "call-3", 99)
    again = template.arguments(messages, "call-4", 99)
    assert made["messages"] is messages
    assert made["proxy_server_request"]["body"]["messages"] is messages
    # The body and the arguments still share one metadata, as the proxy's do.
    assert made["proxy_server_request"]["body"]["metadata"] is made["metadata"]
    assert made["litellm_call_id"] == "call-3"
    assert made["proxy_server_request"]["body"]["litellm_call_id"] == "call-3"
    assert made["metadata"]["headers"]["content-length"] == "99"
    # The trace id was drawn per replay: drawn again, once for the logging object too.
    assert made["litellm_trace_id"] != again["litellm_trace_id"]
    logging_obj = made["litellm_logging_obj"]
    assert isinstance(logging_obj, Logging)
    assert logging_obj is not again["litellm_logging_obj"]
    assert logging_obj.litellm_call_id == "call-3"
    assert logging_obj.litellm_trace_id == made["litellm_trace_id"]
    assert logging_obj.messages is messages
    assert logging_obj.model_call_details["litellm_call_id"] == "call-3"


def test_a_trace_id_the_client_sent_is_kept() -> None:
    template = learnt(
        shapes.Shapes(),
        replay_arguments("one", "client-trace"),
        replay_arguments("two", "client-trace"),
    )
    assert template is not None
    assert template.arguments([], "c", 1)["litellm_trace_id"] == "client-trace"


def test_a_shape_whose_replays_differ_otherwise_is_not_learnt() -> None:
    learner = shapes.Shapes()
    template = learnt(learner, replay_arguments("one", tag="a"), replay_arguments("two", tag="b"))
    assert template is None
    found = shapes.shape_of("/chat/completions", "d1", HEADERS, body("a"))
    assert found is not None and not learner.learning(found[0])


def test_a_key_s_spend_between_its_replays_is_learnt_as_drawn_per_request() -> None:
    """A virtual key's spend (and its user's and team's) moved between the two replays: the
    shape is learnt, marked so (the ledger writes the key's part anew per request from its
    auth object; a master-key shape so marked keeps its replays)."""
    template = learnt(
        shapes.Shapes(),
        replay_arguments("one", user_api_key_spend=0.1, user_api_key_team_spend=1.0),
        replay_arguments("two", user_api_key_spend=0.2, user_api_key_team_spend=1.1),
    )
    assert template is not None and template.key_state_drawn
    same = learnt(
        shapes.Shapes(),
        replay_arguments("one", user_api_key_spend=0.1),
        replay_arguments("two", user_api_key_spend=0.1),
    )
    assert same is not None and not same.key_state_drawn


def test_messages_a_hook_changed_are_not_learnt() -> None:
    learner = shapes.Shapes()
    found = shapes.shape_of("/chat/completions", "d1", HEADERS, body("a"))
    assert found is not None
    shape, _ = found
    capture = replay_arguments("one")
    learner.learn(shape, [{"role": "user", "content": "what the client sent"}], capture)
    assert learner.template(shape) is None and not learner.learning(shape)


def test_shapes_seen_once_are_not_kept_forever() -> None:
    learner = shapes.Shapes()
    for i in range(shapes.MAX_SHAPES + 10):
        found = shapes.shape_of("/chat/completions", "d1", [("x-request-id", str(i))], body("a"))
        assert found is not None
        learner.learn(found[0], found[1], replay_arguments("a"))
    assert len(learner._seen) <= shapes.MAX_SHAPES


class _Recording(CustomLogger):
    async def async_log_success_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_failure_event(self, *args: Any, **kwargs: Any) -> None:
        pass


class _RecordingWithFailureHook(_Recording):
    async def async_post_call_failure_hook(self, *args: Any, **kwargs: Any) -> None:
        pass


class _OnlyFailureHook(CustomLogger):
    async def async_post_call_failure_hook(self, *args: Any, **kwargs: Any) -> None:
        pass


class _Hooking(_Recording):
    async def async_post_call_success_hook(self, *args: Any, **kwargs: Any) -> Any:
        pass


def test_only_callbacks_that_only_log_let_the_logging_run_in_the_batch() -> None:
    assert accounting._only_logs(_Recording())
    assert not accounting._only_logs(_Hooking())
    hooked = _Recording()
    hooked.async_pre_call_hook = lambda *a, **k: None  # type: ignore[method-assign]
    assert not accounting._only_logs(hooked)
    assert not accounting._only_logs("langfuse")
    # A hook LiteLLM never calls for an answer changes nothing: a failure hook beside logging
    # still logs in the batch; a callback with only a failure hook leaves nothing to do.
    assert accounting._only_logs(_RecordingWithFailureHook())
    router = object()
    inert = accounting._inert_types()
    assert accounting._leaves_nothing(_OnlyFailureHook(), inert, router)
    assert not accounting._leaves_nothing(_RecordingWithFailureHook(), inert, router)
    assert not accounting._leaves_nothing(_Hooking(), inert, router)
