"""Topology-aware gangs in the core: the spec's validation, placement by domains of node
labels (required, preferred, segments by rank, a role's own rule), its properties on random
racked clusters, the reasons a gang waits, preemption inside one domain, and scaling."""

from __future__ import annotations

import random

import pytest

from raygang.core import (
    Capacity,
    GangSpec,
    ClusterSnapshot,
    NodeState,
    PendingGang,
    PlacedGang,
    PolicyConfig,
    Resources,
    SpecError,
    Strategy,
    Topology,
    WaitCode,
    place,
    schedule,
    unschedulable_reason,
)
from raygang.core.preemption.check import check
from raygang.core.preemption.plain import searching_plainly
from raygang.core.scale import NodeGroup, ScalePolicy, plan_scale
from raygang.core.topology import broken, pins

from tests.unit.builders import (assignment, busy, capacity, cluster, gang, res, running,
                                 scattered, spec)

# Three racks in two zones, 4 GPUs a node; x-1 has no labels.
RACKS = (
    "a-1: GPU=4 CPU=8 @rack=r1 @zone=z1", "a-2: GPU=4 CPU=8 free GPU=1 @rack=r1 @zone=z1",
    "b-1: GPU=4 CPU=8 @rack=r2 @zone=z1", "b-2: GPU=4 CPU=8 @rack=r2 @zone=z1",
    "c-1: GPU=4 CPU=8 free GPU=2 @rack=r3 @zone=z2",
    "c-2: GPU=4 CPU=8 free GPU=2 @rack=r3 @zone=z2",
)
UNLABELLED = "x-1: GPU=8 CPU=8"


def labels_of(cap: Capacity) -> dict:
    return {n: cap.labels(n) for n in cap.node_ids}


# The spec ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, field, words", [
    ({"topology": {"segment": 4}}, "topology.segment_level", "needed with segment"),
    ({"topology": {"segment_level": "rack"}}, "topology.segment", "needed with segment_level"),
    ({"topology": {}}, "topology", "set at least one of required, preferred, segment"),
    ({"topology": {"required": "rack!"}}, "topology.required", "must be a node label key"),
    ({"topology": {"preferred": "/rack"}}, "topology.preferred", "must be a node label key"),
    ({"topology": {"required": "rack", "preferred": "rack"}}, "topology.preferred",
     "is the required level already"),
    ({"topology": {"required": "rack", "segment": 2, "segment_level": "rack"}},
     "topology.segment_level", "is the required level already"),
    ({"topology": {"segment": 4, "segment_level": "rack"}}, "topology.segment",
     "4 does not divide the 6 members"),
    ({"topology": {"segment": 0, "segment_level": "rack"}}, "topology.segment",
     "greater than or equal to 1"),
    ({"topology": {"required": "rack", "zone": "z1"}}, "topology.zone", "Extra inputs"),
])
def test_bad_topologies_name_the_field(fields, field, words):
    with pytest.raises(SpecError) as error:
        spec("g", "6xGPU=1", **fields)
    assert error.value.problems[0][0] == field, error.value.problems
    assert words in error.value.problems[0][1]


def test_role_topologies_are_checked_against_their_role_and_the_gang():
    roles = [{"name": "p", "replicas": 2, "resources": {"GPU": 1}},
             {"name": "d", "replicas": 3, "resources": {"GPU": 1},
              "topology": {"segment": 2, "segment_level": "nvlink"}}]
    with pytest.raises(SpecError) as error:
        _gang_of(roles)
    assert error.value.problems == [("roles[1].topology.segment", (
        "2 does not divide the 3 members (segments are whole: use a divisor of 3)"))]
    roles[1]["topology"] = {"required": "nvlink"}
    with pytest.raises(SpecError, match=r"roles\[1\].topology: a role cannot have a topology "
                       "of its own when the gang's is cut in segments"):
        _gang_of(roles, topology={"segment": 5, "segment_level": "rack"})
    elastic = [{"name": "w", "replicas": [2, 4], "topology": {"required": "rack"}}]
    with pytest.raises(SpecError, match="not supported with elastic roles yet"):
        _gang_of(elastic)


