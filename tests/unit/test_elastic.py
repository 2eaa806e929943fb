"""Elastic gangs in the core: admitted at their minimum, grown on free capacity, shrunk
before any whole gang is stopped, never below their minimum (core/elastic.py, actions
shrink and grow)."""

from __future__ import annotations

import pytest

from raygang.core import PolicyConfig, Resources, Strategy, schedule
from raygang.core.elastic import rebooked
from raygang.core.snapshot import Elastic, PlacedGang
from raygang.core.spec import Resize, RoleSpec, gang_spec
from raygang.core.workload_specs import DeploymentSpec

from tests.unit.builders import busy, gang, queue, res, spec

TWO_NODES = ("w-1: GPU=4 CPU=8", "w-2: GPU=4 CPU=8")
GPU = res("GPU=1")


def elastic(gang_id: str, held: list[str], surplus: int, most: int, *, priority: int = 100,
            queue: str = "default", strategy: Strategy = Strategy.PACK,
            since: float | None = 0.0, leaving: int = 0, **fields: object) -> PlacedGang:
    """A running elastic gang of 1-GPU `worker`s on the nodes `held` (one per member: the
    minimum's, then `surplus` members beyond it, then `leaving` being removed), able to
    grow to `most` members."""
    n = len(held)
    names = [f"worker-{i}" for i in range(most)]
    low = n - surplus - leaving
    return PlacedGang(
        gang_id, priority, tuple((node, GPU) for node in held), queue=queue,
        running_since=since, elastic=Elastic(
            strategy, surplus=tuple(names[low:low + surplus]),
            leaving=tuple(names[low + surplus:n]),
            missing=tuple((name, GPU) for name in names[n:])), **fields)


# The spec ---------------------------------------------------------------------------------
def test_a_role_takes_replicas_as_min_and_max():
    role = RoleSpec(name="worker", replicas=(2, 4), resources={"GPU": 1})
    assert (role.minimum, role.replicas, role.elastic) == (2, 4, True)
    s = spec("e", "GPU=1").model_copy(update={"roles": (role,)})
    assert [slot.index for slot in s.min_slots] == [0, 1]
    assert [slot.index for slot in s.surplus_slots] == [2, 3]
    assert s.min_total == res("GPU=2") and s.total == res("GPU=4")
    assert s.resize is Resize.LIVE
    assert RoleSpec(name="w", replicas=3).elastic is False


