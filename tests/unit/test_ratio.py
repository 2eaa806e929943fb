"""Ratio steps (core/ratio.py): the spec's checks, and a gang whose elastic roles grow and
are taken back only in whole steps (grow, shrink, reclaim and preempt)."""

from __future__ import annotations

import random

import pytest

from raygang.core import PolicyConfig, Strategy, schedule
from raygang.core.preemption.check import check
from raygang.core.ratio import role_reasons
from raygang.core.snapshot import Elastic, PlacedGang
from raygang.core.spec import GangSpec, SpecError, gang_spec

from tests.unit.builders import busy, gang, queue


def pd_spec(prefill: object = (1, 5), decode: object = (1, 3), ratio: object = None,
            **fields: object) -> GangSpec:
    """A disaggregated server: prefill members of 1 GPU, decode members of 2 GPUs, growing
    by steps of 2 prefill and 1 decode unless told otherwise."""
    roles = [{"name": "prefill", "replicas": prefill, "resources": {"GPU": 1}},
             {"name": "decode", "replicas": decode, "resources": {"GPU": 2}}]
    roles += fields.pop("roles", [])  # type: ignore[arg-type]
    return gang_spec("gang 'pd'", name="pd", roles=roles,
                     ratio={"prefill": 2, "decode": 1} if ratio is None else ratio, **fields)


def placed(spec: GangSpec, nodes: list[str], surplus: dict[str, str] | None = None, *,
           gang_id: str = "pd", priority: int = 100, queue: str = "default",
           since: float = 0.0) -> PlacedGang:
    """`spec` running: its minimum on `nodes` (one per member), `surplus` (member -> node)
    beyond it, as the control plane's book shows it to a cycle."""
    surplus = surplus or {}
    bundles = tuple(zip(nodes, spec.min_bundles)) + tuple(
        (node, spec.bundle_of(name)) for name, node in surplus.items())
    missing = tuple((s.name, spec.bundles[s.rank]) for s in spec.surplus_slots
                    if s.name not in surplus)
    return PlacedGang(gang_id, priority, bundles, queue=queue, running_since=since,
                      elastic=Elastic(spec.strategy, tuple(surplus), (), missing,
                                      steps=spec.ratio_steps))


STEP_1 = ("prefill-1", "prefill-2", "decode-1")
STEP_2 = ("prefill-3", "prefill-4", "decode-2")


# The spec ---------------------------------------------------------------------------------
def test_a_ratio_cuts_the_surplus_in_steps_in_the_order_they_grow():
    spec = pd_spec(roles=[{"name": "router", "replicas": (1, 3)}])
    assert spec.ratio_steps == (STEP_1, STEP_2)
    assert spec.surplus_units == (STEP_1, STEP_2, ("router-1",), ("router-2",))
    assert [s.name for s in spec.surplus_slots] == [*STEP_1, *STEP_2, "router-1", "router-2"]
    plain = pd_spec(ratio={"prefill": 1})  # by one: prefill's members alone, decode's too
    assert plain.ratio_steps == tuple((f"prefill-{i}",) for i in range(1, 5))


def test_the_surplus_found_running_is_whole_steps_only():
    """What a restarted scheduler books of a gang it adopts, from the members found running
    per role: whole steps, in growth order; a step half there (a resize under way) is not
    booked, and a role's own units count apart from the ratio's."""
    spec = pd_spec(roles=[{"name": "router", "replicas": (1, 3)}])
    names = lambda running: [s.name for s in spec.surplus_running(running)]  # noqa: E731
    assert names({"prefill": 1, "decode": 1, "router": 1}) == []
    assert names({"prefill": 3, "decode": 2, "router": 1}) == list(STEP_1)
    assert names({"prefill": 5, "decode": 2, "router": 2}) == [*STEP_1, "router-1"]
    assert names({"prefill": 4, "decode": 3, "router": 3}) == [*STEP_1, "router-1",
                                                               "router-2"]  # step 2 half
    assert names({"prefill": 5, "decode": 3}) == [*STEP_1, *STEP_2]
    assert names({}) == []


@pytest.mark.parametrize("fields, field, message", [
    ({"ratio": {"encode": 1}}, "ratio",
     "role 'encode' is not one of the gang's roles (they are: prefill, decode)"),
    ({"ratio": {"prefill": 2, "decode": 1}, "decode": 2}, "ratio",
     "role 'decode' is not elastic (replicas=2)"),
    ({"ratio": {"prefill": 3, "decode": 1}}, "ratio",
     "role 'prefill' grows by 3 per step, so its surplus (max 5 - min 1 = 4) must be a "
     "whole number of steps (a multiple of 3)"),
    ({"ratio": {"prefill": 2, "decode": 1}, "decode": (1, 4)}, "ratio",
     "its roles allow different numbers of steps (prefill: 2, decode: 3)"),
    ({"ratio": {"prefill": 0}}, "ratio.prefill", "greater than or equal to 1"),
    ({"ratio": {}}, "ratio", "name at least one elastic role"),
])
def test_a_bad_ratio_is_refused_naming_its_field(fields, field, message):
    with pytest.raises(SpecError) as caught:
        pd_spec(**fields)
    [(path, text)] = caught.value.problems
    assert path == field and message in text, (path, text)


