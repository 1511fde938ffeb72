"""A served chat request's logging without its replay (#27): LiteLLM's logging runs for it as in
its replay's provider call, given that call's arguments as the proxy and the router would have
built them.

Those arguments are learnt per request shape (the route, the deployment, the client's headers and
the body but for its messages) from two replays of that shape: what differs between the two is
what the proxy draws or stamps per request (call and trace ids, arrival clocks, the body's
length) and is drawn again for each request; the messages and the call id are the request's own.
A shape whose two replays differ anywhere else is not learnt, and its requests keep their
replays.
"""

from __future__ import annotations

import datetime
import io
import json
import pickle
import time
import uuid
from collections.abc import Iterator
from typing import Any

# What a shape is learnt from.
REPLAYS_TO_LEARN = 2
# Shapes kept per worker (their requests are replayed beyond it: clients sending headers that
# change per request make a shape per request).
MAX_SHAPES = 512
# The headers a shape leaves out: the body's length and the ids are per request.
_PER_REQUEST_HEADERS = frozenset({"content-length", "x-litellm-call-id", "x-fastpath-lane-ticket"})
# Values the proxy draws or stamps per request, by name (where found in the arguments).
_DRAWN_IDS = frozenset({"litellm_trace_id", "trace_id", "session_id", "litellm_session_id"})
_WALL_CLOCKS = frozenset({"arrival_time"})
_DATETIMES = frozenset({"litellm_received_at", "start_time"})
_DURATIONS = frozenset({"queue_time_seconds", "message_copy_duration_ms"})
_PER_REQUEST = _DRAWN_IDS | _WALL_CLOCKS | _DATETIMES | _DURATIONS
# A virtual key's spend (and its user's and team's) as of its auth: written anew per request from
# the key's auth object (`accounting.Ledger.take`).
KEY_STATE = frozenset({"user_api_key_spend", "user_api_key_user_spend", "user_api_key_team_spend"})
# A budget reservation: made per request by its key's auth (the batch's, `replay`) and written
# anew from that (`accounting.Ledger.take`); compared whole.
RESERVATION = "user_api_key_budget_reservation"
# The request's own values.
_OWN = frozenset({"messages", "input", "litellm_call_id", "content-length"})
# The logging object is built anew for each call (from its own copied attributes).
_NOT_COPIED = frozenset({"litellm_logging_obj"})

Shape = tuple[str, str, tuple[tuple[str, str], ...], str]
# Compared by value (other objects by kind: each request has its own).
_VALUES = (str, int, float, bool, type(None), datetime.datetime, set, frozenset, tuple)


