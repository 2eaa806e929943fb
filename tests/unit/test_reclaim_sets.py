"""Which gangs reclaim may stop is a matter of amounts; the victim order only ranks them
(issue 28, point 4).

A queue runs some amount beyond its quota and fair share (what the walk of its gangs,
most important first, leaves beyond both). Reclaim may take any of the queue's gangs it
may stop, as long as what it takes adds up to no more than that: whenever some such set
of victims makes room for the reclaiming gang, reclaim finds one. Before, the walk alone
decided which gangs could go, whatever room the reclaiming gang needed, and the gangs it
left could sit on nodes where none of them helped.
"""

from __future__ import annotations

import itertools
import random

import pytest

from raygang.core import Capacity, PlacedGang, PolicyConfig, Resources, place, schedule
from raygang.core.fairshare import QueueBook
from raygang.core.preemption.victims import reclaim_protected

from tests.unit.builders import busy, gang, queue, res, running, uniform

NOW = 1000.0


def _teams(order: str = "cheapest") -> PolicyConfig:
    return PolicyConfig(
        queues=[queue("team-x", quota="GPU=2"), queue("team-y", quota="GPU=2")],
        preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0,
                    "reclaim_victim_order": order})


def _spread_services(starts: dict[str, float]):
    """The issue's cluster: a head without GPUs, two workers of 2 GPUs, and team-x's four
    1-GPU services, two on each worker, started at `starts`."""
    where = {"x-1": "w-1", "x-2": "w-1", "x-3": "w-2", "x-4": "w-2"}
    return busy("head: CPU=4", "w-1: GPU=2 CPU=4", "w-2: GPU=2 CPU=4", placed=[
        running(name, f"{node}: GPU=1", queue="team-x", since=starts[name])
        for name, node in where.items()])


TWO_GPUS = [gang("y", "GPU=2", priority="training", queue="team-y")]


@pytest.mark.parametrize("order", ["cheapest", "newest"])
def test_a_queue_below_its_quota_reclaims_two_services_of_one_node(order):
    # The newest services, those beyond team-x's share of 2 by either order, run one on
    # each worker: neither worker frees 2 GPUs with them alone. Taking both services of
    # one worker makes room and leaves team-x at its quota.
    starts = {"x-1": 10.0, "x-3": 20.0, "x-2": 30.0, "x-4": 40.0}
    plan = schedule(_spread_services(starts), TWO_GPUS, _teams(order), NOW)
    assert plan.admitted_ids == ["y"], plan.waiting["y"].message
    [admission] = plan.admissions
    victims = {p.victim for p in plan.preemptions}
    assert admission.action == "reclaim" and len(victims) == 2
    assert victims in ({"x-1", "x-2"}, {"x-3", "x-4"})
    assert set(admission.waits_for) == victims


def test_among_many_gangs_the_search_goes_node_by_node():
    # 150 workers of 2 GPUs, each running two 1-GPU services of team-x: 300 gangs it may
    # stop, too many to search depth first. team-x's share is 298: the two services
    # started last, on two workers, run beyond it. The search takes both services of
    # the first of those workers.
    nodes = uniform(150, "GPU=2", prefix="w-")
    placed = [running(f"x-{i:03d}", f"{nodes[i // 2].split(':')[0]}: GPU=1", queue="team-x",
                      since=float(i)) for i in range(300)]
    placed[-1] = running("x-last", "w-001: GPU=1", queue="team-x", since=1000.0)
    placed[1] = running("x-first", "w-150: GPU=1", queue="team-x", since=0.5)
    config = PolicyConfig(
        queues=[queue("team-x", quota="GPU=150"), queue("team-y", quota="GPU=150")],
        preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0})
    plan = schedule(busy(*nodes, placed=placed), TWO_GPUS, config, 2000.0)
    assert plan.admitted_ids == ["y"], plan.waiting["y"].message
    assert {p.victim for p in plan.preemptions} == {"x-last", "x-000"}
    assert plan.admissions[0].nodes == ("w-001",)


# The property: whenever some set of gangs within the amounts makes room, reclaim finds one
SEEDS = range(400)
OTHERS = ("x", "z")


