"""What a scheduler keeps from one cycle to the next (`core.memory`): each entry is used
again only while what it was worked out from is the same, gives what working it out anew
gives, and is never changed by the cycle that reads it (issue 30: a simulator fast enough
to sweep, with the same decisions)."""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace

from raygang.core import PolicyConfig, Scheduler, schedule
from raygang.core.capacity import Capacity
from raygang.core.fairshare import QueueBook
from raygang.core.memory import CycleMemory
from raygang.core.resources import Resources
from raygang.core.snapshot import NodeState

from tests.unit.builders import cluster, gang, node, queue, res, running


def _seen(cap: Capacity) -> tuple[object, ...]:
    """Everything a cycle reads from a capacity, in the order it reads it."""
    return (cap.node_ids, [(cap.free(n), cap.total(n), cap.display(n)) for n in cap.node_ids],
            list(cap.classes()), cap.signature(), cap.free_total, cap.resource_names,
            [cap.labels(n) for n in cap.node_ids])


def _nodes(rng: random.Random) -> list[NodeState]:
    return [node(f"w-{i:02d}: GPU=8 CPU=64 @rack=r{i % 3} free GPU={rng.randint(0, 8)}")
            for i in rng.sample(range(20), 20)]  # not in id order: the capacity sorts


def test_a_capacity_made_from_the_last_one_is_the_capacity_made_anew():
    rng = random.Random(7)
    memory = CycleMemory()
    nodes = _nodes(rng)
    for step in range(200):
        for i in rng.sample(range(len(nodes)), rng.randint(0, 4)):  # a few nodes change
            free = Resources(GPU=rng.randint(0, 8), CPU=64) if rng.random() < 0.9 else \
                Resources.signed({"GPU": -2.0, "CPU": 64})  # booked beyond its total
            nodes[i] = replace(nodes[i], free=free)
        kept = Capacity(nodes, memory=memory)
        assert _seen(kept) == _seen(Capacity(nodes)), f"step {step}"
        # What a cycle does to its capacity stays in that cycle.
        some = kept.node_ids[step % len(nodes)]
        kept.reserve([(some, kept.free(some))])


def test_nodes_that_changed_more_than_what_is_free_make_the_capacity_anew():
    memory = CycleMemory()
    nodes = [node("w-1: GPU=8 free GPU=2"), node("w-2: GPU=8 free GPU=8")]
    Capacity(nodes, memory=memory)
    for changed in ([nodes[0], node("w-2: GPU=4 free GPU=4")],  # another total
                    [nodes[0], replace(nodes[1], name="big")],  # another name
                    [nodes[0], node("w-3: GPU=8 free GPU=8")],  # another node
                    [nodes[0]],  # one fewer
                    [*nodes, node("w-0: GPU=8 free GPU=1")]):  # one more, first by id
        assert _seen(Capacity(changed, memory=memory)) == _seen(Capacity(changed))


def _book(memory: CycleMemory | None, tree: object, demand: dict[str, Resources],
          history: object = None) -> QueueBook:
    book = QueueBook(tree, (), history, memory)  # type: ignore[arg-type]
    book.compute_fair_shares(res("GPU=16"), demand)
    return book


def test_fair_shares_are_kept_while_tree_cluster_and_demand_are_the_same():
    memory = CycleMemory()
    tree = PolicyConfig(queues=[queue("a", quota="GPU=4"), queue("b", quota="GPU=4")]).queue_tree
    first = _book(memory, tree, {"a": res("GPU=16"), "b": res("GPU=2")})
    again = _book(memory, tree, {"a": res("GPU=16"), "b": res("GPU=2")})
    assert again.fair is first.fair  # the same, not worked out again
    for demand in ({"a": res("GPU=16"), "b": res("GPU=8")}, {"a": res("GPU=1"), "b": res()}):
        assert _book(memory, tree, demand).fair == _book(None, tree, demand).fair
    other = PolicyConfig(queues=[queue("a", quota="GPU=12"), queue("b")]).queue_tree
    demand = {"a": res("GPU=16"), "b": res("GPU=16")}
    _book(memory, tree, demand)  # kept for `tree`: not for another tree
    assert _book(memory, other, demand).fair == _book(None, other, demand).fair \
        != _book(None, tree, demand).fair


