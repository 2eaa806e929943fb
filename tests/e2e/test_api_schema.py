"""Schemathesis against the API's own OpenAPI document, on the real server and cluster.

Every operation gets ~15 generated requests (valid and invalid; derandomized, so a run is
reproducible) with the admin token. Each answer must not be a 5xx, must use a status code
the document declares for that operation, and must match the declared response schema.

`PUT /v1/queues/{name}` gets a pass of its own: every generated queue name (in the path,
the body's `name` and `parent`) is moved under the throwaway prefix `st-`, so that no
configured queue is changed or becomes a parent, and the scheduler is put back to the
session's configuration after the module (a restart: queues cannot be deleted).

Left out: `POST /v1/deployments`. Each valid case would deploy a Ray Serve application
(Serve started, then ~3 s per `serve.run` and ~3 s per delete, on a replica process each):
far too slow for ~25 cases on this machine; tests/e2e/test_api_deployments.py
covers its status codes and schema by hand.

Left out too: `POST /v1/jobs`. Each valid case would queue a Ray job whose entrypoint, a
generated string, the Job Submission API then runs as a shell command (seconds each);
tests/e2e/test_jobs_rest.py covers its status codes by hand. The other job routes are in.

Generated valid gangs are really queued (and may run and fail: their entrypoints do not
exist). Afterwards every gang the run left unfinished is cancelled through the API, and
the test waits until no unfinished gang is left.
"""

from __future__ import annotations

import re
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
from raygang.core.spec import NAME_PATTERN
from tests.conftest import SCHEDULER_CONFIG, _scheduler_with

PAGE = 1000
CLEANUP_TIMEOUT_S = 90
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
THROWAWAY = "st-"  # the prefix of the queues the PUT pass may create
SETTINGS = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


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
    .exclude(method="PUT", path="/v1/queues/{name}")  # its own pass, below
    .exclude(method="POST", path="/v1/deployments")  # a Serve application per case
    .exclude(method="POST", path="/v1/jobs")  # a Ray job running a generated command
)
queue_schema = schemathesis.pytest.from_fixture("api_schema").include(
    method="PUT", path="/v1/queues/{name}")


def call_and_validate(case, api_server) -> None:
    headers = {"Authorization": f"Bearer {api_server.token('admin')}"}
    response = case.call(base_url=api_server.url, headers=headers, timeout=60)
    case.validate_response(response, checks=CHECKS, headers=headers)


@schema.parametrize()
@SETTINGS
def test_api_conforms_to_its_openapi_document(case, api_server, gangs_before):
    call_and_validate(case, api_server)


def throwaway(name: object) -> object:
    """A valid queue name moved under the prefix (still valid); anything else as it was,
    to be refused."""
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        return name
    return name if name.startswith(THROWAWAY) else THROWAWAY + name[-(63 - len(THROWAWAY)):]


@pytest.fixture(scope="module")
def queues_restored(api_server):
    """After the module: the session's queue configuration again (the scheduler restarts
    empty: the clean-up test has already cancelled what the generated requests queued)."""
    yield
    _scheduler_with(SCHEDULER_CONFIG)
    with api_server.client("admin") as client:
        names = {q["name"] for q in client.get("/v1/queues").json()}
    assert names == {q.name for q in SCHEDULER_CONFIG.queues}, names


@queue_schema.parametrize()
@SETTINGS
def test_queue_configuration_conforms_to_its_openapi_document(case, api_server, gangs_before,
                                                              queues_restored):
    name = throwaway(case.path_parameters["name"])
    case.path_parameters["name"] = name
    if isinstance(case.body, dict):
        if isinstance(case.body.get("name"), str):
            # the path's name (a mismatch is test_api's 422): otherwise nearly every body
            # generated would be refused before it reaches the scheduler
            case.body["name"] = name
        if isinstance(case.body.get("parent"), str):
            case.body["parent"] = throwaway(case.body["parent"])
    call_and_validate(case, api_server)


def test_the_queue_pass_configured_throwaway_queues_only(api_server, queues_restored):
    """Runs after the PUT pass: it did create queues (the pass was not all 422s), all of
    them throwaway ones; the session's queues are as configured."""
    with api_server.client("admin") as client:
        queues = {q["name"]: q for q in client.get("/v1/queues").json()}
    configured = {q.name: q.model_dump(mode="json") for q in SCHEDULER_CONFIG.queues}
    created = sorted(set(queues) - set(configured))
    print(f"the PUT pass configured {len(created)} throwaway queue(s)")
    assert created and all(name.startswith(THROWAWAY) for name in created), created
    for name, spec in configured.items():
        assert {k: queues[name][k] for k in spec} == spec, queues[name]


def test_schema_run_left_no_gang_unfinished(api_server, gangs_before):
    """Runs after the generated requests (same module): cancel what they queued."""
    with api_server.client("admin") as client:
        queued = [g for g in unfinished_gangs(client) if g["gang_id"] not in gangs_before]
        print(f"the generated requests left {len(queued)} gang(s) unfinished")
        left = cancel_unfinished(client, keep=gangs_before, timeout=CLEANUP_TIMEOUT_S)
    assert not left, f"gangs still unfinished {CLEANUP_TIMEOUT_S} s after cancelling: {left}"
