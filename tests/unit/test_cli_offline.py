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


def test_cluster_shows_the_node_groups_when_raygang_scales():
    from rich.console import Console

    from raygang.cli import render

    cluster = {"nodes": [], "total": {}, "free": {}, "scaling": {
        "mode": "kuberay", "draining": ["n1"], "last_error": "KubeRayUnavailable: refused",
        "actions": ["2026-11-22T02:10:51Z gpu: replicas 0 -> 2"],
        "groups": [{"name": "gpu", "shape": {"CPU": 2.0, "GPU": 2.0}, "min_nodes": 0,
                    "max_nodes": 3, "nodes": 1, "desired": 2},
                   {"name": "cpu", "shape": {"CPU": 4.0}, "min_nodes": 1,
                    "max_nodes": 2**31 - 1, "nodes": 1, "desired": 1}]}}
    console = Console(width=200, record=True)
    console.print(render.cluster_view(cluster))
    text = console.export_text()
    assert "gpu     CPU 2, GPU 2   1       2         0-3" in text, text
    assert "cpu     CPU 4          1       1         1+ " in text, text
    assert "\nscaling: kuberay mode\nbeing released: 1 node(s)\nlast request failed: " \
           "KubeRayUnavailable: refused\nlast request: 2026-11-22T02:10:51Z gpu: replicas " \
           "0 -> 2\n" in text, text
    del cluster["scaling"]
    console.print(render.cluster_view(cluster))
    assert "GROUP" not in console.export_text()