def test_fair_shares_that_usage_over_time_moves_are_never_kept():
    memory = CycleMemory()
    tree = PolicyConfig(queues=[queue("a"), queue("b")]).queue_tree
    used = {"a": 0.0}
    history = SimpleNamespace(policy=SimpleNamespace(k_value=1.0),
                              amount=lambda q, name, cluster: used.get(q, 0.0))
    demand = {"a": res("GPU=16"), "b": res("GPU=16")}
    even = _book(memory, tree, demand, history).fair
    used["a"] = 16.0  # `a` used the cluster lately: its share of the surplus falls
    assert _book(memory, tree, demand, history).fair["a"]["GPU"] < even["a"]["GPU"]
    assert memory.fair is None


def test_the_book_counts_a_queue_again_when_one_of_its_gangs_changed():
    memory = CycleMemory()
    tree = PolicyConfig(queues=[queue("team-a"), queue("team-b")]).queue_tree
    placed = [running("a-1", "w-1: 2xGPU=1", queue="team-a"),
              running("a-2", "w-2: GPU=1", queue="team-a"),
              running("b-1", "w-2: GPU=1", queue="team-b")]
    assert QueueBook(tree, placed, None, memory).usage["team-a"] == res("GPU=3")
    placed[1] = running("a-2", "w-2: 3xGPU=1", queue="team-a")  # grew: a new view
    book = QueueBook(tree, placed, None, memory)
    assert book.usage["team-a"] == res("GPU=5") and book.usage["team-b"] == res("GPU=1")
    assert QueueBook(tree, placed[:2], None, memory).usage["team-b"] == res()  # it ended


def test_a_scheduler_decides_as_schedule_does_cycle_after_cycle():
    """The memory changes what a cycle costs, never what it decides: one scheduler's
    cycles against `schedule` alone, on a cluster whose free capacity moves."""
    rng = random.Random(3)
    scheduler = Scheduler()
    config = PolicyConfig(queues=[queue("a", quota="GPU=8"), queue("b", quota="GPU=8")],
                          preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0})
    for step in range(40):
        free = [rng.randint(0, 8) for _ in range(4)]
        snapshot = cluster(*(f"w-{i}: GPU=8 free GPU={f}" for i, f in enumerate(free)))
        pending = [gang(f"g-{step}-{i}", f"{rng.choice([1, 2, 4])}xGPU=1", "PACK",
                        priority="training", queue=rng.choice("ab"), seq=i)
                   for i in range(rng.randint(1, 5))]
        mine, alone = (scheduler(snapshot, pending, config, 10.0),
                       schedule(snapshot, pending, config, 10.0))
        assert mine == alone, f"step {step}"


def test_which_shapes_fit_at_all_is_a_schedulers_own_and_follows_its_nodes():
    """`EverFits`' answers live in a scheduler's memory, not in the module: a scheduler
    that saw a cluster of 8-GPU nodes tells nothing to one that sees 4-GPU nodes under the
    same names, and its own answers change once its nodes do."""
    from raygang.core.placement import EverFits

    wide, narrow = cluster("w-1: GPU=8"), cluster("w-1: GPU=4")
    shape = gang("g", "GPU=8", "STRICT_PACK").shape
    one, other = CycleMemory(), CycleMemory()
    assert EverFits(wide, one).fits_shape(shape)
    assert not EverFits(narrow, other).fits_shape(shape)
    assert EverFits(wide, one).fits_shape(shape)  # the other scheduler changed nothing
    assert not EverFits(narrow, one).fits_shape(shape)  # its nodes shrank: worked out anew