def _gang_of(roles, **fields):
    from raygang.core import gang_spec

    return gang_spec("gang 'g'", name="g", roles=roles, **fields)


def test_a_topology_round_trips_and_only_gangs_that_ask_have_a_layout():
    s = _gang_of([{"name": "p", "replicas": 2},
                  {"name": "d", "replicas": 4,
                   "topology": Topology(segment=2, segment_level="nv")}],
                 topology={"required": "zone"})
    again = type(s).model_validate_json(s.model_dump_json())
    assert again == s and again.layout == s.layout
    assert s.layout.levels == ("zone", "nv")
    assert [(sp.role, sp.start, sp.stop) for sp in s.layout.roles] == [("d", 2, 6)]
    assert spec("plain", "2xGPU=1").layout is None


# Placement: one table ---------------------------------------------------------------------
PLACEMENTS = [
    # required: the rack with the least free that holds it (bin packing), never x-1
    ("required-least-free-rack", RACKS + (UNLABELLED,), "4xGPU=1", "PACK",
     {"required": "rack"}, "c-1 c-1 c-2 c-2"),
    ("required-five", RACKS + (UNLABELLED,), "5xGPU=1", "PACK", {"required": "rack"},
     "4*a-1 a-2"),
    ("required-not-the-unlabelled-node", RACKS + (UNLABELLED,), "8xGPU=1", "PACK",
     {"required": "rack"}, "4*b-1 4*b-2"),
    ("required-no-rack-has-room", RACKS + (UNLABELLED,), "9xGPU=1", "PACK",
     {"required": "rack"}, None),
    ("strict-spread-in-one-rack", RACKS, "2xGPU=1", "STRICT_SPREAD", {"required": "rack"},
     "c-1 c-2"),
    ("strict-spread-no-rack-of-three", RACKS, "3xGPU=1", "STRICT_SPREAD",
     {"required": "rack"}, None),
    ("strict-pack-on-a-labelled-node", RACKS + (UNLABELLED,), "4xGPU=1", "STRICT_PACK",
     {"required": "rack"}, "4*a-1"),
    ("strict-pack-only-unlabelled-fits", RACKS + (UNLABELLED,), "8xGPU=1", "STRICT_PACK",
     {"required": "rack"}, None),
    # preferred: one rack if one has room (the tightest), else the fewest, roomiest first
    ("preferred-one-rack", RACKS, "6xGPU=1", "PACK", {"preferred": "rack"}, "4*b-1 2*b-2"),
    ("preferred-fewest-racks", RACKS, "12xGPU=1", "PACK", {"preferred": "rack"},
     "4*b-1 4*b-2 4*a-1"),
    ("preferred-never-blocks", RACKS, "17xGPU=1", "PACK", {"preferred": "rack"},
     "4*b-1 4*b-2 4*a-1 a-2 2*c-1 2*c-2"),
    # segments: consecutive ranks, 4 at a time, each inside one rack
    ("segments-of-four", RACKS, "12xGPU=1", "PACK", {"segment": 4, "segment_level": "rack"},
     "4*b-1 4*b-2 4*a-1"),
    ("segments-of-six-no-second-rack", RACKS, "12xGPU=1", "PACK",
     {"segment": 6, "segment_level": "rack"}, None),
    ("zone-then-segments", RACKS, "8xGPU=1", "PACK",
     {"required": "zone", "segment": 4, "segment_level": "rack"}, "4*b-1 4*b-2"),
    ("zone-preferring-racks", RACKS, "6xGPU=1", "PACK",
     {"required": "zone", "preferred": "rack"}, "4*b-1 2*b-2"),
]


@pytest.mark.parametrize("name, nodes, shape, strategy, topology, expected", PLACEMENTS,
                         ids=[row[0] for row in PLACEMENTS])
