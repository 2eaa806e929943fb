"""reclaim and preempt: whole-gang victims, minimal sets, protection, and the reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from raygang.core import PriorityClass, PolicyConfig, WaitCode, schedule

from tests.unit.builders import busy, gang, queue, running

TWO_NODES = ("w-1: GPU=4 CPU=8", "w-2: GPU=4 CPU=8")
LATE = 10_000.0  # long after the gangs here started: past reclaim's minimum runtime


def _teams(a_quota: str, b_quota: str) -> PolicyConfig:
    """Two team queues with these quotas (next to `default`)."""
    return PolicyConfig(queues=[queue("team-a", quota=a_quota),
                                   queue("team-b", quota=b_quota)])


@dataclass
class Case:
    id: str
    running: list
    pending: list
    victims: list[str]  # expected, in the plan's order
    admitted: list[str] = field(default_factory=list)
    nodes: tuple[str, ...] = TWO_NODES
    queues: list = field(default_factory=list)
    now: float = 100.0
    config: dict = field(default_factory=dict)


CASES = [
    Case(
        "minimal-set-lowest-priority-first",
        running=[running("batch-1", "w-1: 2xGPU=1", priority=10),
                 running("train-1", "w-1: 2xGPU=1", priority=100),
                 running("train-2", "w-2: 4xGPU=1", priority=100)],
        pending=[gang("infer", "2xGPU=1", "STRICT_PACK", priority=1000)],
        victims=["batch-1"], admitted=["infer"],
    ),
    Case(
        "gives-back-victims-not-needed",
        # Least important first: b-small (1 GPU on w-1) then b-big (4 GPUs on w-2). Only
        # w-2 can hold 4 on one node, so b-small was taken for nothing and is given back.
        running=[running("b-small", "w-1: GPU=1", priority=10, since=50.0),
                 running("b-big", "w-2: 4xGPU=1", priority=20),
                 running("keep", "w-1: 3xGPU=1", priority=500)],
        pending=[gang("infer", "4xGPU=1", "STRICT_PACK", priority=1000)],
        victims=["b-big"], admitted=["infer"],
    ),
    Case(
        "no-preemption-if-it-would-still-not-fit",
        # 6 GPUs on one node: only w-2 (8) could hold them, but what holds it there may
        # not be preempted; stopping t1 on w-1 (4 GPUs) would free GPUs that do not help
        running=[running("t1", "w-1: 4xGPU=1", priority=10),
                 running("svc", "w-2: 4xGPU=1", priority=10, preemptible=False)],
        pending=[gang("infer", "6xGPU=1", "STRICT_PACK", priority=1000)],
        victims=[], nodes=("w-1: GPU=4 CPU=8", "w-2: GPU=8 CPU=8"),
    ),
    Case(
        "never-equal-or-higher-priority",
        running=[running("t1", "w-1: 4xGPU=1", priority=100),
                 running("t2", "w-2: 4xGPU=1", priority=200)],
        pending=[gang("t3", "GPU=1", priority=100)],
        victims=[],
    ),
    Case(
        "never-a-non-preemptible-gang",
        running=[running("svc", "w-1: 4xGPU=1", priority=10, preemptible=False),
                 running("t2", "w-2: 4xGPU=1", priority=900, preemptible=False)],
        pending=[gang("infer", "GPU=1", priority=1000)],
        victims=[],
    ),
    Case(
        "min-runtime-protects-young-gangs",
        running=[running("young", "w-1: 4xGPU=1", priority=10, since=95.0, min_runtime_s=60),
                 running("old", "w-2: 4xGPU=1", priority=100, since=0.0, min_runtime_s=60)],
        pending=[gang("infer", "GPU=1", priority=1000)],
        victims=["old"], admitted=["infer"],
    ),
    Case(
        "a-gang-not-yet-running-is-protected-by-min-runtime",
        running=[running("starting", "w-1: 4xGPU=1; w-2: 4xGPU=1", priority=10, since=None,
                         min_runtime_s=1)],
        pending=[gang("infer", "GPU=1", priority=1000)],
        victims=[],
    ),
    Case(
        "most-recently-started-first-then-smallest",
        running=[running("old", "w-1: 2xGPU=1", priority=10, since=1.0),
                 running("new-big", "w-1: 2xGPU=1", priority=10, since=9.0),
                 running("new-small", "w-2: GPU=1", priority=10, since=9.0),
                 running("other", "w-2: 3xGPU=1", priority=500)],
        pending=[gang("infer", "GPU=1", priority=1000)],
        victims=["new-small"], admitted=["infer"],
    ),
    # A gang already on its way out (preempted earlier, or ended and being torn down) is
    # not a victim again; its GPUs are about to be free: the preemptor takes them and waits
    # for it (test_a_gang_takes_capacity_of_a_gang_already_leaving) rather than stop t2.
    Case(
        "draining-gangs-are-not-taken-twice-and-their-gpus-are-taken-first",
        running=[running("going", "w-1: 4xGPU=1", priority=10, draining=True),
                 running("t2", "w-2: 4xGPU=1", priority=10)],
        pending=[gang("infer", "2xGPU=1", priority=1000)],
        victims=[], admitted=["infer"],
    ),
    Case(
        "a-draining-gang-is-never-a-victim",
        running=[running("going", "w-1: 4xGPU=1", priority=10, draining=True),
                 running("t2", "w-2: 4xGPU=1", priority=10)],
        pending=[gang("infer", "6xGPU=1", priority=1000)],
        victims=["t2"], admitted=["infer"],
    ),
    Case(
        "training-does-not-preempt-across-queues",
        queues=[queue("a"), queue("b")],
        running=[running("b-batch", "w-1: 4xGPU=1; w-2: 4xGPU=1", priority=10, queue="b")],
        pending=[gang("a-train", "GPU=1", priority="training", queue="a")],
        victims=[],
    ),
    Case(
        "inference-preempts-across-queues",
        queues=[queue("a"), queue("b")],
        running=[running("b-batch", "w-1: 4xGPU=1; w-2: 4xGPU=1", priority=10, queue="b")],
        pending=[gang("a-infer", "GPU=1", priority="inference", queue="a")],
        victims=["b-batch"], admitted=["a-infer"],
    ),
    Case(
        "cross-queue-preemption-can-be-switched-off",
        queues=[queue("a"), queue("b")], config={"cross_queue_preemption": False},
        running=[running("b-batch", "w-1: 4xGPU=1; w-2: 4xGPU=1", priority=10, queue="b")],
        pending=[gang("a-infer", "GPU=1", priority="inference", queue="a")],
        victims=[],
    ),
    Case(
        "same-queue-victim-makes-room-under-the-limit",
        queues=[queue("a", limit="GPU=4")],
        running=[running("low", "w-1: 4xGPU=1", priority=10, queue="a")],
        pending=[gang("high", "2xGPU=1", priority=100, queue="a")],
        victims=["low"], admitted=["high"],
    ),
    Case(
        "preempt-is-off-when-not-configured",
        config={"actions": ("allocate", "reclaim")},
        running=[running("t1", "w-1: 4xGPU=1; w-2: 4xGPU=1", priority=10)],
        pending=[gang("infer", "GPU=1", priority=1000)],
        victims=[],
    ),
]


def run(case: Case):
    config = PolicyConfig(queues=case.queues or [queue("default")], **case.config)
    snapshot = busy(*case.nodes, placed=case.running)
    return schedule(snapshot, case.pending, config, case.now)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_preemption(case: Case):
    plan = run(case)
    assert [p.victim for p in plan.preemptions] == case.victims
    assert plan.admitted_ids == case.admitted
    for admission in plan.admissions:
        assert list(admission.victims) == [p.victim for p in plan.preemptions
                                           if p.preemptor == admission.gang_id]
    if not case.admitted:
        assert all(w.code is not WaitCode.BEHIND for w in plan.waiting.values())


def test_the_plan_says_which_gang_each_preemption_is_for_and_why():
    plan = run(CASES[0])
    (preemption,) = plan.preemptions
    assert (preemption.victim, preemption.preemptor, preemption.action) == (
        "batch-1", "infer", "preempt")
    assert preemption.reason == "preempted for gang infer (priority 1000 > 10)"
    assert plan.admissions[0].action == "preempt"
    assert plan.admissions[0].nodes == ("w-1", "w-1")


def test_victims_resources_go_to_the_preemptor_and_to_nothing_else():
    # After infer takes 2 of batch-1's 4 GPUs, the 2 left over may be used by others in
    # later passes, but never the 2 promised to infer.
    plan = schedule(
        busy(*TWO_NODES, placed=[running("batch-1", "w-1: 4xGPU=1", priority=10),
                                 running("t2", "w-2: 4xGPU=1", priority=100)]),
        [gang("infer", "2xGPU=1", priority=1000, seq=0),
         gang("infer-2", "4xGPU=1", priority=1000, seq=1)],
        PolicyConfig(), 0.0,
    )
    assert [(p.victim, p.preemptor) for p in plan.preemptions] == [
        ("batch-1", "infer"), ("t2", "infer-2")]


@pytest.mark.parametrize("cpu", ["", ",CPU=1"])
def test_reclaim_takes_back_borrowed_capacity_and_never_in_quota_gangs(cpu):
    # team-a: quota 4 but runs 8 GPUs (4 borrowed from team-b's idle quota).
    # team-b submits within its quota: team-a's over-quota gang is reclaimed, not its
    # in-quota one, although both are of the same priority. Quotas name GPUs only: a CPU
    # asked alongside each GPU puts neither team "over quota".
    config = _teams("GPU=4", "GPU=4")
    snapshot = busy(*TWO_NODES, placed=[
        running("a-in", f"w-1: 4xGPU=1{cpu}", queue="team-a", since=1.0),
        running("a-over", f"w-2: 4xGPU=1{cpu}", queue="team-a", since=2.0),
    ])
    pending = [gang("b-1", f"4xGPU=1{cpu}", "STRICT_PACK", priority="training",
                    queue="team-b")]
    plan = schedule(snapshot, pending, config, LATE)
    assert [(p.victim, p.action) for p in plan.preemptions] == [("a-over", "reclaim")]
    assert plan.admissions[0].nodes == ("w-2",) * 4
    assert "queue 'team-b' is below its quota" in plan.preemptions[0].reason


def test_a_gang_asking_nothing_its_quota_names_is_guaranteed_nothing():
    cpu_only = [gang("b-cpu", "CPU=4", priority="training", queue="team-b")]
    full = busy("w-1: GPU=4 CPU=4", placed=[
        running("a-cpu", "w-1: CPU=4", queue="team-a", since=1.0)])
    assert schedule(full, cpu_only, _teams("GPU=4", "GPU=4"), 10.0).preemptions == ()


def test_reclaim_needs_the_queue_to_stay_within_its_quota():
    config = _teams("GPU=4", "GPU=2")
    snapshot = busy(*TWO_NODES, placed=[
        running("a-in", "w-1: 4xGPU=1", queue="team-a"),
        running("a-over", "w-2: 4xGPU=1", queue="team-a"),
    ])
    pending = [gang("b-1", "4xGPU=1", priority="training", queue="team-b")]  # 4 > quota 2
    plan = schedule(snapshot, pending, config, 10.0)
    assert plan.preemptions == () and plan.admissions == ()
    assert plan.waiting["b-1"].code is WaitCode.NO_FIT


def test_reclaim_never_takes_an_in_quota_gang_even_the_one_in_the_way():
    # b-1 needs all of w-1 (STRICT_PACK 8). team-a's a-old runs there within team-a's
    # quota: reclaiming only a-new would not make room, so nothing is reclaimed (the most
    # recently started go first, so without the protection both would be taken).
    config = _teams("GPU=4", "GPU=8")
    snapshot = busy("w-1: GPU=8", "w-2: GPU=4", placed=[
        running("a-old", "w-1: 4xGPU=1", queue="team-a", since=1.0),
        running("a-new", "w-1: 2xGPU=1; w-2: 2xGPU=1", queue="team-a", since=2.0),
    ])
    pending = [gang("b-1", "8xGPU=1", "STRICT_PACK", priority="training", queue="team-b")]
    plan = schedule(snapshot, pending, config, LATE)
    assert plan.preemptions == () and plan.admissions == ()
    assert "reclaiming what other queues borrowed beyond their quota and fair share would " \
           "not make room" in plan.waiting["b-1"].message


def test_reclaim_takes_from_the_queue_over_its_fair_share():
    # 16 GPUs. Fair shares with b's demand: a 4 (quota 2 + weight 3 of the surplus),
    # b 2, c 10. a runs exactly its fair share; c runs 12: c gives back, not a, although
    # a2 is the most recently started gang beyond a quota.
    config = PolicyConfig(queues=[queue("a", quota="GPU=2", weight=3),
                                     queue("b", quota="GPU=6"), queue("c", quota="GPU=4")])
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=4", "w-4: GPU=4", placed=[
        running("a1", "w-1: 2xGPU=1", queue="a", since=1.0),
        running("a2", "w-1: 2xGPU=1", queue="a", since=9.0),
        running("c1", "w-2: 4xGPU=1", queue="c", since=1.0),
        running("c2", "w-3: 4xGPU=1", queue="c", since=2.0),
        running("c3", "w-4: 4xGPU=1", queue="c", since=3.0),
    ])
    plan = schedule(snapshot, [gang("b-1", "2xGPU=1", priority="training", queue="b")],
                    config, LATE)
    assert [(p.victim, p.action) for p in plan.preemptions] == [("c3", "reclaim")]
    assert "beyond its own quota and fair share" in plan.preemptions[0].reason


@pytest.mark.parametrize("other_quota, admitted", [("GPU=6", False), ("GPU=4", True), ("", True)])
def test_non_preemptible_gangs_borrow_only_what_no_queue_is_guaranteed(other_quota, admitted):
    # Reclaim never stops an inference gang: were it to run on GPUs guaranteed to
    # team-b, team-b could not have them back. 8 GPUs: quotas 2 + 6 leave nothing beyond
    # quotas; 2 + 4 leave 2, enough for team-a's 2 GPUs beyond its quota.
    config = _teams("GPU=2", other_quota)
    big = gang("infer-4", "4xGPU=1", priority="inference", queue="team-a")
    plan = schedule(busy(*TWO_NODES), [big], config, 0.0)
    assert (plan.admitted_ids == ["infer-4"]) is admitted
    if not admitted:
        waiting = plan.waiting["infer-4"]
        assert waiting.code is WaitCode.LIMIT
        assert waiting.message == (
            "queue 'team-a' would run 4 GPU in gangs of non-preemptible classes, beyond its "
            "quota of 2: those run beyond a quota only on capacity no queue is guaranteed, "
            "and other queues hold 6 of the cluster's 8 GPU (their quotas, or such gangs "
            "beyond them)")
    # Within its quota it runs, preempting another queue's batch gangs to do so.
    full = busy(*TWO_NODES, placed=[
        running(f"b-{i}", f"w-{1 + i // 2}: 2xGPU=1", priority=10, queue="team-b",
                since=float(i)) for i in range(4)])
    small = gang("infer-2", "2xGPU=1", priority="inference", queue="team-a")
    plan = schedule(full, [small], config, 100.0)
    assert plan.admitted_ids == ["infer-2"]
    assert [p.victim for p in plan.preemptions] == ["b-3"]
    # And beyond it, not even by preempting.
    plan = schedule(full, [big], config, 100.0)
    assert (plan.admitted_ids == ["infer-4"]) is admitted
    assert (len(plan.preemptions) == 2) is admitted


def test_gangs_reclaim_cannot_stop_hold_their_queues_quota_first():
    # a-infer (non-preemptible, though of low priority) can never be reclaimed, so it
    # counts first toward team-a's quota of 4: with a-t2 that is 4, and a-t1 is beyond.
    config = _teams("GPU=4", "GPU=4")
    snapshot = busy(*TWO_NODES, placed=[
        running("a-t1", "w-1: 4xGPU=1", queue="team-a", since=1.0),
        running("a-infer", "w-2: 2xGPU=1", priority=50, queue="team-a", since=5.0,
                preemptible=False),
        running("a-t2", "w-2: 2xGPU=1", queue="team-a", since=2.0),
    ])
    pending = [gang("b-1", "4xGPU=1", "STRICT_PACK", priority="training", queue="team-b")]
    plan = schedule(snapshot, pending, config, LATE)
    assert [(p.victim, p.action) for p in plan.preemptions] == [("a-t1", "reclaim")]
    assert plan.admissions[0].nodes == ("w-1",) * 4


def test_equal_inputs_give_equal_plans():
    case = CASES[1]
    assert run(case) == run(case)


def test_min_runtime_comes_from_the_priority_class():
    config = PolicyConfig(priority_classes=(
        PriorityClass(name="inference", value=1000, preemptible=False),
        PriorityClass(name="training", value=100, min_runtime_s=600),
    ))
    assert config.priority_class(gang("g", "GPU=1", priority="training").spec).min_runtime_s == 600


def test_the_reason_says_when_preemption_would_not_help():
    case = next(c for c in CASES if c.id == "never-equal-or-higher-priority")
    message = run(case).waiting["t3"].message
    assert message.startswith("needs {GPU: 1} in all (PACK")
    assert message.endswith("; no lower-priority preemptible gang runs that it may preempt")
    case = next(c for c in CASES if c.id == "no-preemption-if-it-would-still-not-fit")
    message = run(case).waiting["infer"].message
    assert message.startswith("needs {GPU: 6} on one node (STRICT_PACK")
    assert message.endswith("; preempting lower-priority gangs would not make room")


def test_a_gang_takes_capacity_of_a_gang_already_leaving_and_waits_for_it():
    plan = schedule(
        busy(*TWO_NODES, placed=[running("going", "w-1: 4xGPU=1", priority=10,
                                         draining=True),
                                 running("t2", "w-2: 4xGPU=1", priority=10)]),
        [gang("infer", "2xGPU=1", priority=1000)], PolicyConfig(), now=100.0)
    (admission,) = plan.admissions
    assert admission.nodes == ("w-1", "w-1") and admission.action == "allocate"
    assert admission.waits_for == ("going",) and not plan.preemptions