def _case(seed: int):
    """A small, nearly full cluster: queues x and z run 1- and 2-GPU gangs, beyond their
    quotas or within them; y asks, within its quota, for one gang of one bundle shape
    (placement is then exact: greedy finds room whenever there is some)."""
    rng = random.Random(seed)
    sizes = [rng.choice([2, 4]) for _ in range(rng.randint(2, 4))]
    free = {f"w-{i}": gpus for i, gpus in enumerate(sizes)}
    placed = []
    for g in range(rng.randint(4, 12)):
        where = []
        for _ in range(rng.choice([1, 1, 1, 2])):
            gpus = rng.choice([1, 1, 2])
            room = [n for n, f in free.items() if f >= gpus]
            if not room:
                break
            node = rng.choice(room)
            free[node] -= gpus
            where.append((node, res(f"GPU={gpus} CPU=1")))
        if where:
            placed.append(PlacedGang(
                f"g-{g}", rng.choice([10, 100]), tuple(where),
                queue=rng.choice(("x", "x", "z", "z", "y")), preemptible=rng.random() > 0.1,
                running_since=rng.choice([None, 0.0, 500.0, 900.0, 950.0]),
                draining=rng.random() < 0.05))
    cluster = ["head: CPU=4"] + [f"w-{i}: GPU={gpus} CPU=8" for i, gpus in enumerate(sizes)]
    total = sum(sizes)
    y_quota = total // 2
    y_left = y_quota - sum(g.total.get("GPU") for g in placed if g.queue == "y")
    shapes = [(m, b) for m in (1, 2, 3) for b in (1, 2, 4) if 0 < m * b <= max(1, y_left)]
    m, b = rng.choice(shapes)
    config = PolicyConfig(
        queues=[queue("x", quota=f"GPU={rng.randint(0, total // 2)}", weight=rng.choice([1, 2])),
                queue("y", quota=f"GPU={y_quota}"),
                queue("z", quota=f"GPU={rng.randint(0, total // 4)}")],
        actions=["allocate", "reclaim"],
        preemption={"reclaim_delay_s": 0, "reclaim_min_runtime_s": rng.choice([0, 0, 200]),
                    "reclaim_victim_order": rng.choice(["cheapest", "newest"])})
    pending = gang("want", f"{m}xGPU={b},CPU=1",
                   rng.choice(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]),
                   priority=100, queue="y", config=config)
    return busy(*cluster, placed=placed), pending, config


def _amounts(snapshot, pending, config) -> dict[str, Resources] | None:
    """The rule docs/concepts.md states, by brute force: what reclaim may take from each other queue,
    the gangs beyond its quota and fair share (its walk, most important first) that
    reclaim may stop now, in the resources its quota names (all, where it names none);
    None if y may not reclaim at all (it would go beyond its quota)."""
    book = QueueBook(config.queue_tree, snapshot.placed)
    if not book.within_quota("y", pending.total):
        return None
    book.share_out(snapshot.alive_nodes, [pending])
    kept = reclaim_protected(book, snapshot.placed, config.preemption.reclaim_victim_order,
                             NOW)
    amounts: dict[str, Resources] = {}
    for g in snapshot.placed:
        if g.gang_id not in kept and _stoppable(g, config):
            amounts[g.queue] = amounts.get(g.queue, Resources()) + _counted(g, config)
    return amounts


def _counted(g: PlacedGang, config: PolicyConfig) -> Resources:
    quota = config.queue_tree.specs[g.queue].quota
    return g.total.only(frozenset(quota)) if quota else g.total


def _stoppable(g: PlacedGang, config: PolicyConfig) -> bool:
    least = config.preemption.reclaim_min_runtime_s
    return (g.preemptible and not g.draining and not g.protected(NOW)
            and (least <= 0 or (g.running_since is not None and NOW - g.running_since >= least)))


def _within(victims, amounts, config) -> bool:
    taken: dict[str, Resources] = {}
    for v in victims:
        taken[v.queue] = taken.get(v.queue, Resources()) + _counted(v, config)
    return all(t.fits_in(amounts.get(q, Resources())) for q, t in taken.items())


def _room_by_brute_force(snapshot, pending, config, amounts) -> bool:
    """Whether stopping some set of other queues' gangs within the amounts makes room."""
    others = [g for g in snapshot.placed if g.queue != "y" and g.queue in amounts
              and _stoppable(g, config) and _within([g], amounts, config)]
    capacity = Capacity(snapshot.alive_nodes)
    leaving = [b for g in snapshot.placed if g.draining for b in g.bundles]
    capacity.release(leaving)  # as the cycle reads them: capacity soon free
    for n in range(1, len(others) + 1):
        for victims in itertools.combinations(others, n):
            if not _within(victims, amounts, config):
                continue
            undo = capacity.release(b for v in victims for b in v.bundles)
            fits = place(pending.bundles, pending.strategy, capacity) is not None
            undo()
            if fits:
                return True
    return False


def test_whenever_some_set_within_the_amounts_makes_room_reclaim_finds_one():
    found = 0
    for seed in SEEDS:
        snapshot, pending, config = _case(seed)
        plan = schedule(snapshot, [pending], config, NOW)
        if [a.action for a in plan.admissions] == ["allocate"]:
            continue  # it fits as it is
        amounts = _amounts(snapshot, pending, config)
        room = amounts is not None and _room_by_brute_force(snapshot, pending, config, amounts)
        admitted = [a.action for a in plan.admissions] == ["reclaim"]
        assert admitted == room, (seed, plan.waiting.get("want"))
        if admitted:
            found += 1
            others = {g.gang_id: g for g in snapshot.placed}
            victims = [others[p.victim] for p in plan.preemptions]
            assert all(v.queue != "y" and _stoppable(v, config) for v in victims), seed
            assert _within(victims, amounts, config), (seed, plan.preemptions)
    assert found >= 40  # the cases do reclaim, often
