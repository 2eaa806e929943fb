"""Fair share: quota first, surplus by weight, limits cap, hierarchical DRF order."""

from __future__ import annotations

import math

import pytest

from raygang.core import QueueBook, QueueTree, water_fill

from tests.unit.builders import queue, res, running


@pytest.mark.parametrize(
    "pool, items, expected",
    [
        # quotas first, then the rest by weight (1:3)
        (16, [(4, 16, 1), (0, 16, 3)], [7, 9]),
        # a claimant that wants little saturates; its leftover goes to the other
        (16, [(0, 2, 1), (0, 16, 1)], [2, 14]),
        # quotas overcommit the pool: shared pro rata to the (capped) quotas
        (8, [(8, 8, 1), (8, 8, 1)], [4, 4]),
        # quota above want: only the want counts as guaranteed
        (10, [(8, 2, 1), (0, 10, 1)], [2, 8]),
        # everybody satisfied: the rest stays undivided
        (10, [(0, 3, 1), (0, 2, 5)], [3, 2]),
        # nobody wants anything
        (10, [(4, 0, 1)], [0]),
    ],
)
def test_water_fill(pool, items, expected):
    assert water_fill(pool, items) == pytest.approx(expected)


def two_level_tree() -> QueueTree:
    #        org-a (quota GPU 8)          org-b (quota GPU 4, weight 3)
    #       /                   \                |
    #   a1 (quota 4)     a2 (quota 0, weight 3)   b
    return QueueTree([
        queue("org-a", quota="GPU=8"),
        queue("org-b", quota="GPU=4", weight=3),
        queue("a1", "org-a", quota="GPU=4"),
        queue("a2", "org-a", weight=3),
        queue("b", "org-b", quota="GPU=4"),
    ])


@pytest.mark.parametrize(
    "demand, fair",
    [
        # everyone wants a lot: org-a gets its 8 + 1/4 of the 4 left = 9, org-b 4 + 3 = 7;
        # inside org-a, a1 takes its quota 4, the 5 left go 1:3 to a1 and a2
        ({"a1": 16, "a2": 16, "b": 16},
         {"org-a": 9, "org-b": 7, "a1": 5.25, "a2": 3.75, "b": 7}),
        # b wants nothing: org-a takes the whole cluster (idle quota is lent)
        ({"a1": 16, "a2": 16, "b": 0},
         {"org-a": 16, "org-b": 0, "a1": 7, "a2": 9, "b": 0}),
        # a1 wants 2 only: it keeps 2, a2 gets the rest of org-a's share
        ({"a1": 2, "a2": 16, "b": 16},
         {"org-a": 9, "org-b": 7, "a1": 2, "a2": 7, "b": 7}),
    ],
)
def test_hierarchical_fair_shares(demand, fair):
    book = QueueBook(two_level_tree())
    book.compute_fair_shares(res("GPU=16"), {q: res(f"GPU={d}") for q, d in demand.items()})
    assert {q: book.fair[q].get("GPU", 0) for q in fair} == pytest.approx(fair)


def test_limit_caps_the_fair_share():
    tree = QueueTree([queue("a", limit="GPU=2"), queue("b")])
    book = QueueBook(tree)
    book.compute_fair_shares(res("GPU=8"), {"a": res("GPU=8"), "b": res("GPU=8")})
    assert book.fair["a"]["GPU"] == 2 and book.fair["b"]["GPU"] == 6


def test_usage_is_counted_up_the_tree():
    book = QueueBook(two_level_tree(), [
        running("t1", "w-1: 2xGPU=1", queue="a1"),
        running("t2", "w-2: 3xGPU=1,CPU=1", queue="a2"),
        running("t3", "w-2: GPU=1", queue="gone"),  # a queue no longer configured
    ])
    assert book.usage["a1"] == res("GPU=2")
    assert book.usage["org-a"] == res("GPU=5 CPU=3")
    assert book.usage["org-b"] == res()
    undo = book.add("b", res("GPU=1"))
    assert book.usage["org-b"] == res("GPU=1")
    undo()
    assert book.usage["org-b"] == res() and book.usage["b"] == res()


def test_dominant_share_is_the_largest_ratio_over_resources():
    tree = QueueTree([queue("a"), queue("b")])
    book = QueueBook(tree, [running("t1", "w-1: GPU=1,CPU=6", queue="a")])
    book.compute_fair_shares(res("GPU=8 CPU=16"),
                             {"a": res("GPU=8 CPU=16"), "b": res("GPU=8 CPU=16")})
    # a: GPU 1/4 of its share, CPU 6/8: CPU dominates
    assert book.share_ratio("a") == pytest.approx(0.75)
    assert book.share_ratio("b") == 0
    book.fair["b"] = {}
    book.add("b", res("GPU=1"))
    assert book.share_ratio("b") == math.inf  # uses what it has no share of


def test_order_key_compares_parents_first():
    book = QueueBook(two_level_tree(), [running("t1", "w-1: 4xGPU=1", queue="b")])
    book.compute_fair_shares(res("GPU=16"), {"a1": res("GPU=16"), "a2": res("GPU=16"),
                                             "b": res("GPU=16")})
    # org-b (4/7 of its share) is above org-a (0): both of org-a's leaves go before b
    keys = sorted(["a1", "a2", "b"], key=lambda q: (book.order_key(q), q))
    assert keys == ["a1", "a2", "b"]
    book.add("a1", res("GPU=9"))  # org-a now over its share (9/9 = 1 > 4/7)
    keys = sorted(["a1", "a2", "b"], key=lambda q: (book.order_key(q), q))
    assert keys[0] == "b"


def test_order_keys_are_kept_only_while_nothing_they_read_changed():
    book = QueueBook(two_level_tree(), [running("t1", "w-1: 4xGPU=1", queue="b")])
    leaves = ["a1", "a2", "b"]

    def fresh() -> dict:
        return {q: book.order_key(q) for q in leaves}

    def same() -> bool:
        return book.order_keys(leaves) == fresh()

    book.compute_fair_shares(res("GPU=16"), {q: res("GPU=16") for q in leaves})
    assert same()
    undo = book.add("a1", res("GPU=9"))
    assert same()
    undo()
    assert same()
    book.compute_fair_shares(res("GPU=32"), {q: res("GPU=16") for q in leaves})
    assert same()
    book.remove("b", res("GPU=4"))
    assert same() and book.order_keys(["b"]) == {"b": (0.0, 0.0)}


def test_limit_problem_names_the_queue_and_numbers():
    book = QueueBook(QueueTree([
        queue("org", limit="GPU=8"), queue("a", "org", limit="GPU=6"), queue("b", "org"),
    ]), [running("t1", "w-1: 4xGPU=1", queue="a"), running("t2", "w-2: 3xGPU=1", queue="b")])
    assert book.limit_problem("a", res("GPU=1")) is None
    assert book.limit_problem("a", res("GPU=3")) == (
        "queue 'a' is at its limit: uses GPU 4 of 6, the gang needs 3 more")
    assert book.limit_problem("b", res("GPU=2")) == (
        "queue 'org' is at its limit: uses GPU 7 of 8, the gang needs 2 more")
    assert book.limit_problem("b", res("CPU=100")) is None  # CPU is not capped
