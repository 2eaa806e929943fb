"""Capacity: equivalence classes of free vectors, best fit, reserve with exact undo."""

from __future__ import annotations

import random

import pytest

from raygang.core import Capacity

from tests.unit.builders import capacity, class_map, cluster, free_map, res, uniform


def test_identical_nodes_form_one_class_with_sorted_ids():
    cap = capacity("w-3: GPU=8", "w-1: GPU=8", "w-2: GPU=4", "w-4: GPU=8 free GPU=4")
    assert class_map(cap) == {res("GPU=8"): ["w-1", "w-3"], res("GPU=4"): ["w-2", "w-4"]}
    assert cap.node_ids == ["w-1", "w-2", "w-3", "w-4"]
    assert cap.total("w-4") == res("GPU=8")
    assert cap.free("w-4") == res("GPU=4")
    assert cap.display("w-4") == "w-4"


def test_use_totals_sees_the_cluster_empty():
    snapshot = cluster("w-1: GPU=8 free GPU=0", "w-2: GPU=4 free GPU=1")
    cap = Capacity(snapshot.nodes, use_totals=True)
    assert free_map(cap) == {"w-1": res("GPU=8"), "w-2": res("GPU=4")}


def test_resource_names_scarcest_first():
    cap = capacity("w-1: CPU=8 memory=1Gi GPU=1", "w-2: CPU=8 accel=1")
    assert cap.resource_names == ("GPU", "accel", "CPU", "memory")


def test_reserve_and_undo_restore_exactly():
    cap = capacity(*uniform(6, "GPU=8 CPU=32"), "x-1: CPU=16", "x-2: GPU=8 CPU=32 free GPU=2")
    before_free, before_classes = free_map(cap), class_map(cap)
    undo = cap.reserve([("w-3", res("GPU=2 CPU=1")), ("w-3", res("GPU=1")), ("x-1", res("CPU=16"))])
    assert cap.free("w-3") == res("GPU=5 CPU=31")
    assert cap.free("x-1") == res()
    assert "w-3" not in class_map(cap)[res("GPU=8 CPU=32")]
    assert class_map(cap)[res()] == ["x-1"]
    undo()
    assert free_map(cap) == before_free
    assert class_map(cap) == before_classes


def test_nested_undos_in_reverse_order():
    cap = capacity(*uniform(4, "GPU=4"))
    start = (free_map(cap), class_map(cap))
    states, undos = [], []
    for node_id in ["w-2", "w-2", "w-4", "w-1"]:
        states.append((free_map(cap), class_map(cap)))
        undos.append(cap.reserve([(node_id, res("GPU=1"))]))
    for undo, state in zip(reversed(undos), reversed(states)):
        undo()
        assert (free_map(cap), class_map(cap)) == state
    assert (free_map(cap), class_map(cap)) == start


def test_random_reserve_undo_sequences_restore_exactly():
    for seed in range(30):
        rng = random.Random(seed)
        lines = [f"w-{i}: GPU={rng.choice([0, 4, 8])} CPU={rng.choice([8, 16])}" for i in range(8)]
        cap = capacity(*lines)
        start = (free_map(cap), class_map(cap))
        undos = []
        for _ in range(rng.randint(1, 10)):
            node_id = rng.choice(cap.node_ids)
            fraction = res(f"CPU={rng.choice([0.1, 0.5, 1])}")
            undos.append(cap.reserve([(node_id, fraction)]))
        for undo in reversed(undos):
            undo()
        assert (free_map(cap), class_map(cap)) == start, seed


@pytest.mark.parametrize(
    "demand, exclude, among, expected",
    [
        ("GPU=1", (), None, "w-4"),  # tightest: w-4 has 1 GPU free
        ("GPU=2", (), None, "w-2"),  # w-2 and w-3 tie at 4: lowest id
        ("GPU=2", ("w-2",), None, "w-3"),
        ("GPU=2", ("w-2", "w-3"), None, "w-1"),
        ("GPU=9", (), None, None),
        ("GPU=1", ("w-1", "w-2", "w-3", "w-4"), None, None),
        ("GPU=1", (), ("w-1", "w-3"), "w-3"),
        ("GPU=1", ("w-3",), ("w-1", "w-3"), "w-1"),
        ("GPU=8", (), ("w-2", "w-3"), None),
    ],
)
def test_best_node(demand, exclude, among, expected):
    cap = capacity("w-1: GPU=8", "w-2: GPU=4", "w-3: GPU=4", "w-4: GPU=4 free GPU=1")
    assert cap.best_node(res(demand), exclude=set(exclude), among=among) == expected


def test_best_node_compares_gpu_before_cpu():
    cap = capacity("w-1: GPU=1 CPU=2", "w-2: CPU=100")
    assert cap.best_node(res("CPU=1")) == "w-2"
    assert cap.leftover_key(res("GPU=1 CPU=2"), res("CPU=1")) == (10_000, 10_000)
