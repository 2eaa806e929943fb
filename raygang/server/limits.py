"""413 for request bodies over a size limit, before anything parses them.

A pure ASGI middleware (not Starlette's BaseHTTPMiddleware, which buffers): it refuses a
declared `Content-Length` over the limit at once, and counts a chunked body as it streams,
so neither form can make the server hold more than the limit in memory.
"""

from __future__ import annotations

import json
from typing import Any

Scope = dict[str, Any]


class BodyLimit:
    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_bytes
            except ValueError:
                return await self._refuse(send, 400, "Content-Length is not a number")
            if too_large:
                return await self._refuse(send, 413, self._message())
        seen = 0
        started = refused = False

        async def counted_receive() -> dict:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes and not started:
                    # Answer now; to the app the client is gone, so it stops reading.
                    refused = True
                    await self._refuse(send, 413, self._message())
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: dict) -> None:
            nonlocal started
            if refused:
                return  # the app's own answer to a "disconnect": the client has ours
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except Exception:
            if not refused:  # an error of the app's own, not of the body we cut off
                raise

    def _message(self) -> str:
        return f"request body over {self.max_bytes} bytes"

    @staticmethod
    async def _refuse(send: Any, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