# Growth in whole steps ----------------------------------------------------------------------
def test_it_grows_a_whole_step_at_a_time_and_says_which_resource_a_step_lacks():
    spec = pd_spec()
    pd = placed(spec, ["w-1", "w-1"])  # 3 GPUs; a step takes 2 x 1 + 2 = 4 more
    plan = schedule(busy("w-1: GPU=8 CPU=8", placed=[pd]), [], PolicyConfig(), now=1.0)
    [growth] = plan.growths  # one step of 4 GPUs: 5 were free, 1 is left
    assert growth.members == STEP_1 and growth.nodes == ("w-1",) * 3
    why = plan.grow_waits["pd"]
    assert "runs 5 of at most 8 members" in why
    assert "no room for a whole ratio step of 3 members (prefill-3, prefill-4, decode-2, " \
           "GPU 4 in all): no node has GPU 1 free for member prefill-4" in why


def test_a_step_that_does_not_fit_whole_is_not_half_grown():
    spec = pd_spec()
    pd = placed(spec, ["w-1", "w-1"])
    plan = schedule(busy("w-1: GPU=6 CPU=8", placed=[pd]), [], PolicyConfig(), now=1.0)
    assert plan.growths == ()  # 3 free: both prefill members would fit, the decode not
    assert "no room for a whole ratio step" in plan.grow_waits["pd"]
    unstepped = placed(pd_spec(ratio={"decode": 1}), ["w-1", "w-1"])
    plan = schedule(busy("w-1: GPU=6 CPU=8", placed=[unstepped]), [], PolicyConfig(), now=1.0)
    assert [g.members for g in plan.growths] == [("prefill-1", "prefill-2", "prefill-3")]


def test_a_step_keeps_the_gang_strategy():
    spec = pd_spec(strategy="STRICT_PACK")
    pd = placed(spec, ["w-1", "w-1"])  # w-1 has 3 free, w-2 all 8: the step needs 4 on w-1
    plan = schedule(busy("w-1: GPU=6 CPU=8", "w-2: GPU=8 CPU=8", placed=[pd]), [],
                    PolicyConfig(), now=1.0)
    assert plan.growths == () and "STRICT_PACK" in plan.grow_waits["pd"]
    packed = placed(pd_spec(strategy=Strategy.PACK), ["w-1", "w-1"])
    plan = schedule(busy("w-1: GPU=6 CPU=8", "w-2: GPU=8 CPU=8", placed=[packed]), [],
                    PolicyConfig(), now=1.0)
    assert [g.members for g in plan.growths] == [STEP_1 + STEP_2]


def test_a_step_grows_within_the_queue_limit_whole_or_not_at_all():
    config = PolicyConfig(queues=[queue("a", limit="GPU=6")])
    pd = placed(pd_spec(queue="a"), ["w-1", "w-1"], queue="a")  # 3 used, a step takes 4
    plan = schedule(busy("w-1: GPU=8 CPU=8", placed=[pd]), [], config, now=1.0)
    assert plan.growths == () and "limit" in plan.grow_waits["pd"]


def test_roles_outside_the_ratio_grow_one_member_at_a_time():
    spec = pd_spec(roles=[{"name": "router", "replicas": (1, 3)}])
    pd = placed(spec, ["w-1"] * 3, dict.fromkeys(STEP_1 + STEP_2, "w-1"))  # at its max
    plan = schedule(busy("w-1: GPU=11 CPU=2", placed=[pd]), [], PolicyConfig(),
                    now=1.0)
    [growth] = plan.growths  # one CPU free: one router member, not both
    assert growth.members == ("router-1",)
    assert "member router-2" in plan.grow_waits["pd"]


# Taken back in whole steps ------------------------------------------------------------------
def test_a_pending_gang_of_its_queue_takes_back_a_whole_step():
    spec = pd_spec()
    pd = placed(spec, ["w-1", "w-1"], dict.fromkeys(STEP_1 + STEP_2, "w-1"))  # 11 GPUs
    later = gang("later", "GPU=1", "STRICT_PACK", priority=100)  # a whole step goes for it
    snapshot = busy("w-1: GPU=11 CPU=8", placed=[pd])
    plan = schedule(snapshot, [later], PolicyConfig(), now=100.0)
    check(plan, snapshot, [later], PolicyConfig())
    [stop] = plan.preemptions
    assert stop.action == "shrink" and not stop.whole
    assert len(stop.members) == 3 and set(stop.members) in (set(STEP_1), set(STEP_2))
    assert stop.reason.startswith("shrunk by 3 surplus member(s)")
    [admission] = plan.admissions
    assert set(admission.waits_for) == {f"pd/{m}" for m in stop.members}


