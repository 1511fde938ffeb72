"""The fast lane: `fastpath_lane: true` under `litellm_settings`.

In each proxy worker the Rust lane takes over the public socket before uvicorn binds it, and
uvicorn serves on a private Unix socket behind it. The lane answers chat completions and
`/v1/messages` for `rust: true` model groups sent with a key LiteLLM has already judged; every
other request goes to the proxy unchanged. This package hands the lane what LiteLLM knows and
takes the lane's tickets back in the proxy: each served request is replayed through the proxy
after the client has its answer, with a ticket that stands for the provider's outcome, so
LiteLLM's auth counters, router, logging, cost and spend run as usual without a second provider
call.

- `takeover`: taking the socket at startup, draining at shutdown, the lane's counts
- `groups`: the group table (groups, settings, headers, cooldowns), kept current
- `prices`: LiteLLM's prices, where the lane's cost is exactly LiteLLM's
- `keys`: key verdicts, from the proxy's pre-call hook
- `replay`: served requests replayed through the proxy, tickets, the router's forced pick
- `claims` (beside this package): what the lane shares with the routes
"""

from litellm_fastpath.claims import claimed_call, learn_messages_headers, refuse_second_call
from litellm_fastpath.claims import lane_running as is_running
from litellm_fastpath.lane.keys import note_request
from litellm_fastpath.lane.takeover import counts, take_over

__all__ = [
    "claimed_call",
    "counts",
    "is_running",
    "learn_messages_headers",
    "note_request",
    "refuse_second_call",
    "take_over",
]
