"""Workload kinds are plug-ins, registered by name on each side (`control.kinds`, the
plane's; `runtime.kinds`, Ray's): lookups, the error for an unknown name, and records of
each kind read back from the store as today's code writes them."""

from __future__ import annotations

import pickle

import pytest

from raygang.control import kinds
from raygang.control.durable import dump_gang, load_gang
from raygang.control.kinds import KINDS, UnknownKindError
from raygang.control.kinds.deployment import Served
from raygang.control.kinds.job import RayJob
from raygang.control.records import GangRecord
from raygang.core.gang import GangState
from raygang.core.workload_specs import DeploymentSpec, JobSpec
from raygang.runtime import kinds as run_kinds
from tests.unit.builders import spec

KNOWN = "known kinds are deployment, gang, job, train, tune"


def test_each_kind_is_registered_by_its_name_on_both_sides():
    assert sorted(KINDS) == sorted(run_kinds.RUN_KINDS) == ["deployment", "gang", "job", "train",
                                                                   "tune"]
    for name in KINDS:
        assert kinds.of(name).name == run_kinds.of(name).name == name


def test_what_each_kind_says_of_itself():
    job, deployment, gang, train, tune = (
        kinds.of(n) for n in ("job", "deployment", "gang", "train", "tune"))
    assert [k.name for k in KINDS.values() if k.ray_job] == ["job"]
    assert [k.name for k in KINDS.values() if not k.elastic] == ["job"]
    assert deployment.display("llm-1a2b3c4d", "llm") == "deployment llm"
    assert job.display("j-1a2b3c4d", "j") == "job j-1a2b3c4d"
    assert deployment.serves_until_stopped and not gang.serves_until_stopped
    assert train.requester({"controller": "abc"}) == "abc" and train.requester(None) is None
    assert gang.requester({"controller": "abc"}) is None
    # A trial's requester is its Tune driver; its history names the trial's group
    assert tune.requester({"controller": "job:01000000"}) == "job:01000000"
    assert tune.phases.starting == "handing the nodes over to the Tune trial's placement group"
    assert job.phases.starting == "submitting the Ray job"


@pytest.mark.parametrize("lookup", [kinds.of, run_kinds.of])
def test_an_unknown_kind_is_refused_naming_the_known_ones(lookup):
    with pytest.raises(UnknownKindError, match=f"unknown kind 'notebook': {KNOWN}"):
        lookup("notebook")


def _stored(kind: str, workload: object) -> dict:
    """A gang record as the store holds it, of `kind` with `workload` (its stored form)."""
    record = GangRecord("j-1a2b3c4d", spec("j", "2xGPU=1"), {}, 100, 3, 10.0)
    data = pickle.loads(dump_gang(record))
    data.update(kind=kind, workload=workload)
    return data


def test_a_stored_job_reads_back_with_its_job_spec_and_its_ray_job():
    job = JobSpec(entrypoint="python train.py", gpus=2, env_vars={"A": "1"})
    data = _stored("job", {"job": job.model_dump(mode="json"), "ray_job_id": "raygang-j-1"})
    back = load_gang(pickle.dumps(data))
    assert back.kind == "job" and back.workload == RayJob(job, "raygang-j-1")
    assert back.status().ray_job_id == "raygang-j-1"
    assert back.status().entrypoint == "python train.py"
    assert pickle.loads(dump_gang(back))["workload"] == data["workload"]  # written the same


def test_a_stored_deployment_reads_back_with_its_spec_and_app():
    deployment = DeploymentSpec(name="chat", replicas=2, resources={"GPU": 1})
    data = _stored("deployment", {"deployment": deployment.model_dump(mode="json"),
                                  "app": "pkg.module:app"})
    back = load_gang(pickle.dumps(data))
    assert back.workload == Served(deployment, "pkg.module:app")
    assert pickle.loads(dump_gang(back))["workload"] == data["workload"]


@pytest.mark.parametrize("kind, workload", [
    ("gang", None), ("train", {"controller": "c0ffee", "group": "pg1"}),
    ("tune", {"controller": "job:01000000", "group": "pg1"}),
])
def test_other_kinds_keep_their_payload_as_it_is(kind, workload):
    back = load_gang(pickle.dumps(_stored(kind, workload)))
    assert (back.kind, back.workload, back.state) == (kind, workload, GangState.PENDING)


def test_a_stored_record_of_an_unknown_kind_is_refused():
    with pytest.raises(UnknownKindError, match=KNOWN):
        load_gang(pickle.dumps(_stored("notebook", None)))


@pytest.mark.parametrize("kind", ["gang", "deployment"])
def test_a_booking_the_cluster_cannot_show_yet_is_marked_unseen(kind):
    """Admitted (its group not placed yet), or a deployment starting (raygang's holds gone,
    Serve's own group not placed yet): runtime/scheduler/observe.py then counts its capacity as used
    in the cluster's view too, so no gang is admitted into it (seen with a preempted gang
    re-admitted into the GPU its preemptor was handing to Serve)."""
    record = GangRecord("g-1a2b3c4d", spec("g", "1xGPU=1"), {}, 100, 3, 10.0)
    record.kind, record.nodes = kind, ("n1",)
    seen = {}
    for state in (GangState.ADMITTED, GangState.RESERVED, GangState.STARTING,
                  GangState.RUNNING):
        record.state = state
        seen[state] = record.placed_view().unseen
    assert seen == {GangState.ADMITTED: True, GangState.RESERVED: False,
                    GangState.STARTING: kind == "deployment", GangState.RUNNING: False}
