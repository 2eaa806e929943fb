"""A real API server for tests: uvicorn serving `create_app` on a free loopback port, in a
thread of the test process (which is connected to the session's Ray cluster)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from raygang.runtime.ports import free_port  # noqa: F401 - tests import it from here
from raygang.server import AuthConfig
from raygang.server.auth import digest
from raygang.server.standalone import ApiThread, serve_in_thread

# name -> (token, queues, admin, priority classes); written to the tokens file the server
# loads (team-b's as a SHA-256 digest, the form that keeps tokens off disk).
TOKENS = {
    "admin": ("admin-token-0123456789", None, True, None),
    "team-a": ("team-a-token-0123456789", ["team-a"], False, None),
    "team-b": ("team-b-token-0123456789", ["team-b"], False, ["training", "batch"]),
}


@dataclass
class ApiServer:
    url: str
    tokens_file: Path
    api: ApiThread

    def token(self, who: str = "admin") -> str:
        return TOKENS[who][0]

    def client(self, who: str | None = "admin", **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token(who)}"} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kwargs)

    def stop(self) -> None:
        self.api.stop()


def write_tokens_file(folder: Path) -> Path:
    lines = ["tokens:"]
    for name, (token, queues, admin, classes) in TOKENS.items():
        secret = f"sha256: {digest(token)}" if name == "team-b" else f"token: {token}"
        lines.append(f"  - name: {name}\n    {secret}\n    admin: {str(admin).lower()}")
        if queues is not None:
            lines.append(f"    queues: [{', '.join(queues)}]")
        if classes is not None:
            lines.append(f"    priority_classes: [{', '.join(classes)}]")
    path = folder / "tokens.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start_api_server(folder: Path) -> ApiServer:
    tokens_file = write_tokens_file(folder)
    api = serve_in_thread(AuthConfig.from_file(tokens_file))
    return ApiServer(api.url, tokens_file, api)


FINISHED = {"SUCCEEDED", "FAILED", "CANCELLED"}


def wait_for_state(client: httpx.Client, gang_id: str, states: set[str],
                   timeout: float = 90) -> dict:
    """Poll `GET /v1/gangs/{id}` until the gang is in one of `states`; its status then."""
    deadline = time.time() + timeout
    while True:
        status = client.get(f"/v1/gangs/{gang_id}").json()
        if status["state"] in states:
            return status
        assert status["state"] not in FINISHED and time.time() < deadline, status
        time.sleep(0.2)
