"""What this cycle's victims free is not free until they are gone: whoever takes it waits.

The preemptor is admitted onto its victims' nodes in the same cycle; what they free beyond
its need may go to other gangs, which then wait for those victims too (issue 13, point 4),
so that their status and a dry run say so and their reservation timeout starts only once
the capacity is really free.
"""

from __future__ import annotations

import pytest

from raygang.core import PolicyConfig, schedule
from raygang.core.plan import Admission
from raygang.core.preemption.check import check
from raygang.control.dry_run import dry_run_result
from raygang.control.records import GangRecord

from tests.unit import test_victim_search_equivalence as equivalence
from tests.unit import test_victims_minimal as minimal
from tests.unit.builders import busy, gang, running

CONFIG = PolicyConfig()


def _by_id(plan) -> dict[str, Admission]:
    return {a.gang_id: a for a in plan.admissions}


def test_a_gang_on_what_another_gangs_victim_frees_waits_for_that_victim():
    # One 4-GPU node held by a batch gang; two inference gangs of 2 GPUs each.
    snapshot = busy("w-1: GPU=4", placed=[running("v", "w-1: 4xGPU=1", priority=10)])
    first = gang("i-1", "2xGPU=1", priority="inference", seq=0)
    second = gang("i-2", "2xGPU=1", priority="inference", seq=1)
    plan = schedule(snapshot, [first, second], CONFIG, 100.0)
    admitted = _by_id(plan)
    assert [p.victim for p in plan.preemptions] == ["v"]  # one victim is enough for both
    assert admitted["i-1"].victims == ("v",) and admitted["i-1"].waits_for == ("v",)
    assert admitted["i-2"].victims == () and admitted["i-2"].action == "allocate"
    assert admitted["i-2"].waits_for == ("v",) and admitted["i-2"].waits_for_others == ("v",)


def test_the_preemptor_takes_its_victims_capacity_first_and_leaves_free_gpus_to_others():
    # w-1: 1 GPU free, 2 held by the victim, 1 by a gang of higher priority. i-1 needs 2
    # (it must wait for its victim anyway: it takes the victim's two); i-2, behind it in
    # the queue, then runs on the free GPU at once.
    snapshot = busy("w-1: GPU=4", placed=[running("v", "w-1: 2xGPU=1", priority=10),
                                          running("t", "w-1: GPU=1", priority=500)])
    first = gang("i-1", "2xGPU=1", priority="inference", seq=0)
    second = gang("i-2", "GPU=1", priority="inference", seq=1)
    plan = schedule(snapshot, [first, second], CONFIG, 100.0)
    admitted = _by_id(plan)
    assert admitted["i-1"].waits_for == ("v",)
    assert admitted["i-2"].waits_for == ()


def test_gangs_on_other_nodes_wait_for_nothing():
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", placed=[
        running("v", "w-1: 4xGPU=1", priority=10), running("t", "w-2: 2xGPU=1", priority=500)])
    first = gang("i-1", "2xGPU=1", "STRICT_PACK", priority="inference", seq=0)
    second = gang("i-2", "2xGPU=1", "STRICT_PACK", priority="inference", seq=1)
    third = gang("i-3", "2xGPU=1", "STRICT_PACK", priority="inference", seq=2)
    plan = schedule(snapshot, [first, second, third], CONFIG, 100.0)
    admitted = _by_id(plan)
    assert admitted["i-1"].nodes == ("w-2",) * 2 and admitted["i-1"].waits_for == ()
    assert admitted["i-2"].victims == ("v",)
    assert admitted["i-3"].nodes == ("w-1",) * 2 and admitted["i-3"].waits_for == ("v",)


@pytest.mark.parametrize("generator", [minimal.scenario, equivalence.scenario])
def test_no_admission_takes_a_victims_capacity_without_waiting_for_it(generator):
    # The benchmark's soundness check includes it: per node, what admissions that wait
    # for none of the node's victims take fits in what was free before any was chosen.
    shared = 0
    for seed in range(1500):
        snapshot, pending, config = generator(seed)
        plan = schedule(snapshot, pending, config, 100.0)
        check(plan, snapshot, pending, config)
        shared += sum(1 for a in plan.admissions if a.waits_for_others)
    assert shared  # some gangs did take what another gang's victims freed


def _record(gang_id: str, name: str) -> GangRecord:
    spec = gang(gang_id, "GPU=1").spec.model_copy(update={"name": name})
    return GangRecord(gang_id=gang_id, spec=spec, programs={}, priority=10, seq=0,
                      submitted_at=0.0)


def test_a_dry_run_says_the_gang_would_wait_for_gangs_being_stopped():
    snapshot = busy("w-1: GPU=4", placed=[running("v", "w-1: 4xGPU=1", priority=10)])
    pending = [gang("i-1", "2xGPU=1", priority="inference", seq=0)]
    probe = gang("probe", "2xGPU=1", priority="inference", seq=1)
    plan = schedule(snapshot, [*pending, probe], CONFIG, 100.0)
    answer = dry_run_result(plan, probe, snapshot, {"v": _record("v", "batch-job")})
    assert answer.outcome == "admit"
    assert [(v.gang_id, v.name, v.action) for v in answer.waits_for] == [
        ("v", "batch-job", "preempt")]
    assert "preempted for gang i-1" in answer.waits_for[0].reason
    assert answer.reason == (
        "would be admitted now on w-1, once 1 gang(s) stopping for other gangs or on their "
        "own have stopped (v): it takes capacity they free")
    # Alone, it would preempt the gang itself, and wait for nothing else.
    plan = schedule(snapshot, [probe], CONFIG, 100.0)
    answer = dry_run_result(plan, probe, snapshot, {"v": _record("v", "batch-job")})
    assert answer.outcome == "preempt" and answer.waits_for == []
    assert answer.reason == "would preempt 1 gang(s), then run on w-1"
