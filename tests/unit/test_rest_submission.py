"""A gang sent over REST is the spec it says: every role field reaches the scheduler."""

from __future__ import annotations

from raygang.core.spec import RoleSpec
from raygang.server.models import GangSubmission


def test_an_elastic_role_sent_over_rest_stays_elastic():
    body = {"name": "dp", "resize": "restart", "roles": [
        {"name": "w", "replicas": [1, 3], "resources": {"GPU": 1},
         "entrypoint": "raygang.demo:sleep", "args": [1]},
        {"name": "ps", "replicas": 2, "min_replicas": 1, "after": ["w"],
         "entrypoint": "raygang.demo:sleep"}]}
    spec = GangSubmission.model_validate(body).gang_spec()
    w, ps = spec.roles
    assert (w.minimum, w.replicas, ps.minimum, ps.replicas, ps.after) == (1, 3, 1, 2, ("w",))
    assert spec.elastic and spec.resize.value == "restart"
    # Nothing of RoleSpec is dropped on the way.
    submitted = GangSubmission.model_validate(body).roles[0]
    assert {k: getattr(w, k) for k in RoleSpec.model_fields} == {
        k: getattr(submitted, k) for k in RoleSpec.model_fields}


def test_a_topology_sent_over_rest_reaches_the_spec_of_the_gang_and_of_its_roles():
    body = {"name": "tp", "topology": {"required": "zone", "preferred": "rack"}, "roles": [
        {"name": "w", "replicas": 4, "resources": {"GPU": 1},
         "topology": {"segment": 2, "segment_level": "nvlink"},
         "entrypoint": "raygang.demo:sleep"}]}
    spec = GangSubmission.model_validate(body).gang_spec()
    assert spec.topology is not None and spec.topology.preferred == "rack"
    assert spec.roles[0].topology is not None and spec.roles[0].topology.segment == 2
    assert spec.layout is not None and spec.layout.levels == ("zone", "nvlink")


def test_a_bad_topology_over_rest_is_a_422_naming_the_field():
    from fastapi.testclient import TestClient

    from raygang.server.app import create_app
    from raygang.server.auth import AuthConfig

    app = create_app(scheduler=object(), auth=AuthConfig.disabled())  # type: ignore[arg-type]
    client = TestClient(app)  # (422s never reach the scheduler)
    role = {"name": "w", "replicas": 3, "entrypoint": "raygang.demo:sleep"}
    for body, field, words in [
        ({"topology": {"required": "a rack"}}, "topology.required", "node label key"),
        ({"topology": {"segment": 2, "segment_level": "rack"}}, "topology.segment",
         "2 does not divide the 3 members"),
        ({"roles": [{**role, "topology": {"segment": 2}}]}, "roles[0].topology.segment_level",
         "needed with segment"),
    ]:
        answer = client.post("/v1/gangs", json={"name": "tp", "roles": [role], **body})
        assert answer.status_code == 422, answer.text
        errors = answer.json()["errors"]
        assert any(e["field"] == field and words in e["message"] for e in errors), errors


def test_a_ratio_sent_over_rest_reaches_the_spec_and_a_bad_one_is_a_422():
    from fastapi.testclient import TestClient

    from raygang.server.app import create_app
    from raygang.server.auth import AuthConfig

    roles = [{"name": "prefill", "replicas": [1, 5], "entrypoint": "raygang.demo:sleep"},
             {"name": "decode", "replicas": [1, 3], "entrypoint": "raygang.demo:sleep"}]
    body = {"name": "pd", "roles": roles, "ratio": {"prefill": 2, "decode": 1}}
    spec = GangSubmission.model_validate(body).gang_spec()
    assert spec.ratio == {"prefill": 2, "decode": 1} and len(spec.ratio_steps) == 2
    app = create_app(scheduler=object(), auth=AuthConfig.disabled())  # type: ignore[arg-type]
    answer = TestClient(app).post("/v1/gangs", json={**body, "ratio": {"prefill": 3}})
    assert answer.status_code == 422, answer.text
    errors = answer.json()["errors"]
    assert any(e["field"] == "ratio" and "grows by 3 per step" in e["message"]
               for e in errors), errors
