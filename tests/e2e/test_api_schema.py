"""Schemathesis against the API's own OpenAPI document, on the real server and cluster.

Every operation gets ~25 generated requests (valid and invalid; derandomized, so a run is
reproducible) with the admin token. Each answer must not be a 5xx, must use a status code
the document declares for that operation, and must match the declared response schema.

Left out, because they change shared state that other tests of the session rely on:
- `PUT /v1/queues/{name}`: it would rewrite the scheduler's queue configuration;
- `POST /v1/deployments`: it would start Ray Serve (port 8000) inside the shared cluster.

Generated valid gangs are really queued (and may run and fail: their entrypoints do not
exist). Afterwards every gang the run left unfinished is cancelled through the API, and
the test waits until no unfinished gang is left.
"""

from __future__ import annotations

import time

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from raygang.core.gang import GangState

PAGE = 1000
CLEANUP_TIMEOUT_S = 90
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


def unfinished_gangs(client: httpx.Client) -> list[dict]:
    """Every gang (of every queue: the admin token sees all) not yet finished."""
    found, offset = [], 0
    while offset is not None:
        page = client.get("/v1/gangs", params={"offset": offset, "limit": PAGE})
        page.raise_for_status()
        body = page.json()
        found += [g for g in body["items"] if not GangState(g["state"]).finished]
        offset = body["next_offset"]
    return found


def cancel_unfinished(client: httpx.Client, keep: set[str], timeout: float) -> list[str]:
    """Cancel every unfinished gang not in `keep` until none is left; returns the ids of
    those still unfinished after `timeout` (empty when clean)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [g["gang_id"] for g in unfinished_gangs(client) if g["gang_id"] not in keep]
        if not left or time.monotonic() > deadline:
            return left
        for gang_id in left:
            answer = client.delete(f"/v1/gangs/{gang_id}")
            # 404: forgotten meanwhile; 409: it finished by itself meanwhile.
            assert answer.status_code in (200, 404, 409), (gang_id, answer.text)
        time.sleep(0.2)


@pytest.fixture(scope="module")
def api_schema(api_server):
    return schemathesis.openapi.from_url(f"{api_server.url}/openapi.json")


@pytest.fixture(scope="module")
def gangs_before(api_server) -> set[str]:
    """Gangs unfinished before the run (none, normally): the clean-up leaves them alone."""
    with api_server.client("admin") as client:
        return {g["gang_id"] for g in unfinished_gangs(client)}


schema = (
    schemathesis.pytest.from_fixture("api_schema")
    .exclude(method="PUT", path="/v1/queues/{name}")  # rewrites the scheduler's queues
    .exclude(method="POST", path="/v1/deployments")  # would start Ray Serve on :8000
)


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_api_conforms_to_its_openapi_document(case, api_server, gangs_before):
    headers = {"Authorization": f"Bearer {api_server.token('admin')}"}
    response = case.call(base_url=api_server.url, headers=headers, timeout=60)
    case.validate_response(response, checks=CHECKS, headers=headers)


def test_schema_run_left_no_gang_unfinished(api_server, gangs_before):
    """Runs after the generated requests (same module): cancel what they queued."""
    with api_server.client("admin") as client:
        queued = [g for g in unfinished_gangs(client) if g["gang_id"] not in gangs_before]
        print(f"the generated requests left {len(queued)} gang(s) unfinished")
        left = cancel_unfinished(client, keep=gangs_before, timeout=CLEANUP_TIMEOUT_S)
    assert not left, f"gangs still unfinished {CLEANUP_TIMEOUT_S} s after cancelling: {left}"
