"""A proxy callback for the lane's auth tests: `callbacks: ["tests.lane_keys.seeder"]`.

LiteLLM's virtual keys live in Postgres, which this machine cannot run (its Prisma engines are
not downloadable here). As LiteLLM's own tests do, this seeds keys into the proxy's in-memory key
cache and stands in a database object once startup is over, so `user_api_key_auth` takes the
key path (a DB-less proxy refuses every key but the master key). Every use of that object fails,
as during a database outage: LiteLLM then judges keys from its cache alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy import proxy_server
from litellm.proxy._types import UserAPIKeyAuth, hash_token

# Key -> UserAPIKeyAuth fields.
KEYS: dict[str, dict[str, Any]] = {
    "sk-lane-any-model": {},
    "sk-lane-plain-only": {"models": ["plain-openai"]},
    "sk-lane-rust-only": {"models": ["rust-openai"]},
    "sk-lane-over-budget": {"max_budget": 0.001, "spend": 0.01},
    "sk-lane-with-budget": {"max_budget": 100.0, "spend": 0.5},
    "sk-lane-expired": {"expires": "2020-01-01T00:00:00"},
    "sk-lane-rate-limited": {"rpm_limit": 1000},
    "sk-lane-token-limited": {"tpm_limit": 1_000_000},
    "sk-lane-parallel-limited": {"max_parallel_requests": 100},
    "sk-lane-blocked": {"blocked": True},
}


class _NoDatabase:
    """Stands in for the Prisma client: every use fails."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("no database on this machine")


def seed() -> None:
    for key, fields in KEYS.items():
        token = hash_token(key)
        value = UserAPIKeyAuth(token=token, **fields)
        proxy_server.user_api_key_cache.set_cache(key=token, value=value, ttl=3600)


async def _after_startup() -> None:
    # The proxy's startup sets its database client (None here) before its shared HTTP session,
    # and overwrites whatever stands in for it before then.
    while proxy_server.shared_aiohttp_session is None:
        await asyncio.sleep(0.05)
    seed()
    proxy_server.prisma_client = _NoDatabase()


class Seeder(CustomLogger):
    pass


_task = asyncio.get_event_loop().create_task(_after_startup())
seeder = Seeder()


async def custom_auth(request: Any, api_key: str) -> UserAPIKeyAuth:
    """`general_settings.custom_auth` for the lane's tests: one accepted key."""
    if api_key == "sk-custom-ok":
        return UserAPIKeyAuth(api_key=api_key)
    raise RuntimeError("custom auth refused this key")
