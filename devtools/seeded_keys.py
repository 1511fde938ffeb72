"""A proxy callback that seeds virtual keys, users and teams into LiteLLM's auth cache:
`callbacks: ["devtools.seeded_keys.seeder"]`, with `FASTPATH_SEEDED_KEYS` in the environment (JSON:
`{"keys": {key: UserAPIKeyAuth fields}, "users": {id: fields}, "teams": {id: fields},
"memberships": [LiteLLM_TeamMembership fields]}`).

LiteLLM keeps virtual keys in Postgres, which this machine cannot run (its Prisma engines are not
downloadable here). As LiteLLM's own tests do, this seeds the cache and, once startup is over,
stands in a database object whose tables are empty (every other use fails, as during an outage):
LiteLLM then judges keys from its cache, and finds no rows where it looks one up. For benches;
the tests keep their own probes.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy import proxy_server
from litellm.proxy._types import (
    LiteLLM_TeamMembership,
    LiteLLM_TeamTableCachedObj,
    LiteLLM_UserTable,
    UserAPIKeyAuth,
    hash_token,
)
from litellm.proxy.common_utils.user_api_key_cache import team_membership_reservation_cache_key

ENV = "FASTPATH_SEEDED_KEYS"
# Set (to anything): LiteLLM's spend tracking on, as with a database (its cost callback, and a
# spend-log queue the stand-in keeps in memory).
SPEND_ENV = "FASTPATH_SEEDED_SPEND_TRACKING"
_TTL_S = 24 * 3600


class _EmptyTable:
    async def find_unique(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def find_first(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def find_many(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []


class _EmptyTables:
    def __getattr__(self, table: str) -> _EmptyTable:
        return _EmptyTable()


class _NoDatabase:
    db = _EmptyTables()

    def __init__(self) -> None:
        # Where LiteLLM's spend writer queues spend-log rows (`enqueue_spend_logs`).
        self.spend_log_transactions: list[Any] = []
        self._spend_log_transactions_lock = asyncio.Lock()

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("no database on this machine")


def seed(objects: dict[str, Any]) -> None:
    cache = proxy_server.user_api_key_cache
    for key, fields in objects.get("keys", {}).items():
        token = hash_token(key)
        cache.set_cache(key=token, value=UserAPIKeyAuth(token=token, **fields), ttl=_TTL_S)
    for user_id, fields in objects.get("users", {}).items():
        user = LiteLLM_UserTable(user_id=user_id, **fields)
        cache.set_cache(key=user_id, value=user, ttl=_TTL_S)
    for team_id, fields in objects.get("teams", {}).items():
        team = LiteLLM_TeamTableCachedObj(team_id=team_id, **fields)
        cache.set_cache(key=f"team_id:{team_id}", value=team, ttl=_TTL_S)
    for fields in objects.get("memberships", []):
        membership = LiteLLM_TeamMembership(**fields)
        key = team_membership_reservation_cache_key(
            user_id=membership.user_id, team_id=membership.team_id
        )
        cache.set_cache(key=key, value=membership, ttl=_TTL_S)


async def _after_startup() -> None:
    # The proxy's startup sets its database client (None here) before its shared HTTP session,
    # and overwrites whatever stands in for it before then.
    while proxy_server.shared_aiohttp_session is None:
        await asyncio.sleep(0.05)
    seed(json.loads(os.environ.get(ENV, "{}")))
    proxy_server.prisma_client = _NoDatabase()
    if SPEND_ENV in os.environ:
        # What the proxy does at startup when it has a database.
        proxy_server.cost_tracking()


class Seeder(CustomLogger):
    pass


seeder = Seeder()
if ENV in os.environ:  # in the proxy (a bench only imports the name of the variable)
    _task = asyncio.get_event_loop().create_task(_after_startup())