@pytest.mark.parametrize("fields, message", [
    ({"replicas": (5, 4)}, "min_replicas: must be at most replicas (4), got 5"),
    ({"replicas": (1, 2, 3)}, "replicas: a count or (min, max)"),
    ({"replicas": (1, 2), "min_replicas": 1}, "both given"),
    ({"replicas": (0, 2)}, "min_replicas"),
])
def test_bad_elastic_roles_are_refused_with_the_field(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gang_spec("gang 'e'", name="e", roles=[{"name": "worker", **fields}])


# Admission at the minimum -------------------------------------------------------------------
def elastic_pending(gang_id: str, low: int, high: int, **kwargs: object):
    g = gang(gang_id, "GPU=1", **kwargs)
    role = RoleSpec(name="worker", replicas=(low, high), resources={"GPU": 1})
    return type(g)(g.gang_id, g.spec.model_copy(update={"roles": (role,)}), g.priority,
                   g.seq, g.preemptible, pending_since=g.pending_since)


def test_an_elastic_gang_is_admitted_at_its_minimum_when_only_that_fits():
    snapshot = busy("w-1: GPU=4 CPU=8 free GPU=2")
    plan = schedule(snapshot, [elastic_pending("e", 2, 4)], PolicyConfig(), now=0.0)
    assert [len(a.nodes) for a in plan.admissions] == [2]


def test_below_its_minimum_it_waits_whole():
    snapshot = busy("w-1: GPU=4 CPU=8 free GPU=1")
    plan = schedule(snapshot, [elastic_pending("e", 2, 4)], PolicyConfig(), now=0.0)
    assert not plan.admissions and "e" in plan.waiting


# Growth -----------------------------------------------------------------------------------
def test_it_grows_on_free_capacity_one_member_at_a_time_and_says_why_it_stops():
    e = elastic("e", ["w-1", "w-1"], surplus=0, most=4)
    snapshot = busy("w-1: GPU=3 CPU=8", placed=[e])
    plan = schedule(snapshot, [], PolicyConfig(), now=100.0)
    [growth] = plan.growths
    assert (growth.gang_id, growth.members, growth.nodes) == ("e", ("worker-2",), ("w-1",))
    assert plan.grow_waits["e"].startswith("runs 3 of at most 4 members")
    assert "no node has GPU 1 free for member worker-3" in plan.grow_waits["e"]


def test_it_grows_to_its_maximum_when_there_is_room():
    e = elastic("e", ["w-1", "w-1"], surplus=0, most=4)
    plan = schedule(busy(*TWO_NODES, placed=[e]), [], PolicyConfig(), now=100.0)
    [growth] = plan.growths
    assert growth.members == ("worker-2", "worker-3") and growth.nodes == ("w-1", "w-1")
    assert "e" not in plan.grow_waits


def test_strict_pack_grows_only_on_its_own_node_and_strict_spread_on_others():
    packed = elastic("p", ["w-1"], surplus=0, most=3, strategy=Strategy.STRICT_PACK)
    other = PlacedGang("o", 100, (("w-1", res("GPU=3")),), running_since=0.0)
    plan = schedule(busy(*TWO_NODES, placed=[packed, other]), [], PolicyConfig(), now=1.0)
    assert plan.growths == () and "STRICT_PACK" in plan.grow_waits["p"]

    spread = elastic("s", ["w-1"], surplus=0, most=3, strategy=Strategy.STRICT_SPREAD)
    plan = schedule(busy(*TWO_NODES, placed=[spread]), [], PolicyConfig(), now=1.0)
    [growth] = plan.growths
    assert growth.nodes == ("w-2",) and "STRICT_SPREAD" in plan.grow_waits["s"]


def test_pending_work_of_its_queue_comes_before_growth():
    e = elastic("e", ["w-1", "w-1"], surplus=0, most=4)
    blocked = gang("big", "GPU=8", "STRICT_PACK")  # fits the cluster, not now
    snapshot = busy("w-1: GPU=4 CPU=8", "w-2: GPU=8 CPU=8 free GPU=6", placed=[e])
    plan = schedule(snapshot, [blocked], PolicyConfig(backfill_lookahead=4), now=1.0)
    assert plan.growths == ()
    assert "pending gangs of queue 'default' come first (gang big waits" in plan.grow_waits["e"]
    # A best-effort line (the default) lets growth take what its blocked gang cannot use
    # now; shrink gives it back once that gang fits (the test of taking back, below).
    assert [g.gang_id for g in schedule(snapshot, [blocked], PolicyConfig(),
                                        now=1.0).growths] == ["e"]


def test_pending_work_of_another_queue_does_not_hold_growth_back():
    config = PolicyConfig(queues=[queue("a"), queue("b")])
    e = elastic("e", ["w-1", "w-1"], surplus=0, most=3, queue="a")
    blocked = gang("big", "GPU=8", "STRICT_PACK", queue="b", config=config)
    snapshot = busy("w-1: GPU=4 CPU=8", "w-2: GPU=8 CPU=8 free GPU=6", placed=[e])
    plan = schedule(snapshot, [blocked], config, now=1.0)
    assert [g.members for g in plan.growths] == [("worker-2",)]


def test_growth_stays_within_the_queue_limit():
    config = PolicyConfig(queues=[queue("a", limit="GPU=3")])
    e = elastic("e", ["w-1", "w-1"], surplus=0, most=4, queue="a")
    plan = schedule(busy(*TWO_NODES, placed=[e]), [], config, now=1.0)
    assert [g.members for g in plan.growths] == [("worker-2",)]
    assert "limit" in plan.grow_waits["e"]


def test_without_the_grow_action_it_stays_at_its_minimum():
    config = PolicyConfig(actions=["allocate", "reclaim", "preempt"])
    e = elastic("e", ["w-1", "w-1"], surplus=0, most=4)
    plan = schedule(busy(*TWO_NODES, placed=[e]), [], config, now=1.0)
    assert plan.growths == ()


def test_a_gang_being_shrunk_does_not_grow():
    e = elastic("e", ["w-1", "w-1", "w-1"], surplus=0, leaving=1, most=4)
    plan = schedule(busy(*TWO_NODES, placed=[e]), [], PolicyConfig(), now=1.0)
    assert plan.growths == () and "being shrunk" in plan.grow_waits["e"]


# Shrinking before stopping anyone whole -------------------------------------------------
def test_a_higher_priority_gang_takes_surplus_and_stops_no_whole_gang():
    e = elastic("e", ["w-1"] * 4, surplus=2, most=4)  # minimum 2, runs 4
    rigid = PlacedGang("r", 100, tuple(("w-2", GPU) for _ in range(4)), running_since=50.0)
    infer = gang("infer", "2xGPU=1", "STRICT_PACK", priority=1000)
    plan = schedule(busy(*TWO_NODES, placed=[e, rigid]), [infer], PolicyConfig(), now=100.0)
    [stop] = plan.preemptions
    assert (stop.victim, stop.members, stop.whole) == ("e", ("worker-2", "worker-3"), False)
    assert stop.reason.startswith("shrunk by 2 surplus member(s)")
    [admission] = plan.admissions
    assert admission.nodes == ("w-1", "w-1")
    assert set(admission.waits_for) == {"e/worker-2", "e/worker-3"}


def test_needing_more_than_the_surplus_a_whole_gang_goes():
    e = elastic("e", ["w-1"] * 4, surplus=2, most=4)
    rigid = PlacedGang("r", 100, tuple(("w-2", GPU) for _ in range(4)), running_since=50.0)
    infer = gang("infer", "4xGPU=1", "STRICT_PACK", priority=1000)
    plan = schedule(busy(*TWO_NODES, placed=[e, rigid]), [infer], PolicyConfig(), now=100.0)
    # e's surplus (2 on w-1) is tried first and is not enough; r, the newest, goes whole,
    # and the surplus it turned out not to need is given back.
    assert [(p.victim, p.whole) for p in plan.preemptions] == [("r", True)]
    assert plan.admissions[0].nodes == ("w-2",) * 4


def test_a_gang_stopped_whole_loses_its_surplus_with_it():
    e = elastic("e", ["w-1"] * 3, surplus=1, most=4)
    infer = gang("infer", "4xGPU=1", "STRICT_PACK", priority=1000)
    plan = schedule(busy("w-1: GPU=4 CPU=8", placed=[e]), [infer], PolicyConfig(), now=100.0)
    [stop] = plan.preemptions
    assert (stop.victim, stop.whole) == ("e", True)
    assert set(plan.admissions[0].waits_for) == {"e", "e/worker-2"}


def test_reclaim_takes_surplus_first():
    config = PolicyConfig(queues=[queue("a", quota="GPU=4"), queue("b", quota="GPU=4")],
                          preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0})
    e = elastic("e", ["w-1"] * 4 + ["w-2"] * 2, surplus=4, most=6, queue="a")  # min 2
    rigid = PlacedGang("r", 100, (("w-2", res("GPU=2")),), queue="a", running_since=90.0)
    b = gang("b", "2xGPU=1", "PACK", queue="b", config=config)
    plan = schedule(busy(*TWO_NODES, placed=[e, rigid]), [b], config, now=100.0)
    [stop] = plan.preemptions
    assert stop.victim == "e" and stop.action == "reclaim" and len(stop.members) == 2


