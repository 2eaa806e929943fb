"""`raygang start --api` for real: the CLI joins the session's Ray cluster, finds the
running scheduler, deploys the API on Ray Serve, and `raygang submit --wait` goes through
it. (Another test file checks `start`'s error paths; this one the path that works.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx

from ray import serve

from raygang.runtime import serving
from raygang.server.ingress import API_APP
from tests.api_server import TOKENS, free_port, write_tokens_file
from tests.e2e.test_cli import ok, spec_file
from tests.integration import leaks


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raygang.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=240)


def test_start_with_the_api_then_submit_through_it(ray_cluster, tmp_path):
    """The API as a Serve ingress (`--api`), with a tokens file: it refuses a wrong token,
    serves the status page, and a team's `raygang submit --wait` goes through it."""
    port = free_port()
    # The session's cluster runs without Ray token auth (see tests/conftest.py).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYGANG_")}
    env["RAY_AUTH_MODE"] = "disabled"
    tokens = write_tokens_file(tmp_path)
    started = ok(cli("start", "--address", ray_cluster.address, "--api", "--tokens-file",
                     str(tokens), "--port", str(port), env=env))
    try:
        url = f"http://127.0.0.1:{port}"
        assert url in started, started
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/readyz").json()["status"] == "ready"
            assert client.get("/v1/gangs", headers={"Authorization": "Bearer nope"}
                              ).status_code == 401
            assert "<html" in client.get("/").text.lower()
        env.update(RAYGANG_ADDRESS=url, RAYGANG_TOKEN=TOKENS["team-a"][0])
        spec = spec_file(tmp_path, "via-start", seconds=0.2, queue="team-a")
        out = ok(cli("submit", str(spec), "--wait", env=env))
        assert "SUCCEEDED" in out, out
        listed = ok(cli("list", "--queue", "team-a", env=env))
        assert "via-start" in listed
    finally:
        serving._delete(API_APP)
        serve.shutdown()
    assert API_APP not in serve.status().applications
    leaks.wait_until_idle()


def test_api_runs_standalone_against_a_cluster(ray_cluster, tmp_path):
    """`raygang api`: uvicorn in its own process, joined to the cluster; ready once it
    reaches the scheduler; auth as configured (here a tokens file)."""
    port = free_port()
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  - name: ops\n    token: standalone-token-0123456789\n"
                      "    admin: true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYGANG_")}
    env["RAY_AUTH_MODE"] = "disabled"
    server = subprocess.Popen(
        [sys.executable, "-m", "raygang.cli.main", "api", "--ray-address", ray_cluster.address,
         "--port", str(port), "--tokens-file", str(tokens)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            try:
                ready = httpx.get(f"{url}/readyz", timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stderr.read()
                assert time.time() < deadline, "raygang api did not listen within 60 s"
                time.sleep(0.25)
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert httpx.get(f"{url}/v1/queues").status_code == 401
        queues = httpx.get(f"{url}/v1/queues", headers={
            "Authorization": "Bearer standalone-token-0123456789"})
        assert queues.status_code == 200 and "team-a" in {q["name"] for q in queues.json()}
    finally:
        server.terminate()
        server.wait(timeout=30)
