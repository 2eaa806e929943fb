"""Randomized checks of schedule(): invariants that hold for every cluster and queue.

Each seed builds a small random cluster (some nodes dead, some partly used, custom resources)
and a random queue of gangs (all four strategies, one or two roles, fractional amounts).
"""

from __future__ import annotations

import functools
import random

import pytest

from raygang.core import (
    Capacity,
    ClusterSnapshot,
    NodeState,
    PendingGang,
    Plan,
    Resources,
    PolicyConfig,
    Strategy,
    WaitCode,
    place,
    schedule,
    unschedulable_reason,
)

from tests.unit.builders import per_node, spec

SEEDS = range(250)


def random_cluster(rng: random.Random) -> ClusterSnapshot:
    nodes = []
    for i in range(rng.randint(1, 8)):
        total = {
            "GPU": rng.choice([0, 0, 1, 2, 4, 8]),
            "CPU": rng.choice([2, 4, 8, 16, 32]),
            "memory": rng.choice([0, 16, 64]) * 2**30,
            "accel": rng.choice([0, 0, 0, 1, 2]),
        }
        free = {k: v * rng.choice([0, 0.25, 0.5, 1, 1, 1]) for k, v in total.items()}
        nodes.append(
            NodeState(
                node_id=f"n-{i:02d}",
                total=Resources(total),
                free=Resources(free),
                alive=rng.random() > 0.1,
                name=f"n-{i:02d}",
            )
        )
    rng.shuffle(nodes)
    return ClusterSnapshot(tuple(nodes))


def random_gangs(rng: random.Random) -> list[PendingGang]:
    out = []
    for g in range(rng.randint(1, 15)):
        shape = []
        for _ in range(rng.randint(1, 2)):
            amounts = {
                "GPU": rng.choice([0, 0, 0.5, 1, 1, 2]),
                "CPU": rng.choice([0, 0.5, 1, 2, 4]),
                "memory": rng.choice([0, 0, 0, 4]) * 2**30,
                "accel": rng.choice([0] * 9 + [1]),
            }
            text = ",".join(f"{k}={v}" for k, v in amounts.items() if v) or "CPU=1"
            shape.append(f"{rng.randint(1, 6)}x{text}")
        strategy = rng.choice(list(Strategy))
        gang_id = f"g-{g:02d}"
        out.append(
            PendingGang(
                gang_id,
                spec(gang_id, " + ".join(shape), strategy),
                priority=rng.choice([0, 10, 100]),
                seq=rng.randint(0, 5),  # ties on purpose: the id decides
            )
        )
    return out


LOOKAHEAD = 2  # the bounded mode's PolicyConfig.backfill_lookahead
MODES = {"backfill-off": PolicyConfig(backfill_lookahead=0), "backfill-on": PolicyConfig(backfill=True),
         "lookahead": PolicyConfig(backfill_lookahead=LOOKAHEAD)}


@functools.lru_cache(maxsize=None)
def _case(seed: int, mode: str):
    rng = random.Random(seed)
    snapshot, pending = random_cluster(rng), random_gangs(rng)
    if mode == "lookahead":  # twins too: gangs like an earlier one are set aside untried
        pending += [PendingGang(f"{g.gang_id}-twin", g.spec, g.priority, g.seq + 1)
                    for g in pending if rng.random() < 0.3]
    plan = schedule(snapshot, pending, MODES[mode], float(seed))
    return snapshot, pending, plan


@pytest.mark.parametrize("mode", list(MODES))
def test_invariants(mode):
    for seed in SEEDS:
        snapshot, pending, plan = _case(seed, mode)
        try:
            _check(snapshot, pending, plan, mode == "backfill-on",
                   LOOKAHEAD if mode == "lookahead" else 0)
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, {mode}: {error}") from error


