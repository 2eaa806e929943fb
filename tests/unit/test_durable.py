"""What a gang record becomes in the store and back (no Ray cluster: pickling only), and
how leftover actor and group names are matched to gangs after a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from raygang.control.durable import dump_gang, dump_queue, load_gang, load_queue
from raygang.control.kinds.deployment import Served
from raygang.control.kinds.job import RayJob
from raygang.control.program import RoleProgram
from raygang.control.records import GangRecord
from raygang.control.status import GangError
from raygang.core.gang import GangState
from raygang.core.queues import QueueSpec
from raygang.core.workload_specs import DeploymentSpec, JobSpec
from raygang.runtime.scheduler.leftovers import gang_of as _gang_of
from tests.unit.builders import spec


def scale(x: int, factor: int = 2) -> int:
    return x * factor


def test_a_gang_record_round_trips_with_its_program_and_history():
    record = GangRecord("train-1a2b3c4d", spec("train", "2xGPU=1"),
                        {"r0": RoleProgram(target=scale, args=(3,), kwargs={"factor": 5})},
                        priority=100, seq=7, submitted_at=1000.0,
                        idempotency_key="team-a:k1", fingerprint="abc")
    record.move(GangState.ADMITTED, "placed on 1 node(s)", 1001.0)
    record.nodes = ("n1", "n1")
    record.error = GangError(member="r0-0", rank=0, error_type="ValueError", message="x")
    back = load_gang(dump_gang(record))
    assert (back.gang_id, back.seq, back.priority, back.state) == \
        ("train-1a2b3c4d", 7, 100, GangState.ADMITTED)
    assert back.spec == record.spec and back.nodes == ("n1", "n1")
    assert back.idempotency_key == "team-a:k1" and back.fingerprint == "abc"
    assert back.error == record.error
    assert [e.to_state for e in back.events] == [GangState.ADMITTED]
    program = back.programs["r0"]
    assert program.target(*program.args, **program.kwargs) == 15  # the code itself came back
    assert not back.live.finished.is_set() and back.live.result_refs is None  # process-only: not kept


def test_a_finished_record_comes_back_finished():
    record = GangRecord("g-00000000", spec("g", "CPU=1"), {}, 10, 0, 0.0)
    record.move(GangState.CANCELLED, "cancelled by user", 5.0)
    back = load_gang(dump_gang(record))
    assert back.state is GangState.CANCELLED and back.live.finished.is_set()


def test_an_unknown_record_format_is_refused():
    from ray import cloudpickle

    with pytest.raises(ValueError, match="gang record format 99, expected 2"):
        load_gang(cloudpickle.dumps({"format": 99}))


DATA = Path(__file__).parent / "data"


def test_records_written_in_format_1_keep_loading():
    """Records of each kind as the code before format 2 wrote them (tests/unit/data, made
    on 2026-11-28): a restarted scheduler of today reads them whole."""
    def load(kind: str) -> GangRecord:
        return load_gang((DATA / f"gang-format1-{kind}.pickle").read_bytes())

    gang = load("gang")
    assert (gang.gang_id, gang.seq, gang.state, gang.nodes) == \
        ("train-1a2b3c4d", 7, GangState.ADMITTED, ("n1", "n1"))
    assert gang.error.error_type == "ValueError" and gang.idempotency_key == "team-a:k1"
    assert gang.programs["r0"].target(*gang.programs["r0"].args) == 3  # len("abc")
    deployment = load("deployment")
    assert deployment.workload == Served(
        DeploymentSpec(name="chat", replicas=2, resources={"GPU": 1}),
        "tests.integration.test_train:app")
    assert (deployment.state, deployment.nodes) == (GangState.RUNNING, ("n1", "n2"))
    job = load("job")
    assert job.workload == RayJob(JobSpec(entrypoint="python train.py", gpus=2,
                                          name="trainjob"), "raygang-trainjob-00000002-1")
    assert (job.restarts, job.status().ray_job_id) == (1, "raygang-trainjob-00000002-1")
    train = load("train")
    assert train.workload == {"controller": "abcd", "group": "ef01"}
    for record in (gang, deployment, job, train):  # and are written in today's format
        assert load_gang(dump_gang(record)).workload == record.workload


def test_the_record_stores_every_field_but_its_wait_and_live_state_and_is_small():
    from dataclasses import fields

    from raygang.control.durable import STORED

    assert set(STORED) == {f.name for f in fields(GangRecord)} - {"wait", "live"}
    assert len(fields(GangRecord)) <= 30  # issue 29: a record of what is, not of all


def test_queues_round_trip():
    queue = QueueSpec(name="team-a", quota={"GPU": 4}, limit={"GPU": 8}, weight=2)
    assert load_queue(dump_queue(queue)) == queue


@pytest.mark.parametrize("name, gang", [
    ("raygang-train-1a2b3c4d", "train-1a2b3c4d"),                      # its placement group
    ("raygang-train-1a2b3c4d-worker-3", "train-1a2b3c4d"),             # a member
    ("raygang-train-1a2b3c4d-param-server-0", "train-1a2b3c4d"),       # a role with a dash
    ("raygang-train-1a2b3c4d-x-1a2b3c4d-w-0", "train-1a2b3c4d-x-1a2b3c4d"),  # longest id wins
    ("raygang-other-99999999-w-0", None),                              # an orphan
])
def test_leftover_names_map_to_their_gang(name, gang):
    known = {"train-1a2b3c4d", "train-1a2b3c4d-x-1a2b3c4d"}
    assert _gang_of(name, known) == gang
