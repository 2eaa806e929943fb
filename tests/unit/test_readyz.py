"""/readyz through the real app, given what the scheduler answers (the app takes its
scheduler client as an argument; the integration tier runs it against the real actor)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from raygang.runtime.client.connection import SchedulerUnavailable
from raygang.server.app import create_app
from raygang.server.auth import AuthConfig


class Answers:
    """A scheduler that answers ping as a restarted one does while it reads its store."""

    def __init__(self, ready: bool):
        self.ready = ready

    async def ping(self) -> dict:
        return {"ready": self.ready, "gangs": 3, "cycles": 0, "last_cycle_error": None}


class Silent:
    """A scheduler that does not answer, as `SchedulerClient.ping` reports it (no actor,
    a dead one, or no answer within its timeout)."""

    def __init__(self):
        self.pings = 0

    async def ping(self) -> dict:
        self.pings += 1
        raise SchedulerUnavailable("the raygang scheduler did not answer ping within 2s")


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


def test_readyz_is_503_while_the_scheduler_does_not_answer():
    scheduler = Silent()
    client = TestClient(create_app(scheduler=scheduler, auth=AuthConfig.disabled()))
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json() == {"status": "unavailable", "scheduler": None,
                             "detail": "the raygang scheduler did not answer ping within 2s"}
    assert scheduler.pings == 1  # asked, not assumed
    healthz = client.get("/healthz")
    assert healthz.status_code == 200 and scheduler.pings == 1  # liveness never asks it


def test_readyz_stays_ready_and_says_so_while_rays_gcs_does_not_answer():
    """The scheduler answers and keeps what it is sent during a GCS outage; it decides
    nothing meanwhile, and /readyz says since when."""
    scheduler = Answers(ready=True)
    client = TestClient(create_app(scheduler=scheduler, auth=AuthConfig.disabled()))
    assert client.get("/readyz").json()["detail"] is None
    unreachable = (1795845575.7, "a small read did not answer within 2 s")

    async def ping() -> dict:
        return {"ready": True, "gangs": 3, "cycles": 7, "unreachable": unreachable}

    scheduler.ping = ping
    answer = client.get("/readyz")
    assert answer.status_code == 200 and answer.json()["status"] == "ready"
    assert answer.json()["detail"] == (
        "Ray's GCS does not answer (since 1795845576: a small read did not answer within "
        "2 s); no scheduling decision until it does")