def test_place_by_topology(name, nodes, shape, strategy, topology, expected):
    s = spec("g", shape, strategy, topology=topology)
    cap = capacity(*nodes)
    before = {n: cap.free(n) for n in cap.node_ids}
    got = place(s.bundles, s.strategy, cap, s.layout)
    assert got == (None if expected is None else assignment(expected))
    assert {n: cap.free(n) for n in cap.node_ids} == before  # left as found
    if got is not None:
        assert broken(s.layout, got, labels_of(cap)) is None


def test_a_role_is_placed_by_its_own_rule_inside_the_gangs():
    s = _gang_of([{"name": "p", "replicas": 2, "resources": {"GPU": 1}},
                  {"name": "d", "replicas": 2, "resources": {"GPU": 2},
                   "topology": {"required": "rack"}}], topology={"required": "zone"})
    cap = capacity(*RACKS)
    got = place(s.bundles, s.strategy, cap, s.layout)
    # zone z1 (z2 has 4 free, the gang needs 6); role d in its tightest rack, r1; the rest
    # where PACK puts it in the zone
    assert got == assignment("b-1 b-1 a-1 a-1")
    assert broken(s.layout, got, labels_of(cap)) is None


def test_pins_fix_the_required_and_segment_levels_only():
    s = _gang_of([{"name": "w", "replicas": 4, "resources": {"GPU": 1}}],
                 topology={"required": "zone", "preferred": "host",
                           "segment": 2, "segment_level": "rack"})
    cap = capacity(*RACKS)
    got = place(s.bundles, s.strategy, cap, s.layout)
    assert pins(s.layout, got, labels_of(cap)) == [
        {"zone": cap.labels(n)["zone"], "rack": cap.labels(n)["rack"]} for n in got]
    assert len({cap.labels(n)["zone"] for n in got}) == 1
    assert pins(None, got, labels_of(cap)) == [{}] * 4


# Properties on random racked clusters -------------------------------------------------------
SEEDS = range(200)


