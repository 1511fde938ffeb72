"""Hashing upstream for the media benches: each body is hashed chunk by chunk, never kept.

Any POST other than `/reset` gets a tiny Bedrock Converse answer (text "ok") and is recorded:
length, SHA-256, Content-Length, chunked (refused with 411), SigV4 headers, content type, seconds.
`GET /results` -> `{"requests": [...], "max_inflight": n}` since the last `POST /reset`.

    python -m devtools.media_sink --port 0     # prints "READY <port>" once listening
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from typing import Any

from devtools.mock_provider import HttpServerProtocol, http_response, serve

CONVERSE_RESPONSE = json.dumps(
    {
        "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
    },
    separators=(",", ":"),
).encode()
records: list[dict[str, Any]] = []
inflight = [0, 0]  # now, max since the last reset


class Sink(HttpServerProtocol):
    def request_started(self) -> None:
        self.record = self.method == "POST" and self.path != "/reset"
        self.hasher = hashlib.sha256()
        self.received, self.t0 = 0, time.monotonic()
        if self.record and "chunked" in self.headers.get("transfer-encoding", "").lower():
            # The fast path must never use chunked encoding (the base class answers 411).
            records.append({**self.summary(), "error": "chunked transfer encoding"})
            self.record = False
        elif self.record:
            inflight[0] += 1
            inflight[1] = max(inflight)

    def body_received(self, chunk: memoryview) -> None:
        self.hasher.update(chunk)
        self.received += len(chunk)

    def summary(self) -> dict[str, Any]:
        headers, auth = self.headers, self.headers.get("authorization", "")
        return {
            "path": self.path,
            "content_length": int(headers.get("content-length") or -1),
            "received": self.received,
            "sha256": self.hasher.hexdigest(),
            "chunked": "chunked" in headers.get("transfer-encoding", "").lower(),
            "sigv4": auth.startswith("AWS4-HMAC-SHA256 Credential=")
            and "/bedrock/aws4_request" in auth
            and "x-amz-date" in headers,
            "content_type": headers.get("content-type"),
            "seconds": time.monotonic() - self.t0,
        }

    def request_done(self) -> None:
        status, body = 200, b"{}"
        if self.record:
            self.record = False
            inflight[0] -= 1
            records.append(self.summary())
            body = CONVERSE_RESPONSE
        elif self.path == "/results":
            body = json.dumps({"requests": records, "max_inflight": inflight[1]}).encode()
        elif self.path == "/reset":
            records.clear()
            inflight[1] = inflight[0]
        else:
            status = 404
        self.respond(http_response(status, body, self.keep_alive))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.remaining > 0 and self.record:
            inflight[0] -= 1
            records.append({**self.summary(), "error": "connection lost mid-body"})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    serve(Sink, parser.parse_args().port)