def test_a_pending_gang_of_the_same_queue_takes_back_what_growth_took():
    e = elastic("e", ["w-1"] * 4, surplus=3, most=4)  # minimum 1
    later = gang("later", "2xGPU=1", "STRICT_PACK", priority=100)
    plan = schedule(busy("w-1: GPU=4 CPU=8", placed=[e]), [later], PolicyConfig(), now=100.0)
    [stop] = plan.preemptions
    assert (stop.victim, stop.action, len(stop.members)) == ("e", "shrink", 2)
    assert plan.admissions[0].action == "shrink"


def test_a_lower_priority_gang_of_the_same_queue_does_not_shrink_it():
    e = elastic("e", ["w-1"] * 4, surplus=3, most=4, priority=100)
    low = gang("low", "2xGPU=1", "STRICT_PACK", priority=10)
    plan = schedule(busy("w-1: GPU=4 CPU=8", placed=[e]), [low], PolicyConfig(), now=100.0)
    assert plan.preemptions == () and "low" in plan.waiting


def test_surplus_of_a_non_preemptible_gang_is_borrowed_its_minimum_is_not():
    svc = elastic("svc", ["w-1"] * 4, surplus=2, most=4, priority=1000, preemptible=False)
    top = gang("top", "4xGPU=1", "STRICT_PACK", priority=2000)
    plan = schedule(busy("w-1: GPU=4 CPU=8", placed=[svc]), [top], PolicyConfig(), now=100.0)
    assert plan.admissions == ()  # only 2 could be freed: the minimum stays
    top2 = gang("top2", "2xGPU=1", "STRICT_PACK", priority=2000)
    plan = schedule(busy("w-1: GPU=4 CPU=8", placed=[svc]), [top2], PolicyConfig(), now=100.0)
    [stop] = plan.preemptions
    assert stop.members == ("worker-2", "worker-3")


def test_members_being_removed_are_capacity_a_gang_may_wait_for():
    e = elastic("e", ["w-1"] * 4, surplus=0, leaving=2, most=4)
    nxt = gang("next", "2xGPU=1", "STRICT_PACK", priority=100)
    plan = schedule(busy("w-1: GPU=4 CPU=8", placed=[e]), [nxt], PolicyConfig(), now=100.0)
    [admission] = plan.admissions
    assert plan.preemptions == ()
    assert set(admission.waits_for) == {"e/worker-2", "e/worker-3"}


