"""Real-server test harness: a recording fake provider upstream and a LiteLLM proxy subprocess."""

from .proxy import (
    MASTER_KEY,
    ProxyProcess,
    ProxyStartError,
    free_port,
    proc_state,
    process_tree,
)
from .upstream import Recorded, RecordingUpstream, Reply, default_body

__all__ = [
    "MASTER_KEY",
    "ProxyProcess",
    "ProxyStartError",
    "Recorded",
    "RecordingUpstream",
    "Reply",
    "default_body",
    "free_port",
    "proc_state",
    "process_tree",
]
