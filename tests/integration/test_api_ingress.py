"""`raygang start --api` mode: the same app as a Ray Serve ingress, started once."""

from __future__ import annotations

import time

import httpx

from raygang.server.auth import AuthConfig
from raygang.server.ingress import API_APP, start_api, stop_api
from tests.api_server import TOKENS
from tests.integration import leaks


def test_the_api_runs_as_a_serve_application(ray_cluster, http_port, api_server):
    url = start_api(AuthConfig.from_file(api_server.tokens_file), port=http_port)
    try:
        assert url == f"http://127.0.0.1:{http_port}"
        token = TOKENS["team-a"][0]
        with httpx.Client(base_url=url, timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            assert client.get("/readyz").json()["status"] == "ready"
            assert client.get("/v1/gangs", headers={"Authorization": "Bearer nope"}
                              ).status_code == 401
            created = client.post("/v1/gangs", json={
                "name": "via-serve", "queue": "team-a",
                "roles": [{"name": "w", "replicas": 2, "resources": {"CPU": 1},
                           "entrypoint": "raygang.demo:sleep", "args": [0.2]}]})
            assert created.status_code == 201, created.text
            gang_id = created.json()["gang_id"]
            deadline = time.time() + 90
            while (state := client.get(f"/v1/gangs/{gang_id}").json()["state"]) != "SUCCEEDED":
                assert state not in ("FAILED", "CANCELLED") and time.time() < deadline, state
                time.sleep(0.2)
            page = client.get("/").text
            assert "<html" in page.lower()
    finally:
        stop_api()
    from ray import serve

    assert API_APP not in serve.status().applications
    leaks.wait_until_idle()
