"""why_not / unschedulable_reason / describe_bundles: reasons in words with numbers."""

from __future__ import annotations

import pytest

from raygang.core import Strategy, describe_bundles, place, unschedulable_reason, why_not

from raygang.core.capacity import Capacity
from raygang.core.resources import Resources
from raygang.core.snapshot import NodeState

from tests.unit.builders import bundles, capacity, cluster, node, spec


@pytest.mark.parametrize(
    "shape, shown",
    [
        ("4xGPU=1", "4×{GPU: 1}"),
        ("CPU=1 + 4xGPU=1", "1×{CPU: 1} + 4×{GPU: 1}"),
        ("2xGPU=1,CPU=2,memory=8Gi", "2×{GPU: 1, CPU: 2, memory: 8 GiB}"),
        ("GPU=1 + CPU=1 + GPU=1", "2×{GPU: 1} + 1×{CPU: 1}"),
    ],
)
def test_describe_bundles(shape, shown):
    assert describe_bundles(bundles(shape)) == shown


@pytest.mark.parametrize(
    "nodes, shape, strategy, words",
    [
        (
            ("w-1: GPU=4", "w-2: GPU=4"),
            "8xGPU=1", "STRICT_PACK",
            ["needs {GPU: 8} on one node (STRICT_PACK, 8×{GPU: 1})",
             "largest free GPU on one node is 4 (node w-1)", "(even with the cluster empty)"],
        ),
        (
            ("w-1: GPU=8", "w-2: GPU=8", "w-3: GPU=8"),
            "4xGPU=1", "STRICT_SPREAD",
            ["needs 4 distinct nodes (STRICT_SPREAD, 4×{GPU: 1})",
             "only 3 nodes can hold {GPU: 1}: w-1, w-2, w-3"],
        ),
        (
            ("w-1: GPU=8", "w-2: GPU=8", "w-3: GPU=4"),
            "3xGPU=6", "STRICT_SPREAD",
            ["needs 3 distinct nodes", "only 2 nodes can hold {GPU: 6}: w-1, w-2"],
        ),
        (
            ("w-1: GPU=8", "w-2: GPU=2", "w-3: GPU=2"),
            "2xGPU=4 + GPU=1", "STRICT_SPREAD",
            ["needs 3 distinct nodes", "only 1 node can hold {GPU: 4}: w-1"],
        ),
        (
            ("w-1: GPU=4 CPU=8",),
            "GPU=1,TPU=1", "PACK",
            ["needs resource 'TPU', which no alive node has"],
        ),
        (
            ("w-1: GPU=4", "w-2: GPU=4", "w-3: CPU=8"),
            "9xGPU=1", "PACK",
            ["needs {GPU: 9} in all (PACK, 9×{GPU: 1})",
             "free in the cluster is GPU 8 (w-1: 4, w-2: 4, 1 node with none)"],
        ),
        (
            ("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=4"),
            "2xGPU=5", "SPREAD",
            ["bundle {GPU: 5} fits on no node", "largest free GPU on one node is 4 (node w-1)"],
        ),
        (
            ("w-1: GPU=8 dead", "w-2: GPU=4"),
            "8xGPU=1", "STRICT_PACK",
            ["largest free GPU on one node is 4 (node w-2)"],
        ),
    ],
)
def test_unschedulable_reason(nodes, shape, strategy, words):
    reason = unschedulable_reason(spec("g", shape, strategy), cluster(*nodes))
    assert reason is not None
    for word in words:
        assert word in reason, reason


@pytest.mark.parametrize("strategy", list(Strategy))
def test_unschedulable_reason_is_none_when_it_fits_an_empty_cluster(strategy):
    # Both nodes are full right now, but the gang would fit if they were empty.
    snapshot = cluster("w-1: GPU=4 free GPU=0", "w-2: GPU=4 free GPU=0")
    assert unschedulable_reason(spec("g", "2xGPU=2", strategy), snapshot) is None


def test_unschedulable_reason_without_alive_nodes():
    snapshot = cluster("w-1: GPU=4 dead")
    assert unschedulable_reason(spec("g", "GPU=1"), snapshot) == "the cluster has no alive nodes"


def test_largest_free_names_the_lowest_node_id_on_a_tie():
    # "w-1" sorts before "w-10": a tie must name w-1, however the ids compare as prefixes.
    cap = capacity("w-10: GPU=4 free GPU=2", "w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=1")
    reason = why_not(bundles("3xGPU=1"), Strategy.STRICT_PACK, cap)
    assert "largest free GPU on one node is 2 (node w-1)" in reason


@pytest.mark.parametrize(
    "shape, words",
    [
        # 3 nodes can hold a 1-GPU bundle, so that count alone would not explain it.
        ("GPU=4 + 2xGPU=1", "needs 3 distinct nodes (STRICT_SPREAD, 1×{GPU: 4} + 2×{GPU: 1}); "
                            "only 0 nodes can hold {GPU: 4}"),
        ("3xGPU=2 + GPU=1", "needs 4 distinct nodes (STRICT_SPREAD, 3×{GPU: 2} + 1×{GPU: 1}); "
                            "only 2 nodes can hold {GPU: 2}: w-1, w-2"),
        ("4xGPU=1", "needs 4 distinct nodes (STRICT_SPREAD, 4×{GPU: 1}); "
                    "only 3 nodes can hold {GPU: 1}: w-1, w-2, w-3"),
    ],
)
def test_strict_spread_reason_names_the_bundle_that_cannot_be_spread(shape, words):
    cap = capacity("w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=2", "w-3: GPU=4 free GPU=1")
    assert place(bundles(shape), Strategy.STRICT_SPREAD, cap) is None
    assert words in why_not(bundles(shape), Strategy.STRICT_SPREAD, cap)


def test_memory_is_shown_in_gib():
    cap = capacity("w-1: CPU=8 memory=16Gi free memory=4Gi")
    reason = why_not(bundles("CPU=1,memory=8Gi"), Strategy.STRICT_PACK, cap)
    assert "largest free memory on one node is 4 GiB (node w-1)" in reason


def test_many_nodes_are_summarised():
    cap = capacity(*[f"w-{i}: GPU=4 free GPU=1" for i in range(1, 8)])
    reason = why_not(bundles("8xGPU=1"), Strategy.PACK, cap)
    assert "free in the cluster is GPU 7 (w-1: 1, w-2: 1, w-3: 1, w-4: 1, 3 more)" in reason
    reason = why_not(bundles("8xGPU=2"), Strategy.STRICT_SPREAD, cap)
    assert "only 0 nodes can hold {GPU: 2}" in reason
    reason = why_not(bundles("8xGPU=1"), Strategy.STRICT_SPREAD, cap)
    assert "only 7 nodes can hold {GPU: 1}: w-1, w-2, w-3, w-4 and 3 more" in reason


def test_a_node_booked_beyond_its_total_shows_none_free_not_a_negative_amount():
    # w-1 is booked twice while a preempted gang still stops there: free GPU -1 (what
    # observe computes: its total minus raygang's bookings on it).
    over = node("w-1: GPU=4")
    over = NodeState(node_id="w-1", total=over.total, free=over.total - Resources(GPU=5),
                     name="w-1")
    cap = Capacity((over, node("w-2: GPU=4 free GPU=1")))
    reason = why_not(bundles("4xGPU=1"), Strategy.PACK, cap)
    assert "free in the cluster is GPU 1 (w-2: 1, 1 node with none)" in reason, reason