def test_rigid_gangs_decide_as_before():
    placed = [PlacedGang("r", 10, (("w-1", res("GPU=4")),), running_since=0.0)]
    infer = gang("infer", "4xGPU=1", "STRICT_PACK", priority=1000)
    plan = schedule(busy("w-1: GPU=4 CPU=8", placed=placed), [infer], PolicyConfig(), now=1.0)
    assert [(p.victim, p.whole) for p in plan.preemptions] == [("r", True)]
    assert plan.growths == () and dict(plan.grow_waits) == {}


def test_resources_of_members_sum_to_what_the_gang_holds():
    e = elastic("e", ["w-1", "w-2", "w-2"], surplus=1, most=3)
    assert e.total == Resources(GPU=3)


# A Serve deployment: grows on its own nodes only; the books follow where Serve puts it --------
def test_a_gang_grows_only_within_its_nodes_where_it_has_them():
    held = elastic("d", ["w-2"], surplus=0, most=3)
    confined = PlacedGang("d", 100, held.bundles, running_since=0.0, elastic=Elastic(
        Strategy.SPREAD, missing=held.elastic.missing, within=("w-2",)))
    other = PlacedGang("o", 100, (("w-2", res("GPU=2")),), running_since=0.0)
    plan = schedule(busy(*TWO_NODES, placed=[confined, other]), [], PolicyConfig(), now=1.0)
    [growth] = plan.growths  # SPREAD would go to w-1 first: w-1 is not its node
    assert growth.nodes == ("w-2",)
    assert "no node of its own (it grows on no other) has GPU 1 free for member " \
           "worker-2" in plan.grow_waits["d"]


def test_each_role_of_an_application_grows_on_its_own_role_s_nodes_only():
    """An application's deployments each have a node selector of their role's nodes: a
    prefill replica grows where prefill runs, never on decode's node with room."""
    bundles = (("w-1", GPU), ("w-2", GPU))  # prefill-0 on w-1, decode-0 on w-2
    app = PlacedGang("app", 100, bundles, running_since=0.0, elastic=Elastic(
        Strategy.PACK, missing=(("prefill-1", GPU), ("decode-1", GPU)),
        within=("w-1", "w-2"), roles_within=(("prefill", ("w-1",)), ("decode", ("w-2",)))))
    full = PlacedGang("o", 100, (("w-1", res("GPU=3")),), running_since=0.0)
    plan = schedule(busy(*TWO_NODES, placed=[app, full]), [], PolicyConfig(), now=1.0)
    assert plan.growths == ()  # w-2 has room, but prefill may not grow there
    assert "no node of its own (it grows on no other) has GPU 1 free for member " \
           "prefill-1" in plan.grow_waits["app"]
    roomy = PlacedGang("o", 100, (("w-1", res("GPU=2")),), running_since=0.0)
    plan = schedule(busy(*TWO_NODES, placed=[app, roomy]), [], PolicyConfig(), now=1.0)
    assert [(g.members, g.nodes) for g in plan.growths] == [
        (("prefill-1", "decode-1"), ("w-1", "w-2"))]


@pytest.mark.parametrize("booked, actual, moves", [
    ({"r-0": "a", "r-1": "b"}, ["b", "a"], {}),  # where booked, in any order
    ({"r-0": "a", "r-1": "b", "r-2": "a"}, ["a", "a", "a"], {"r-1": "a"}),
    ({"r-0": "a", "r-1": "a"}, ["b", "c"], {"r-0": "b", "r-1": "c"}),
])
def test_the_books_follow_members_a_library_placed_itself(booked, actual, moves):
    assert rebooked(booked, actual) == moves
    after = {**booked, **moves}
    assert sorted(after.values()) == sorted(actual)


def test_a_deployment_takes_replicas_as_min_and_max():
    d = DeploymentSpec(name="chat", replicas=(1, 3), resources={"GPU": 1})
    assert (d.min_replicas, d.replicas) == (1, 3)
    g = d.gang_spec()
    assert g.elastic and [s.name for s in g.min_slots] == ["replica-0"]
    assert g.resize is Resize.LIVE
    assert not DeploymentSpec(name="chat", replicas=2).gang_spec().elastic
    over_rest = DeploymentSpec.model_validate_json('{"name": "chat", "replicas": [2, 4]}')
    assert (over_rest.min_replicas, over_rest.replicas) == (2, 4)
    with pytest.raises(ValueError, match=r"min_replicas: must be at most replicas \(2\)"):
        DeploymentSpec(name="chat", replicas=2, min_replicas=3)
