"""A cycle's statement (core.statement): moves apply at once; a rollback takes back every
move since its checkpoint, a commit keeps them; outside a checkpoint nothing is recorded."""

from __future__ import annotations

from raygang.core import PolicyConfig
from raygang.core.capacity import Capacity
from raygang.core.draining import Draining
from raygang.core.fairshare import QueueBook
from raygang.core.preemption.trade import Refusal
from raygang.core.reserve import Hold
from raygang.core.statement import Statement

from tests.unit.builders import busy, free_map, gang, queue, running

CONFIG = PolicyConfig(queues=(queue("a", quota="GPU=4"), queue("b", quota="GPU=4")))
VICTIM = running("v", "w-1: 2xGPU=1", queue="b", priority=10)
OTHER = running("o", "w-2: GPU=1", queue="b", priority=10)


def statement() -> Statement:
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", placed=[VICTIM, OTHER])
    capacity = Capacity(snapshot.alive_nodes)
    return Statement(capacity, QueueBook(CONFIG.queue_tree, snapshot.placed), Draining(capacity))


def state(st: Statement) -> tuple[object, ...]:
    return (free_map(st.capacity), dict(st.book.usage), dict(st.book.firm),
            {n: st.draining.settled(n) for n in ("w-1", "w-2")}, list(st.admissions),
            list(st.preemptions), set(st.admitted), set(st.taken), dict(st.taken_from),
            set(st.failed), dict(st.refused))


def stop_and_admit(st: Statement) -> None:
    """What a cycle's search does: free the victim (the search's scratch work), stop it,
    admit the preemptor on what it freed, and another gang on what is left."""
    preemptor = gang("p", "4xGPU=1", queue="a", priority=100)
    freed = [st.capacity.release(VICTIM.bundles), st.book.remove("b", VICTIM.total)]

    def unfree() -> None:
        for undo in reversed(freed):
            undo()

    st.stop(preemptor, [VICTIM], "preempt", lambda v, g: "for p", {}, unfree)
    st.admit(preemptor, ("w-1",) * 4, "preempt", [VICTIM])
    st.admit(gang("q", "2xGPU=1", queue="a", priority="inference"), ("w-2", "w-2"),
             "allocate", [])


def test_a_rollback_takes_back_every_move_since_its_checkpoint():
    st = statement()
    st.failed.add(("allocate", "some shape"))
    st.refused[("reclaim", "some shape"), "checkpoint"] = Refusal(until=600.0)
    before = state(st)
    mark = st.checkpoint()
    stop_and_admit(st)
    assert [a.gang_id for a in st.admissions] == ["p", "q"]
    assert [p.victim for p in st.preemptions] == ["v"] and st.taken == {"v"}
    # A stop frees capacity: what failed may fit now, and a gate may see other victims.
    assert not st.failed and not st.refused
    st.refused[("reclaim", "other shape"), "trade"] = Refusal(cost=5.0)  # (with more free)
    st.rollback(mark)
    assert state(st) == before


def test_a_commit_keeps_the_moves_and_nothing_is_recorded_outside_a_checkpoint():
    st = statement()
    mark = st.checkpoint()
    stop_and_admit(st)
    after = state(st)
    st.commit(mark)
    assert state(st) == after and not st._journal
    st2 = statement()
    stop_and_admit(st2)
    assert state(st2) == after and not st2._journal


def test_nested_checkpoints_roll_back_to_their_own_mark():
    st = statement()
    before = state(st)
    outer = st.checkpoint()
    st.admit(gang("q", "2xGPU=1", queue="a"), ("w-2", "w-2"), "allocate", [])
    middle = state(st)
    inner = st.checkpoint()
    st.admit(gang("r", "1xGPU=1", queue="a"), ("w-2",), "allocate", [])
    st.rollback(inner)
    assert state(st) == middle
    st.rollback(outer)
    assert state(st) == before


def test_unhold_offers_the_held_capacity_and_its_rollback_holds_it_again():
    st = statement()
    elected = gang("big", "4xGPU=1", "STRICT_PACK", queue="a", since=0.0)
    hold = Hold.of(elected, st.capacity)
    assert hold is not None and hold.holds_any
    st.failed.add(("allocate", "before"))
    before = {(("reclaim", "before"), "trade"): Refusal(cost=5.0)}
    st.refused.update(before)
    held = free_map(st.capacity)
    mark = st.checkpoint()
    st.unhold(hold)
    assert free_map(st.capacity) != held and not st.failed and not st.refused
    st.failed.add(("allocate", "with the hold free"))
    st.refused[("reclaim", "with the hold free"), "trade"] = Refusal(cost=9.0)
    st.rollback(mark)
    assert free_map(st.capacity) == held
    # Shapes that failed with more free fail with less too: both are kept. Not so the
    # victims a gate refused: with less free, a search may find others.
    assert st.failed == {("allocate", "before"), ("allocate", "with the hold free")}
    assert st.refused == before