def random_racked(rng: random.Random) -> ClusterSnapshot:
    nodes = []
    for r in range(rng.randint(1, 4)):
        for i in range(rng.randint(1, 4)):
            gpus = rng.choice([2, 4, 8])
            total = Resources(GPU=gpus, CPU=16)
            free = Resources(GPU=rng.choice([0, gpus // 2, gpus, gpus]), CPU=16)
            labels = {} if rng.random() < 0.1 else {"rack": f"r{r}", "zone": f"z{r // 2}"}
            nodes.append(NodeState(f"n{r}{i}", total, free, labels, name=f"n{r}{i}"))
    rng.shuffle(nodes)
    return ClusterSnapshot(tuple(nodes))


def random_topology(rng: random.Random, members: int) -> dict:
    divisors = [d for d in range(1, members + 1) if members % d == 0]
    return rng.choice([
        {"required": "rack"},
        {"preferred": "rack"},
        {"segment": rng.choice(divisors), "segment_level": "rack"},
        {"required": "zone", "segment": rng.choice(divisors), "segment_level": "rack"},
        {"required": "zone", "preferred": "rack"},
        {"preferred": "zone", "segment": rng.choice(divisors), "segment_level": "rack"},
    ])


def _random_gang(rng: random.Random, seed: int):
    members = rng.randint(1, 8)
    topology = random_topology(rng, members)
    strategy = rng.choice(list(Strategy))
    return spec(f"g{seed}", f"{members}xGPU={rng.choice([1, 1, 2])}", strategy,
                topology=topology)


@pytest.mark.parametrize("seed", SEEDS)
def test_placement_keeps_every_rule_and_the_capacity(seed):
    rng = random.Random(seed)
    snapshot = random_racked(rng)
    cap = Capacity(snapshot.alive_nodes)
    s = _random_gang(rng, seed)
    before = {n: cap.free(n) for n in cap.node_ids}
    got = place(s.bundles, s.strategy, cap, s.layout)
    assert {n: cap.free(n) for n in cap.node_ids} == before
    labels = labels_of(cap)
    if got is None:
        return
    assert broken(s.layout, got, labels) is None  # never splits a required domain or segment
    used: dict[str, Resources] = {}
    for node, bundle in zip(got, s.bundles, strict=True):
        used[node] = used.get(node, Resources()) + bundle
    assert all(amount.fits_in(cap.free(n)) for n, amount in used.items())
    if s.strategy is Strategy.STRICT_SPREAD:
        assert len(set(got)) == len(got)
    if s.strategy is Strategy.STRICT_PACK:
        assert len(set(got)) == 1


def _racked_gang(rng: random.Random, topology: dict) -> tuple[Capacity, GangSpec]:
    """A random racked cluster and a gang of 1 to 8 members asking for `topology`."""
    cap = Capacity(random_racked(rng).alive_nodes)
    return cap, spec("g", f"{rng.randint(1, 8)}xGPU={rng.choice([1, 2])}",
                     rng.choice(list(Strategy)), topology=topology)


def _domains(cap: Capacity, level: str) -> list[list[str]]:
    return list(cap.domains(level).values())


@pytest.mark.parametrize("seed", SEEDS)
def test_required_places_exactly_when_some_domain_alone_holds_the_gang(seed):
    rng = random.Random(seed)
    cap, s = _racked_gang(rng, {"required": "rack"})
    some = any(place(s.bundles, s.strategy, cap.subset(ids)) is not None
               for ids in _domains(cap, "rack"))
    assert (place(s.bundles, s.strategy, cap, s.layout) is not None) == some


@pytest.mark.parametrize("seed", SEEDS)
def test_preferred_uses_one_domain_when_one_holds_it_and_never_makes_a_gang_wait(seed):
    rng = random.Random(seed)
    cap, s = _racked_gang(rng, {"preferred": "rack"})
    got = place(s.bundles, s.strategy, cap, s.layout)
    assert (got is None) == (place(s.bundles, s.strategy, cap) is None)
    one = any(place(s.bundles, s.strategy, cap.subset(ids)) is not None
              for ids in _domains(cap, "rack"))
    if one:
        assert len({cap.labels(n).get("rack", n) for n in got}) == 1


@pytest.mark.parametrize("seed", SEEDS)
def test_segments_are_consecutive_ranks_in_one_domain_each(seed):
    rng = random.Random(seed)
    cap = Capacity(random_racked(rng).alive_nodes)
    size = rng.choice([1, 2, 3])
    s = spec("g", f"{size * rng.randint(1, 4)}xGPU=1", rng.choice(["PACK", "SPREAD"]),
             topology={"segment": size, "segment_level": "rack"})
    got = place(s.bundles, s.strategy, cap, s.layout)
    if got is None:
        return
    racks = [cap.labels(n)["rack"] for n in got]
    for start in range(0, len(got), size):
        assert len(set(racks[start:start + size])) == 1, (racks, size)


# The cycle: reasons, preemption inside one domain, fast and plain searches alike ----------
def test_a_gang_waits_when_no_single_rack_has_room_and_says_so():
    snapshot = cluster(RACKS[0], RACKS[1], "b-1: GPU=4 CPU=8 free GPU=2 @rack=r2 @zone=z1",
                       *RACKS[3:])
    g = gang("g", "7xGPU=1", topology={"required": "rack"})
    plan = schedule(snapshot, [g], PolicyConfig(), 0.0)
    waiting = plan.waiting["g"]
    assert waiting.code is WaitCode.NO_FIT
    assert "needs {GPU: 7} within one domain of 'rack'" in waiting.message
    assert "no single rack has room now: free GPU by rack r2: 6 on 2 nodes, r1: 5 on 2 " \
           "nodes, r3: 4 on 2 nodes" in waiting.message
    plain = schedule(snapshot, [gang("p", "7xGPU=1")], PolicyConfig(), 0.0)
    assert [a.gang_id for a in plan.admissions] == [] and plain.admissions  # fits unsplit


def test_segments_that_find_no_domain_say_how_many_fit():
    g = gang("g", "12xGPU=1", topology={"segment": 6, "segment_level": "rack"})
    message = schedule(cluster(*RACKS), [g], PolicyConfig(), 0.0).waiting["g"].message
    assert "needs 2 segments of 6 members ({GPU: 6} each), each within one domain of " \
           "'rack'" in message
    assert "the racks have room for 1 now (r2: 1)" in message


def test_a_gang_no_domain_could_ever_hold_is_unschedulable():
    snapshot = cluster(*RACKS)
    s = spec("g", "12xGPU=1", topology={"required": "rack"})
    reason = unschedulable_reason(s, snapshot)
    assert reason is not None and "no single rack has room" in reason and "empty" in reason
    missing = spec("g", "2xGPU=1", topology={"required": "nvlink"})
    assert "no alive node has that label" in unschedulable_reason(missing, snapshot)
    plan = schedule(snapshot, [gang("g", "12xGPU=1", topology={"required": "rack"})],
                    PolicyConfig(), 0.0)
    assert plan.waiting["g"].code is WaitCode.UNSCHEDULABLE


def test_preemption_frees_one_rack_and_stops_nobody_elsewhere():
    racks = ("a-1: GPU=4 @rack=r1", "a-2: GPU=4 @rack=r1",
             "b-1: GPU=4 @rack=r2", "b-2: GPU=4 @rack=r2")
    low = [running("lo-a", "a-1: 4xGPU=1", priority=10),
           running("lo-b1", "b-1: 2xGPU=1", priority=10),
           running("lo-b2", "b-2: 2xGPU=1", priority=10)]
    snapshot = busy(*racks, placed=low)
    g = gang("hi", "8xGPU=1", priority="inference", topology={"required": "rack"})
    plan = schedule(snapshot, [g], PolicyConfig(), 100.0)
    assert [a.gang_id for a in plan.admissions] == ["hi"]
    (admission,) = plan.admissions
    rack = {snapshot.node(n).labels["rack"] for n in admission.nodes}
    assert len(rack) == 1
    for victim in plan.preemptions:
        held = next(p for p in low if p.gang_id == victim.victim)
        assert {snapshot.node(n).labels["rack"] for n, _ in held.bundles} == rack
    check(plan, snapshot, [g], PolicyConfig())


def _scenario(seed: int):
    rng = random.Random(seed)
    racks = [f"n{r}{i}: GPU=4 CPU=16 @rack=r{r} @zone=z{r // 2}"
             for r in range(rng.randint(2, 4)) for i in range(rng.randint(1, 3))]
    free = {line.split(":")[0]: 4 for line in racks}
    placed: list[PlacedGang] = []
    for g, where in scattered(rng, free, rng.randint(0, 8), [1, 2, 3]):
        placed.append(PlacedGang(f"r-{g}", rng.choice([10, 100, 1000]), where,
                                 running_since=rng.choice([0.0, 50.0]),
                                 preemptible=rng.random() > 0.2))
    config = PolicyConfig()
    classes = {c.name: c for c in config.priority_classes}
    pending = []
    for g in range(rng.randint(1, 4)):
        members = rng.randint(1, 6)
        cls = classes[rng.choice(["inference", "training", "batch"])]
        topology = random_topology(rng, members) if rng.random() < 0.8 else None
        s = spec(f"p-{g}", f"{members}xGPU=1", rng.choice(list(Strategy)), priority=cls.name,
                 topology=topology)
        pending.append(PendingGang(f"p-{g}", s, cls.value, seq=g, preemptible=cls.preemptible))
    return busy(*racks, placed=placed), pending, config


@pytest.mark.parametrize("chunk", range(2))
def test_fast_and_plain_victim_searches_agree_on_topology_gangs(chunk):
    admitted = 0
    for seed in SEEDS[chunk::2]:
        snapshot, pending, config = _scenario(seed)
        fast = schedule(snapshot, pending, config, 100.0)
        with searching_plainly():
            plain = schedule(snapshot, pending, config, 100.0)
        assert fast == plain, f"seed {seed}"
        check(fast, snapshot, pending, config)  # every admission keeps its topology
        admitted += sum(1 for a in fast.admissions if fast.preemptions)
    assert admitted  # some admissions stop others for room in one domain


# Scaling ----------------------------------------------------------------------------------
def test_scaling_counts_a_groups_new_nodes_as_one_domain():
    group = NodeGroup("gpu4", res("GPU=4 CPU=32"), max_nodes=10)
    snapshot = cluster("head: CPU=0", "a-1: GPU=4 CPU=32 free GPU=2 @rack=r1")
    g = gang("g", "8xGPU=1", topology={"required": "rack"})
    plan = plan_scale(snapshot, [g], [group], {}, {}, set(), ScalePolicy(), 0.0)
    # two new nodes in the group's domain, not one beside the 2 GPUs free in r1
    assert plan.waiting_for == {"g": ("gpu4", 2)}


def test_rules_that_each_fit_alone_but_not_together_are_named_together():
    s = _gang_of([{"name": "p", "replicas": 2, "resources": {"GPU": 1}},
                  {"name": "d", "replicas": 2, "resources": {"GPU": 2},
                   "topology": {"required": "nvlink"}}], topology={"required": "zone"})
    snapshot = cluster("a-1: GPU=6 @zone=z1", "b-1: GPU=4 @zone=z2 @nvlink=n1")
    g = PendingGang("g", s, 100, 0)
    message = schedule(snapshot, [g], PolicyConfig(), 0.0).waiting["g"].message
    assert message.endswith("even empty: no placement keeps every topology rule at once "
                            "(required 'zone'; role 'd': required 'nvlink'; PACK, 2×{GPU: 1} "
                            "+ 2×{GPU: 2}), though each alone would fit now"), message


def test_a_gang_pending_beyond_the_sla_is_held_room_inside_one_rack():
    racks = ("a-1: GPU=4 @rack=r1", "a-2: GPU=4 @rack=r1",
             "b-1: GPU=4 @rack=r2", "b-2: GPU=4 @rack=r2")
    snapshot = busy(*racks, placed=[running("x", "a-1: 3xGPU=1"), running("y", "a-2: 3xGPU=1"),
                                    running("z", "b-2: 4xGPU=1")])
    big = gang("big", "3xGPU=2", topology={"required": "rack"}, since=0.0)
    message = schedule(snapshot, [big], PolicyConfig(sla_waiting_time_s=3600.0), 7200.0
                       ).waiting["big"].message
    # Without its rule the closest nodes are b-1 (twice) and a-1, in two racks.
    assert "what frees on nodes b-1, b-2 is held for it" in message, message


def test_a_topology_survives_a_cycle_dump_and_replays_to_its_plan():
    from raygang.core.backlog import Backlog
    from raygang.core.cycle_dump import dump_cycle, load_cycle

    snapshot = cluster(*RACKS)
    backlog = Backlog.of([gang("g", "7xGPU=1", topology={"required": "rack"}),
                          gang("s", "8xGPU=1", topology={"segment": 4,
                                                         "segment_level": "rack"})])
    plan = schedule(snapshot, backlog, PolicyConfig(), 0.0)
    loaded = load_cycle(dump_cycle(snapshot, backlog, PolicyConfig(), 0.0, plan))
    assert loaded.cluster_snapshot() == snapshot
    assert [g.spec.topology for g in loaded.pending().lines["default"]] == [
        g.spec.topology for g in backlog.lines["default"]]
    assert loaded.replay() == plan and plan.admissions
