"""/readyz through the real app, given what the scheduler answers (the app takes its
scheduler client as an argument; the integration tier runs it against the real actor)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from raygang.server.app import create_app
from raygang.server.auth import AuthConfig


class Answers:
    """A scheduler that answers ping as a restarted one does while it reads its store."""

    def __init__(self, ready: bool):
        self.ready = ready

    async def ping(self) -> dict:
        return {"ready": self.ready, "gangs": 3, "cycles": 0, "last_cycle_error": None}


def test_readyz_is_503_while_the_scheduler_recovers():
    scheduler = Answers(ready=False)
    client = TestClient(create_app(scheduler=scheduler, auth=AuthConfig.disabled()))
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json() == {"status": "recovering", "scheduler": None,
                             "detail": "reading the store"}
    scheduler.ready = True
    answer = client.get("/readyz")
    assert answer.status_code == 200
    assert answer.json()["status"] == "ready"
    assert client.get("/healthz").status_code == 200  # alive all along
