"""A search by amount reads its candidates kind by kind (queue and total), skipping the
kinds its filter refuses: it must read exactly the positions, in the same order, that
reading them one by one gives (`Candidates.admitted` over `Pool.positions`)."""

from __future__ import annotations

import random

import pytest

from raygang.core import Capacity, PlacedGang, Resources
from raygang.core.resources import UNIT
from raygang.core.preemption.pool import Pool

from tests.unit.builders import busy, scattered

QUEUES = ["a", "b", "c", "d"]


def _pool(rng: random.Random) -> tuple[Pool, list[PlacedGang], set[str]]:
    nodes = [f"w-{i}: GPU={rng.choice([2, 4, 8])} CPU=16" for i in range(rng.randint(2, 8))]
    free = {f"w-{i}": int(line.split("GPU=")[1].split()[0]) for i, line in enumerate(nodes)}
    running = [PlacedGang(f"r-{g}", rng.choice([10, 100, 500]), where, queue=rng.choice(QUEUES))
               for g, where in scattered(rng, free, rng.randint(0, 24), [1, 1, 2, 3, 4])]
    order = sorted(running, key=lambda g: (g.priority, g.gang_id))
    taken: set[str] = set()
    pool = Pool(order, Capacity(busy(*nodes, placed=running).nodes), taken)
    return pool, order, taken


def _read_both_ways(seed: int) -> int:
    """Four searches of one cycle on a random pool, read both ways; how many positions
    they read."""
    rng = random.Random(seed)
    pool, order, taken = _pool(rng)
    names, read = ("GPU",), 0
    for _ in range(4):  # searches of one cycle, as victims are taken between them
        taken.update(g.gang_id for g in order if rng.random() < 0.2)
        need = rng.choice([1, 2, 4, 8])
        tests = (("fits", (need * UNIT,)),)  # one bundle of `need` GPUs
        largest = {q: rng.choice([0, 1, 2, 3, 4]) for q in QUEUES}
        below = rng.choice([None, None, 100, 500])

        def allowed(gang: PlacedGang) -> bool:  # as `Amounts.alone`: queue and total alone
            return gang.total.units("GPU") <= largest[gang.queue] * UNIT

        candidates = pool.candidates(other_than=rng.sample(QUEUES, rng.randint(0, 2)),
                                     below=below).only(allowed)
        one_by_one = list(candidates.admitted(pool.positions(candidates, names, tests)))
        by_kind = list(pool.admitted_positions(candidates, names, tests))
        assert by_kind == one_by_one, f"seed {seed}"
        read += len(by_kind)
        assert all(allowed(order[i]) and order[i].gang_id not in taken for i in by_kind)
    return read


@pytest.mark.parametrize("seed", range(200))
def test_kind_by_kind_reads_what_one_by_one_reads(seed):
    _read_both_ways(seed)


def test_the_searches_compared_read_candidates():
    assert sum(map(_read_both_ways, range(200))) > 500  # 990 when written


def test_the_kinds_hold_every_member_once_in_order():
    pool, order, _ = _pool(random.Random(7))
    kinds = pool.kinds
    assert sorted(i for at in kinds.values() for i in at) == list(range(len(order)))
    for (queue, total), at in kinds.items():
        assert at == sorted(at)
        assert all(order[i].queue == queue and order[i].total == total for i in at)
    assert Resources(GPU=1, CPU=1) in {total for _, total in kinds}
