"""The interpreter may exit right after a fast-path call: a runtime thread must never be caught
asking for the GIL during finalization (that kills the thread inside Rust frames: an abort)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from devtools.upstream import RecordingUpstream

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from litellm_fastpath import _native
    from litellm_fastpath.bridge import settle

    deployment = _native.Deployment(
        "bedrock", "mistral.voxtral-mini-3b-2507", aws_access_key_id="AKID",
        aws_secret_access_key="secret", aws_region="us-east-1", aws_endpoint=sys.argv[1],
    )

    async def main():
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(16)]
        for future in futures:
            _native.prepare_transcription(deployment, b"x" * 1000, "wav").start(
                loop, future, settle
            )
        for future in futures:
            body, _headers = await future
            assert body == {"text": "Hello from upstream"}

    asyncio.run(main())
    """
)


@pytest.mark.slow
def test_exit_right_after_calls_is_clean(upstream: RecordingUpstream) -> None:
    for _ in range(30):
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, upstream.url],
            capture_output=True,
            text=True,
            timeout=60,
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr[-2000:]
