"""Serve deployments over REST: create (201), conflict (409), list, get, answer HTTP
through Serve, delete — and the 422s for what only REST can get wrong."""

from __future__ import annotations

import httpx
from ray import serve

from raygang.runtime import serving
from tests.api_server import wait_for_state


def test_deploy_over_rest(api_server, ray_cluster, http_port):
    body = {"name": "rest-echo", "import_path": "raygang.demo:echo", "replicas": 2,
            "resources": {"CPU": 0.5}, "queue": "team-a"}
    with api_server.client("admin") as admin, api_server.client("team-b") as team_b:
        created = admin.post("/v1/deployments", json=body)
        assert created.status_code == 201, created.text
        assert created.headers["location"] == "/v1/deployments/rest-echo"
        gang_id = created.json()["gang_id"]
        try:
            again = admin.post("/v1/deployments", json=body)
            assert again.status_code == 409 and "undeploy it first" in again.json()["detail"]
            running = wait_for_state(admin, gang_id, {"RUNNING"}, timeout=180)
            assert running["kind"] == "deployment" and running["priority"] == 1000
            answer = httpx.get(f"http://127.0.0.1:{http_port}/rest-echo", timeout=30)
            assert answer.status_code == 200 and answer.json()["path"] == "/rest-echo"
            listed = admin.get("/v1/deployments").json()  # an earlier test's may have ended
            assert [d["name"] for d in listed if d["state"] == "RUNNING"] == ["rest-echo"]
            assert admin.get("/v1/deployments/rest-echo").json()["gang_id"] == gang_id
            # another team neither sees nor deletes it
            assert team_b.get("/v1/deployments").json() == []
            assert team_b.delete("/v1/deployments/rest-echo").status_code == 403
        finally:
            deleted = admin.delete("/v1/deployments/rest-echo")
        assert deleted.status_code == 200 and deleted.json()["state"] == "CANCELLED"
        assert deleted.json()["reason"] == "undeployed"

        no_path = admin.post("/v1/deployments", json={"name": "bare", "replicas": 1})
        assert no_path.status_code == 422 and no_path.json()["detail"].startswith("import_path")
        bad_path = admin.post("/v1/deployments", json={"name": "bad", "import_path": "no-colon"})
        assert bad_path.status_code == 422
        assert team_b.post("/v1/deployments", json={**body, "name": "x", "queue": "team-b"}
                           ).status_code == 403  # team-b may not use the inference class


def test_deployments_survive_serve_being_restarted_by_someone_else(api_server, ray_cluster,
                                                                   http_port):
    """After another driver's `serve.shutdown()` (and a new Serve), the scheduler's cached
    Serve handle is stale; the next deployment must still run, not die on RayActorError."""
    body = {"name": "after-restart", "import_path": "raygang.demo:echo", "replicas": 1,
            "resources": {"CPU": 0.5}}
    with api_server.client("admin") as admin:
        first = admin.post("/v1/deployments", json=body).json()["gang_id"]
        wait_for_state(admin, first, {"RUNNING"}, timeout=180)
        admin.delete("/v1/deployments/after-restart")
        serve.shutdown()
        serving.ensure_serve_started(http_port)
        second = admin.post("/v1/deployments", json=body).json()["gang_id"]
        try:
            wait_for_state(admin, second, {"RUNNING"}, timeout=180)
        finally:
            assert admin.delete("/v1/deployments/after-restart").json()["state"] == "CANCELLED"


def test_an_application_of_several_deployments_over_rest(api_server, ray_cluster, http_port):
    """`raygang.demo:pd` (router -> decode -> prefill, on CPUs): one gang of a role per
    deployment that asks for resources, options given in the body or read from the app;
    a wrong one is a 422 naming the deployment and field."""
    body = {"name": "rest-pd", "import_path": "raygang.demo:pd", "queue": "team-a",
            "deployments": {"Prefill": {"replicas": 2}}}
    with api_server.client("admin") as admin:
        unknown = admin.post("/v1/deployments", json={**body, "deployments": {"Prefil": {}}})
        assert unknown.status_code == 422, unknown.text
        assert unknown.json()["errors"][0] == {
            "field": "deployments.Prefil", "message": "the application has no deployment "
            "'Prefil' (its deployments: Prefill, Decode, Router)"}
        zero = admin.post("/v1/deployments", json={**body, "deployments": {"Decode": {
            "replicas": 0}}})
        assert zero.status_code == 422
        assert zero.json()["errors"][0]["field"] == "deployments.Decode.replicas"

        gang_id = admin.post("/v1/deployments", json=body).json()["gang_id"]
        try:
            running = wait_for_state(admin, gang_id, {"RUNNING"}, timeout=180)
            assert running["world_size"] == 3  # the router asks for nothing: not a role
            assert sorted((m["role"], m["index"]) for m in running["members"]) == [
                ("Decode", 0), ("Prefill", 0), ("Prefill", 1)]
            answer = httpx.get(f"http://127.0.0.1:{http_port}/rest-pd?prompt=abc", timeout=30)
            assert answer.json() == {"text": "cba", "path": "/rest-pd"}
        finally:
            assert admin.delete("/v1/deployments/rest-pd").json()["state"] == "CANCELLED"
