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