def shape_of(
    path: str, deployment_id: str, headers: list[tuple[str, str]], body: bytes
) -> tuple[Shape, list[Any]] | None:
    """The request's shape and its messages (None: a body without a messages list)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("messages"), list):
        return None
    messages = parsed.pop("messages")
    kept = tuple((name, value) for name, value in headers if name not in _PER_REQUEST_HEADERS)
    return (path, deployment_id, kept, json.dumps(parsed, sort_keys=True)), messages


class Template:
    """The arguments of one shape's provider call, and which of its per-request values its two
    replays drew anew (the rest, such as a trace id the client sent, are the shape's).

    Kept pickled, with slots for the request's own values and its objects by reference: a
    request's copy is one `pickle` load (in C), which keeps what the capture shares shared."""

    def __init__(
        self, captured: dict[str, Any], logging_class: type, drawn: frozenset[str]
    ) -> None:
        # captured: {"arguments": the call's arguments, "logging": its logging object's attributes}
        self._logging_class = logging_class
        self._drawn = drawn
        # Whether its key's spend changed between its two replays (its requests need their
        # key's auth object).
        self.key_state_drawn = bool(drawn & KEY_STATE)
        own = (drawn & (_DRAWN_IDS | _WALL_CLOCKS | _DATETIMES)) | {
            "litellm_call_id",
            "content-length",
        }
        slotted = _copy(captured, {}, {name: _Slot(name) for name in own}, _Slot("messages"))
        self._shared: list[Any] = []
        file = io.BytesIO()
        _Pickler(file, self._shared).dump(slotted)
        self._pickled = file.getvalue()

    def arguments(self, messages: list[Any], call_id: str, content_length: int) -> dict[str, Any]:
        """This request's arguments: the shape's, with its messages, its call id, its length and
        values drawn anew."""
        drawn: dict[str, Any] = {name: str(uuid.uuid4()) for name in self._drawn & _DRAWN_IDS}
        if "litellm_trace_id" in drawn:
            # One trace: the proxy's trace and session ids are the same draw.
            drawn = dict.fromkeys(drawn, drawn["litellm_trace_id"])
        now = datetime.datetime.now()
        own = {
            **drawn,
            **dict.fromkeys(self._drawn & _WALL_CLOCKS, time.time()),
            **dict.fromkeys(self._drawn & _DATETIMES, now),
            "litellm_call_id": call_id,
            "content-length": str(content_length),
            "messages": messages,
        }
        copied = _Unpickler(self._pickled, self._shared, own).load()
        logging_obj: Any = object.__new__(self._logging_class)
        vars(logging_obj).update(copied["logging"])
        return {**copied["arguments"], "litellm_logging_obj": logging_obj}


class _Slot:
    """Where a request's own value goes in a template (by the key it is found under)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


# Pickled by value (a request gets its own); anything else is shared with the template.
_BY_VALUE = frozenset(
    {dict, list, set, frozenset, tuple, str, bytes, int, float, bool, type(None), datetime.datetime}
)


class _Pickler(pickle.Pickler):
    """Pickles a template's plain values; slots and objects by reference."""

    def __init__(self, file: io.BytesIO, shared: list[Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._shared = shared
        self._index: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) in _BY_VALUE:
            return None
        if isinstance(obj, _Slot):
            return ("slot", obj.name)
        index = self._index.get(id(obj))
        if index is None:
            index = self._index[id(obj)] = len(self._shared)
            self._shared.append(obj)
        return ("shared", index)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, shared: list[Any], own: dict[str, Any]) -> None:
        super().__init__(io.BytesIO(data))
        self._shared = shared
        self._own = own

    def persistent_load(self, pid: Any) -> Any:
        kind, key = pid
        return self._shared[key] if kind == "shared" else self._own[key]


class Shapes:
    """The shapes learnt in this worker, and the replays being learnt from."""

    def __init__(self) -> None:
        self._learnt: dict[Shape, Template | None] = {}
        self._seen: dict[Shape, dict[str, Any]] = {}

    def template(self, shape: Shape) -> Template | None:
        return self._learnt.get(shape)

    def learning(self, shape: Shape) -> bool:
        """Whether a replay of this shape is to be learnt from (not learnt yet, nor given up)."""
        return shape not in self._learnt and len(self._learnt) < MAX_SHAPES

    def learn(self, shape: Shape, messages: list[Any], arguments: dict[str, Any]) -> None:
        """A replay's provider-call arguments (as captured, before the call), for a request with
        these messages: learnt only where the call's messages are the client's (no hook
        changed them)."""
        if shape in self._learnt:  # learnt from two replays in flight with this one
            return
        logging_obj = arguments.get("litellm_logging_obj")
        body = (arguments.get("proxy_server_request") or {}).get("body") or {}
        if (
            logging_obj is None
            or arguments.get("messages") != messages
            or body.get("messages") != messages
        ):
            self._learnt[shape] = None
            return
        # One copy: the logging object's attributes share values with the arguments.
        copied = _copy({"arguments": arguments, "logging": vars(logging_obj)}, {}, {}, None)
        assert isinstance(copied, dict)
        first = self._seen.pop(shape, None)
        if first is None:
            if len(self._seen) >= MAX_SHAPES:  # shapes seen once (per-request headers)
                self._seen.clear()
            self._seen[shape] = copied
            return
        differing = set(_differences(first, copied))
        learnable = differing <= _PER_REQUEST | _OWN | KEY_STATE | {RESERVATION}
        self._learnt[shape] = (
            Template(copied, type(logging_obj), frozenset(differing)) if learnable else None
        )

    def forget(self) -> None:
        self._learnt.clear()
        self._seen.clear()


def _copy(value: Any, memo: dict[int, Any], patch: dict[str, Any], messages: Any) -> Any:
    """A copy of the arguments' dicts and lists (objects are shared; values found twice stay one
    value, as the proxy's body and metadata share them), with `patch` applied by key and the
    messages (a top-level or body `messages` list) replaced."""
    if isinstance(value, set):
        return set(value)
    if not isinstance(value, (dict, list)):
        return value
    found = memo.get(id(value))
    if found is not None:
        return found
    if isinstance(value, list):
        copied_list: list[Any] = []
        memo[id(value)] = copied_list
        copied_list.extend(_copy(item, memo, patch, messages) for item in value)
        return copied_list
    copied: dict[str, Any] = {}
    memo[id(value)] = copied
    for key, item in value.items():
        if key in _NOT_COPIED:
            continue
        if key in patch:
            copied[key] = patch[key]
        elif key in ("messages", "input") and messages is not None and isinstance(item, list):
            copied[key] = messages
        else:
            copied[key] = _copy(item, memo, patch, messages)
    return copied


def _differences(a: Any, b: Any, name: str = "") -> Iterator[str]:
    """The names of the keys under which two captures differ (`messages` for anything within
    them); objects are compared by kind (each request has its own)."""
    if name in ("messages", "input", RESERVATION):
        if a != b:
            yield name
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a.keys() | b.keys():
            if key not in a or key not in b:
                yield str(key)
            else:
                yield from _differences(a[key], b[key], str(key))
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield name
            return
        for x, y in zip(a, b, strict=True):
            yield from _differences(x, y, name)
        return
    if isinstance(a, _VALUES) or isinstance(b, _VALUES):
        if a != b or type(a) is not type(b):
            yield name
        return
    if type(a) is not type(b):
        yield name
