"""The CLI's checks that need no API server: its copy of the gang states, its import
weight, and its retry of a POST with the same idempotency key (on httpx's mock transport,
which stands in for a network that refuses connections)."""

from __future__ import annotations

import subprocess
import sys

import httpx

from raygang.core.gang import GangState


def test_the_cli_knows_every_gang_state():
    from raygang.cli.main import STATES

    assert STATES == tuple(s.value for s in GangState)


def test_http_commands_do_not_import_ray():
    code = ("import sys, raygang.cli.main, raygang.cli.watch; "
            "print(sorted(m for m in ('ray', 'fastapi', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_connect_error_is_retried_with_the_same_idempotency_key():
    from raygang.cli.http import ApiClient

    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Idempotency-Key"))
        if len(seen) < 3:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={"gang_id": "g-1", "location": "/v1/gangs/g-1"})

    client = ApiClient("http://api.test", "t", transport=httpx.MockTransport(handler),
                       backoff_s=0)
    assert client.post("/v1/gangs", {}, idempotency_key="k1", attempts=3)["gang_id"] == "g-1"
    assert seen == ["k1", "k1", "k1"]