def _check(snapshot: ClusterSnapshot, pending: list[PendingGang], plan: Plan, backfill: bool,
           lookahead: int = 0):
    by_id = {g.gang_id: g for g in pending}
    alive = {n.node_id: n for n in snapshot.nodes if n.alive}
    # The total order, spelled out here rather than taken from PendingGang.order_key.
    order = [g.gang_id for g in sorted(pending, key=lambda g: (-g.priority, g.seq, g.gang_id))]

    # Every gang is decided exactly once; admissions follow the total order.
    assert sorted(plan.admitted_ids + list(plan.waiting)) == sorted(by_id)
    assert len(set(plan.admitted_ids)) == len(plan.admitted_ids)
    assert plan.admitted_ids == [g for g in order if g in set(plan.admitted_ids)]

    # Shape of each admission, then replay: each fits when made; nodes never oversubscribed.
    replay = Capacity(alive.values())
    used: dict[str, Resources] = {}
    for admission in plan.admissions:
        gang = by_id[admission.gang_id]
        nodes = admission.nodes
        assert len(nodes) == len(gang.bundles)
        assert set(nodes) <= set(alive), "admitted onto a dead or unknown node"
        if gang.strategy is Strategy.STRICT_PACK:
            assert len(set(nodes)) == 1
        if gang.strategy is Strategy.STRICT_SPREAD:
            assert len(set(nodes)) == len(nodes)
        if gang.strategy is Strategy.PACK and replay.best_node(gang.spec.total) is not None:
            assert len(set(nodes)) == 1, "PACK split a gang that fits on one node"
        if gang.strategy is Strategy.SPREAD:
            able = sum(1 for n in replay.node_ids if min(gang.bundles, key=_size).fits_in(
                replay.free(n)))
            if able >= len(nodes) and all(b == gang.bundles[0] for b in gang.bundles):
                assert len(set(nodes)) == len(nodes), "SPREAD shared a node it did not have to"
        for node_id, amount in per_node(nodes, gang.bundles).items():
            used[node_id] = used.get(node_id, Resources()) + amount
        replay.reserve(zip(nodes, gang.bundles))
    for node_id, amount in used.items():
        # Subtraction, not fits_in: the check must not share code with what it checks.
        left = alive[node_id].free - amount
        assert left.is_nonnegative(), f"node {node_id} oversubscribed: {left} left"

    # Reasons: codes agree with unschedulable_reason; nothing left waiting fits what is left.
    first_blocked = None
    for gang_id in order:
        if gang_id not in plan.waiting:
            continue
        waiting, gang = plan.waiting[gang_id], by_id[gang_id]
        assert waiting.message
        if waiting.code is WaitCode.BEHIND:
            assert not backfill
            assert first_blocked is not None
            assert f"behind gang {first_blocked}" in waiting.message
            continue
        never = unschedulable_reason(gang.spec, snapshot)
        assert (waiting.code is WaitCode.UNSCHEDULABLE) == (never is not None), waiting
        assert place(gang.bundles, gang.strategy, replay) is None, "a waiting gang fits"
        if waiting.code is WaitCode.NO_FIT and first_blocked is None:
            first_blocked = gang_id
    if lookahead:
        _check_lookahead(order, plan, lookahead)
    elif not backfill and first_blocked is not None:
        later = order[order.index(first_blocked) + 1:]
        assert not set(later) & set(plan.admitted_ids), "admitted past a blocked gang"
        # Behind the blocker every gang is BEHIND, except one that could never fit at
        # all: waiting would not help it, and it says so.
        for g in later:
            never = unschedulable_reason(by_id[g].spec, snapshot) is not None
            expected = WaitCode.UNSCHEDULABLE if never else WaitCode.BEHIND
            assert plan.waiting[g].code is expected, plan.waiting[g]


def _check_lookahead(order: list[str], plan: Plan, lookahead: int) -> None:
    """Bounded backfill: at most `lookahead` + 1 gangs not admitted were looked at (the
    others wait behind the first, or could never fit), and none admitted behind them."""
    behind = [g for g in order if g in plan.waiting and plan.waiting[g].code is WaitCode.BEHIND]
    looked = [g for g in order if g in plan.waiting and plan.waiting[g].code
              not in (WaitCode.BEHIND, WaitCode.UNSCHEDULABLE)]
    assert len(looked) <= lookahead + 1, f"{len(looked)} gangs set aside: {looked}"
    if behind:
        assert len(looked) == lookahead + 1, "the line stopped before its lookahead"
        first = order.index(behind[0])
        assert all(order.index(g) < first for g in looked)
        assert not set(order[first:]) & set(plan.admitted_ids), "admitted past the lookahead"
        for g in behind:
            assert f"behind gang {looked[0]}" in plan.waiting[g].message
    for g in looked:  # a twin set aside says which gang it waits as
        if plan.waiting[g].behind is not None:
            assert plan.waiting[g].message.startswith(
                f"waiting as gang {plan.waiting[g].behind} does")


def _size(bundle: Resources) -> tuple[int, ...]:
    return tuple(bundle.units(n) for n in ("GPU", "accel", "CPU", "memory"))


def test_backfill_off_admits_a_prefix_of_what_backfill_on_admits():
    for seed in SEEDS:
        _, _, off = _case(seed, "backfill-off")
        _, _, on = _case(seed, "backfill-on")
        assert on.admissions[: len(off.admissions)] == off.admissions, seed
        assert len(on.admissions) >= len(off.admissions)


@pytest.mark.parametrize("mode", list(MODES))
def test_deterministic_whatever_the_input_order(mode):
    for seed in range(0, 250, 5):
        snapshot, pending, plan = _case(seed, mode)
        rng = random.Random(-seed)
        nodes, queue = list(snapshot.nodes), list(pending)
        rng.shuffle(nodes)
        rng.shuffle(queue)
        again = schedule(
            ClusterSnapshot(tuple(nodes)), queue, MODES[mode], float(seed)
        )
        assert again == plan, seed


def test_random_cases_exercise_every_outcome():
    # Guard against a generator that only ever produces trivial cases.
    codes, strategies, admitted = set(), set(), 0
    for seed in SEEDS:
        for mode in MODES:
            _, pending, plan = _case(seed, mode)
            codes.update(w.code for w in plan.waiting.values())
            admitted += len(plan.admissions)
            by_id = {g.gang_id: g for g in pending}
            strategies.update(by_id[a.gang_id].strategy for a in plan.admissions)
    assert codes == set(WaitCode) - {WaitCode.LIMIT}  # no limits here: see test_queues
    assert strategies == set(Strategy)
    assert admitted > 500
