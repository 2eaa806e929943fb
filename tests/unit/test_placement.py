"""place(): one table of topologies per strategy, plus determinism and no side effects."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest

from raygang.core import Capacity, Strategy, place
from raygang.core.placement import largest_first

from tests.unit.builders import assignment, bundles, capacity, class_map, cluster, free_map, res


@dataclass(frozen=True)
class Case:
    name: str
    nodes: tuple[str, ...]
    shape: str  # bundles, see builders.roles
    strategy: str
    expected: str | None  # node per bundle in rank order (builders.assignment), None: no fit

    def __str__(self) -> str:
        return self.name


def _cases(*rows) -> list:
    return [pytest.param(Case(*row), id=row[0]) for row in rows]


STRICT_PACK = _cases(
    ("best-fit-smallest-node", ("w-1: GPU=8", "w-2: GPU=4", "w-3: GPU=2"), "2xGPU=1",
     "STRICT_PACK", "w-3 w-3"),
    ("best-fit-middle", ("w-1: GPU=8", "w-2: GPU=4", "w-3: GPU=2"), "3xGPU=1",
     "STRICT_PACK", "3*w-2"),
    ("only-the-big-node", ("w-1: GPU=8", "w-2: GPU=4", "w-3: GPU=2"), "5xGPU=1",
     "STRICT_PACK", "5*w-1"),
    ("too-big-for-any-node", ("w-1: GPU=8", "w-2: GPU=8"), "9xGPU=1", "STRICT_PACK", None),
    ("tie-lowest-id", ("w-2: GPU=4", "w-1: GPU=4", "w-3: GPU=4"), "4xGPU=1",
     "STRICT_PACK", "4*w-1"),
    ("uses-free-not-total", ("w-1: GPU=8 free GPU=1", "w-2: GPU=4 free GPU=2"), "2xGPU=1",
     "STRICT_PACK", "w-2 w-2"),
    ("heterogeneous-roles", ("w-1: GPU=8 CPU=4", "w-2: GPU=4 CPU=16"), "CPU=8 + 4xGPU=1,CPU=1",
     "STRICT_PACK", "5*w-2"),
    ("cpu-bound-elsewhere", ("w-1: GPU=8 CPU=4", "w-2: GPU=4 CPU=4"), "CPU=4 + 4xGPU=1,CPU=1",
     "STRICT_PACK", None),
    ("fractional", ("w-1: GPU=1", "w-2: GPU=2"), "3xGPU=0.3 + GPU=0.1", "STRICT_PACK", "4*w-1"),
)

STRICT_SPREAD = _cases(
    ("distinct-best-fit", ("w-1: GPU=8", "w-2: GPU=4", "w-3: GPU=2", "w-4: GPU=1"), "3xGPU=1",
     "STRICT_SPREAD", "w-4 w-3 w-2"),
    ("needs-more-nodes", ("w-1: GPU=8", "w-2: GPU=8", "w-3: GPU=8"), "4xGPU=1",
     "STRICT_SPREAD", None),
    ("exactly-enough-nodes", ("w-1: GPU=8", "w-2: GPU=8", "w-3: GPU=8"), "3xGPU=1",
     "STRICT_SPREAD", "w-1 w-2 w-3"),
    ("largest-bundle-first", ("w-1: GPU=4", "w-2: GPU=1"), "GPU=1 + GPU=4",
     "STRICT_SPREAD", "w-2 w-1"),
    ("one-node-too-small", ("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=1"), "3xGPU=2",
     "STRICT_SPREAD", None),
    ("single-bundle", ("w-1: GPU=4", "w-2: GPU=1"), "GPU=1", "STRICT_SPREAD", "w-2"),
)

PACK = _cases(
    ("one-node-best-fit", ("w-1: GPU=8", "w-2: GPU=4"), "4xGPU=1", "PACK", "4*w-2"),
    ("one-node-when-possible", ("w-1: GPU=8", "w-2: GPU=4", "w-3: GPU=4"), "6xGPU=1",
     "PACK", "6*w-1"),
    ("fewest-nodes-then-best-fit", ("w-1: GPU=8", "w-2: GPU=4", "w-3: GPU=2"), "10xGPU=1",
     "PACK", "8*w-1 2*w-3"),
    ("two-nodes", ("w-1: GPU=8", "w-2: GPU=4", "w-3: GPU=4"), "12xGPU=1",
     "PACK", "8*w-1 4*w-2"),
    ("whole-cluster", ("w-1: GPU=2", "w-2: GPU=2", "w-3: GPU=2"), "6xGPU=1",
     "PACK", "w-1 w-1 w-2 w-2 w-3 w-3"),
    ("more-than-the-cluster", ("w-1: GPU=2", "w-2: GPU=2"), "5xGPU=1", "PACK", None),
    ("fragmented", ("w-1: GPU=3", "w-2: GPU=1"), "2xGPU=2", "PACK", None),
    ("heterogeneous", ("w-1: GPU=4 CPU=4", "w-2: GPU=4 CPU=4"), "CPU=4 + 4xGPU=1,CPU=1",
     "PACK", "w-2 4*w-1"),
)

SPREAD = _cases(
    ("distinct-when-possible", ("w-1: GPU=8", "w-2: GPU=8", "w-3: GPU=8"), "3xGPU=1",
     "SPREAD", "w-1 w-2 w-3"),
    ("distinct-best-fit", ("w-1: GPU=8", "w-2: GPU=2", "w-3: GPU=4"), "2xGPU=1",
     "SPREAD", "w-2 w-3"),
    ("shares-only-where-it-fits", ("w-1: GPU=8", "w-2: GPU=2"), "2xGPU=4", "SPREAD", "w-1 w-1"),
    ("no-fit", ("w-1: GPU=4", "w-2: GPU=2"), "2xGPU=4", "SPREAD", None),
    ("single-node-cluster", ("w-1: GPU=8",), "3xGPU=2", "SPREAD", "3*w-1"),
)


@pytest.mark.parametrize("case", STRICT_PACK + STRICT_SPREAD + PACK + SPREAD)
def test_place(case: Case):
    cap = capacity(*case.nodes)
    got = place(bundles(case.shape), Strategy(case.strategy), cap)
    assert got == (None if case.expected is None else assignment(case.expected))


@pytest.mark.parametrize("case", STRICT_PACK + STRICT_SPREAD + PACK + SPREAD)
def test_place_leaves_capacity_unchanged(case: Case):
    cap = capacity(*case.nodes)
    free, classes = free_map(cap), class_map(cap)
    place(bundles(case.shape), Strategy(case.strategy), cap)
    assert free_map(cap) == free
    assert class_map(cap) == classes


@pytest.mark.parametrize("case", STRICT_PACK + STRICT_SPREAD + PACK + SPREAD)
def test_place_ignores_node_order(case: Case):
    expected = place(bundles(case.shape), Strategy(case.strategy), capacity(*case.nodes))
    for seed in range(5):
        shuffled = list(case.nodes)
        random.Random(seed).shuffle(shuffled)
        assert place(bundles(case.shape), Strategy(case.strategy), capacity(*shuffled)) == expected


@pytest.mark.parametrize("strategy", list(Strategy))
def test_same_input_same_output(strategy):
    nodes = [f"w-{i:02d}: GPU={i % 9} CPU={4 + i % 3 * 4}" for i in range(1, 30)]
    shape = "CPU=1 + 3xGPU=1,CPU=1 + 2xGPU=2"
    results = {place(bundles(shape), strategy, capacity(*nodes)) for _ in range(5)}
    assert len(results) == 1
    assert results.pop() is not None


@pytest.mark.parametrize("strategy", list(Strategy))
def test_non_gpu_work_prefers_nodes_without_free_gpus(strategy):
    # w-2 has no GPU and much more CPU than needed (a loose fit on CPU), yet it is chosen
    # over w-1: free GPUs are compared first and kept for GPU work.
    cap = capacity("w-1: GPU=4 CPU=8", "w-2: CPU=64", "w-3: GPU=8 CPU=64", "w-4: CPU=4")
    assert place(bundles("CPU=2"), strategy, cap) == ("w-4",)
    assert set(place(bundles("2xCPU=2"), strategy, cap)) <= {"w-2", "w-4"}
    assert place(bundles("CPU=6"), strategy, cap) == ("w-2",)


@pytest.mark.parametrize("strategy", list(Strategy))
def test_gpu_work_goes_to_a_node_with_gpus(strategy):
    cap = capacity("w-1: CPU=64", "w-2: GPU=1 CPU=8", "w-3: GPU=8 CPU=8")
    assert place(bundles("GPU=1,CPU=1"), strategy, cap) == ("w-2",)


@pytest.mark.parametrize("strategy", list(Strategy))
def test_custom_resources(strategy):
    cap = capacity("w-1: GPU=8 CPU=8", "w-2: GPU=8 CPU=8 accel_A100=8", "w-3: GPU=2 CPU=8")
    assert place(bundles("GPU=1,accel_A100=1"), strategy, cap) == ("w-2",)
    # Work without the custom resource keeps the node that has it free.
    assert place(bundles("GPU=2"), strategy, cap) == ("w-3",)
    assert place(bundles("GPU=4"), strategy, cap) == ("w-1",)
    # A resource that no node has never fits.
    assert place(bundles("GPU=1,TPU=1"), strategy, cap) is None


@pytest.mark.parametrize("strategy", list(Strategy))
def test_dead_nodes_are_ignored(strategy):
    snapshot = cluster("w-1: GPU=8 dead", "w-2: GPU=1", "w-3: GPU=1 dead")
    cap = Capacity(snapshot.alive_nodes)
    assert cap.node_ids == ["w-2"]
    assert place(bundles("GPU=1"), strategy, cap) == ("w-2",)
    assert place(bundles("GPU=2"), strategy, cap) is None


def test_spread_shares_nodes_only_when_it_must():
    # Every node is used before any is shared (test_spread_shares_evenly_when_it_must says how);
    # nothing is oversubscribed.
    cap = capacity("w-1: GPU=8", "w-2: GPU=8", "w-3: GPU=2")
    got = place(bundles("5xGPU=1"), Strategy.SPREAD, cap)
    assert set(got[:3]) == {"w-1", "w-2", "w-3"}
    assert got.count("w-3") <= 2
    got = place(bundles("2xGPU=1"), Strategy.SPREAD, cap)
    assert len(set(got)) == 2


def test_strict_spread_never_reuses_a_node_even_when_one_node_could_hold_all():
    cap = capacity("w-1: GPU=8", "w-2: GPU=1")
    assert place(bundles("2xGPU=1"), Strategy.STRICT_SPREAD, cap) == ("w-2", "w-1")
    assert place(bundles("3xGPU=1"), Strategy.STRICT_SPREAD, cap) is None


def test_pack_prefers_one_node_over_a_tighter_split():
    cap = capacity("w-1: GPU=2", "w-2: GPU=2", "w-3: GPU=8")
    assert place(bundles("4xGPU=1"), Strategy.PACK, cap) == assignment("4*w-3")


def test_bundle_amounts_add_up_exactly():
    cap = capacity("w-1: CPU=1")
    assert place(bundles("10xCPU=0.1"), Strategy.STRICT_PACK, cap) == assignment("10*w-1")
    assert place(bundles("11xCPU=0.1"), Strategy.STRICT_PACK, cap) is None


def test_largest_first_is_stable_and_scarcest_first():
    cap = capacity("w-1: GPU=8 CPU=8")
    b = [res("CPU=8"), res("GPU=1"), res("GPU=2 CPU=1"), res("GPU=1"), res("GPU=2")]
    assert largest_first(b, cap) == [2, 4, 1, 3, 0]


def test_spread_shares_evenly_when_it_must():
    # 6 bundles on 3 nodes that could each hold all of them: two per node, as Ray spreads.
    cap = capacity("w-1: GPU=8", "w-2: GPU=8", "w-3: GPU=8")
    nodes = place(bundles("6xGPU=1"), Strategy.SPREAD, cap)
    assert sorted(Counter(nodes).values()) == [2, 2, 2]