def test_preempt_takes_a_whole_step_before_any_whole_gang():
    spec = pd_spec()
    pd = placed(spec, ["w-1", "w-1"], dict.fromkeys(STEP_1, "w-1"))  # 7 GPUs on w-1
    rigid = PlacedGang("r", 10, (("w-2", spec.bundles[0]),) * 4, running_since=90.0)
    infer = gang("infer", "2xGPU=1", "PACK", priority=1000)
    snapshot = busy("w-1: GPU=7 CPU=8", "w-2: GPU=4 CPU=8", placed=[pd, rigid])
    plan = schedule(snapshot, [infer], PolicyConfig(), now=100.0)
    check(plan, snapshot, [infer], PolicyConfig())
    [stop] = plan.preemptions  # r is of lower priority, but surplus goes first
    assert (stop.victim, set(stop.members)) == ("pd", set(STEP_1))


def test_reclaim_takes_a_whole_step():
    config = PolicyConfig(queues=[queue("a", quota="GPU=4"), queue("b", quota="GPU=4")],
                          preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0})
    pd = placed(pd_spec(queue="a"), ["w-1", "w-1"], dict.fromkeys(STEP_1 + STEP_2, "w-1"),
                queue="a")
    b = gang("b", "GPU=1", "PACK", queue="b", priority=100, config=config)
    snapshot = busy("w-1: GPU=11 CPU=8", placed=[pd])
    plan = schedule(snapshot, [b], config, now=100.0)
    check(plan, snapshot, [b], config)
    [stop] = plan.preemptions
    assert stop.action == "reclaim" and len(stop.members) == 3


# Randomized: every growth and every stop moves whole steps -----------------------------------
@pytest.mark.parametrize("seed", range(60))
def test_growth_and_stops_move_whole_steps_whatever_the_cluster(seed):
    rng = random.Random(seed)
    config = PolicyConfig(preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0})
    gpus = {f"w-{i}": rng.choice([4, 8, 8]) for i in range(rng.randint(1, 3))}
    nodes = [f"{name}: GPU={n} CPU=16" for name, n in gpus.items()]

    def where(member: str) -> str:  # a node with room for it (the test is over if none)
        need = 2 if member.startswith("decode") else 1
        name = rng.choice([n for n, free in gpus.items() if free >= need])
        gpus[name] -= need
        return name

    placed_gangs, pending = [], []
    for g in range(rng.randint(1, 3)):
        spec = pd_spec(strategy=rng.choice(list(Strategy)).value)
        steps = [m for step in spec.ratio_steps[:rng.randint(0, 2)] for m in step]
        try:
            nodes_of = [where(s.name) for s in spec.min_slots] + [where(m) for m in steps]
        except IndexError:
            break
        placed_gangs.append(placed(spec, nodes_of[:2], dict(zip(steps, nodes_of[2:])),
                                   gang_id=f"pd{g}", priority=rng.choice([10, 100])))
    for p in range(rng.randint(0, 3)):
        pending.append(gang(f"p{p}", f"{rng.randint(1, 4)}xGPU=1", "PACK",
                            priority=rng.choice([10, 100, 1000])))
    snapshot = busy(*nodes, placed=placed_gangs)
    plan = schedule(snapshot, pending, config, now=100.0)
    check(plan, snapshot, pending, config)  # among its checks: whole steps only
    steps = [set(step) for step in pd_spec().ratio_steps]
    for growth in plan.growths:
        assert all(set(growth.members) & s in (set(), s) for s in steps), growth
    for stop in plan.preemptions:
        assert all(set(stop.members) & s in (set(), s) for s in steps), stop


# Why each role is not larger ----------------------------------------------------------------
def test_each_role_says_why_it_is_not_larger():
    spec = pd_spec(roles=[{"name": "router", "replicas": (1, 3)}])
    role_of = {s.name: s.role for s in spec.slots}
    most = {r.name: r.replicas for r in spec.roles}
    held = {s.name for s in spec.min_slots} | set(STEP_1)
    size = {role: sum(role_of[m] == role for m in held) for role in most}
    why = role_reasons(spec.surplus_units, held, role_of, most, size,
                       "runs 6 of at most 11 members; grows no further now: no room")
    assert why == {"prefill": "no room", "decode": "no room",  # the next step's roles
                   "router": "members grow in order and prefill-3, prefill-4, decode-2 "
                             "come(s) first: no room"}
    full = held | set(STEP_2)
    size = {role: sum(role_of[m] == role for m in full) for role in most}
    why = role_reasons(spec.surplus_units, full, role_of, most, size, None)
    assert why == {"prefill": "at its maximum (5)", "decode": "at its maximum (3)",
                   "router": None}  # growing: no reason
