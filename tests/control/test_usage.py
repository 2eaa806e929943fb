"""Time-based fair share in the loop (control.usage): a queue that ran the cluster lately
yields to one that did not; the admission penalty, the half-life and the window move who
that is; and what each queue used survives a restart (no Ray, virtual time)."""

from __future__ import annotations

import asyncio

import pytest

from raygang.control.store import MemoryStore
from raygang.control.usage import IDLE_S, USAGE
from raygang.control.virtual import VirtualClock, VirtualTimeLoop
from raygang.core.gang import GangState as S
from tests.control import harness
from tests.control.harness import make_plane, released, run, submit, wait_for

QUEUES = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
ON = {"enabled": True}
# No reclaim: the order of admissions alone is what is looked at. The loop looks every
# 5 s of virtual time (usage is booked when it looks).
OPTIONS = {"queues": QUEUES, "actions": ["allocate"], "resync_interval_s": 5.0}


async def _ran(plane, queue: str, seconds: float, name: str = "warm") -> None:
    """`queue` runs a gang of the whole node for `seconds`, to its end."""
    gang = await submit(plane, name, "4xGPU=1", queue=queue, seconds=seconds)
    await plane.wait(gang, timeout=seconds + 100)  # waits on the gang's events, no polling
    await released(plane)


async def _who_goes_first(plane) -> tuple[str, tuple[float, float]]:
    """a runs the node for 10 minutes, then `_race`."""
    await _ran(plane, "a", 600)
    return await _race(plane)


async def _race(plane) -> tuple[str, tuple[float, float]]:
    """c holds the node for 30 s, while a and b each queue a gang of the whole node (a's
    first). Returns the queue whose gang runs first once the node is free (when it frees,
    a and b hold nothing: only their pasts differ), and a's and b's fair shares of GPUs
    as `queues()` showed them meanwhile."""
    blocker = await submit(plane, "blocker", "4xGPU=1", queue="c", seconds=30)
    await wait_for(plane, blocker, S.RUNNING, timeout=10)
    again = await submit(plane, "again", "4xGPU=1", queue="a", seconds=60)
    other = await submit(plane, "other", "4xGPU=1", queue="b", seconds=60)
    shares = {q.name: q.fair_share.get("GPU", 0.0) for q in await plane.queues()}
    running = {asyncio.ensure_future(plane.wait(g, timeout=60, until_running=True)): q
               for q, g in (("a", again), ("b", other))}
    done, waiting = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
    for task in waiting:
        task.cancel()
    first = done.pop()
    assert first.result().state is S.RUNNING, first.result()
    return running[first], (shares["a"], shares["b"])


@pytest.mark.parametrize("usage, first", [({}, "a"), (ON, "b")])
def test_a_queue_that_ran_the_cluster_lately_yields_to_one_that_did_not(usage, first):
    async def scenario():
        plane = make_plane(harness.make_cluster("n0: GPU=4"), usage=usage, **OPTIONS)
        return await _who_goes_first(plane)
    # Without usage a and b hold nothing when the node frees: a tie, broken by name (a).
    # With it, b goes first, and `queues()` shows a's fair share lowered by its usage.
    found, (a_share, b_share) = run(scenario, virtual_s=2000)
    assert found == first
    assert (a_share < b_share) == bool(usage)



@pytest.mark.parametrize("penalty_s, first", [(0.0, "b"), (300.0, "a")])
def test_the_admission_penalty_counts_a_burst_of_admissions(penalty_s, first):
    """b admits five gangs of a second each, a one gang of 5 minutes. By run time alone
    b used less (at most 5 x 4 GPU x (1 + IDLE_S) s: with nothing waiting, the loop books
    usage every IDLE_S), and goes first; charged Kueue's entry penalty of 300 s for each
    admission, b's burst counts 5 x 1200 GPU-s against a's 2400, and a goes first (as
    the tie between two queues holding nothing would also have it: hence both cases)."""
    async def scenario():
        plane = make_plane(harness.make_cluster("n0: GPU=4"), **OPTIONS,
                           usage={**ON, "admission_penalty_s": penalty_s})
        await _ran(plane, "a", 300)
        for i in range(5):
            await _ran(plane, "b", 1, name=f"burst-{i}")
        used = plane.loop.usage.keeper.ledger.view().used
        return used, await _race(plane)
    used, (found, _) = run(scenario, virtual_s=2000)
    assert found == first
    burst = 5 * 4 * penalty_s
    assert burst <= used["b"]["GPU"] <= burst + 5 * 4 * (1 + IDLE_S + 1)


def _old_run_then_a_new_one(usage: dict, gap_s: float) -> tuple[float, str]:
    """a runs the node for 10 minutes; `gap_s` later b runs it for 2. Returns a's usage
    then (GPU-seconds) and which of a and b goes first in the race after."""
    async def scenario():
        plane = make_plane(harness.make_cluster("n0: GPU=4"), **OPTIONS,
                           usage={**ON, **usage})
        await _ran(plane, "a", 600)
        await asyncio.sleep(gap_s)
        await _ran(plane, "b", 120)
        view = plane.loop.usage.keeper.ledger.view()
        return view.used.get("a", {}).get("GPU", 0.0), await _race(plane)
    a_used, (found, _) = run(scenario, virtual_s=gap_s + 5000)
    return a_used, found


@pytest.mark.parametrize("half_life_s, first", [(None, "b"), (600.0, "a")])
def test_a_half_life_lets_old_usage_fade(half_life_s, first):
    """a ran the node for 10 minutes, two hours ago; b for 2 minutes just now. Every
    second counting the same, a used more and b goes first; with a half-life of 10
    minutes, a's usage has halved 12 times and a goes first."""
    a_used, found = _old_run_then_a_new_one({"half_life_s": half_life_s}, 2 * 3600)
    assert found == first
    if half_life_s is None:  # 600 s run and 300 s penalty, up to IDLE_S late
        assert 4 * 900 <= a_used <= 4 * (900 + IDLE_S + 2)
    else:
        assert a_used < 4 * 900 * 0.5 ** 11


@pytest.mark.parametrize("window_s, first", [(168 * 60.0, "a"), (7 * 86400.0, "b")])
def test_usage_older_than_the_window_does_not_count(window_s, first):
    """a ran the node for 10 minutes, three hours ago; b for 2 minutes just now. With a
    week's window a used more, and b goes first; with a window of 168 minutes, a's run
    has left it, and a goes first."""
    a_used, found = _old_run_then_a_new_one({"window_s": window_s}, 3 * 3600)
    assert found == first
    assert (a_used == 0.0) == (window_s < 3 * 3600)

def test_the_usage_survives_a_restart_of_the_scheduler():
    """a runs for 10 minutes on a first scheduler, which dies (its loop is never run
    again); a second one on the same store finds a's usage and lets b go first. (A window
    of 168 min: its slices, a minute each, are written as they close.)"""
    on = {**ON, "window_s": 168 * 60.0}
    clock = VirtualClock()
    cluster = harness.make_cluster("n0: GPU=4", seed=0, clock=clock)
    store = MemoryStore()
    first_loop = VirtualTimeLoop(clock, wall_limit_s=30)

    async def before():
        plane = make_plane(cluster, store, usage=on, **OPTIONS)
        warm = await submit(plane, "warm", "4xGPU=1", queue="a", seconds=600)
        await plane.wait(warm, timeout=700)
        await asyncio.sleep(60)  # the usage is written (at most every 30 s)
        return plane.loop.usage.keeper.ledger.view()

    async def after():
        plane = make_plane(cluster, store, usage=on, **OPTIONS)
        await plane.ready()
        assert plane.recovery["usage"] is True
        view = plane.loop.usage.keeper.ledger.view()
        # c holds the node while a and b queue (a's first), so both wait for it.
        blocker = await submit(plane, "blocker", "4xGPU=1", queue="c", seconds=30)
        await wait_for(plane, blocker, S.RUNNING, timeout=10)
        again = await submit(plane, "again", "4xGPU=1", queue="a", seconds=60)
        other = await submit(plane, "other", "4xGPU=1", queue="b", seconds=60)
        await plane.wait(other, timeout=200)
        return view, plane.registry.get(again).state

    try:
        seen = first_loop.run_until_complete(asyncio.wait_for(before(), 1000))
        second_loop = VirtualTimeLoop(clock, wall_limit_s=30)
        try:
            found, a_state = second_loop.run_until_complete(asyncio.wait_for(after(), 1000))
        finally:
            _close(second_loop)
    finally:
        _close(first_loop)
    assert "slice-" in " ".join(first_loop_keys(store))
    # a held the node's 4 GPUs for 600 s (booked up to IDLE_S late, when nothing waits),
    # and its admission was charged 300 s of them.
    assert 4 * 900 * 0.999 <= seen.used["a"]["GPU"] <= 4 * (900 + IDLE_S + 2)
    assert found.used["a"]["GPU"] == pytest.approx(seen.used["a"]["GPU"], rel=0.01)
    assert found.capacity["GPU"] >= seen.capacity["GPU"] * 0.99
    assert a_state is not S.SUCCEEDED  # b went first: a's gang was still waiting or running



class UsageOutageStore(MemoryStore):
    """A store that refuses writes of the usage table while `down` (a timed-out write)."""

    def __init__(self):
        super().__init__()
        self.down = False
        self.refused = 0

    async def put(self, table, key, value):
        if self.down and table == USAGE:
            self.refused += 1
            raise TimeoutError("the GCS did not answer within 30 s")
        await super().put(table, key, value)


def test_usage_the_store_refused_is_written_whole_once_it_answers():
    """The store refuses the usage table while a runs for 10 minutes (the slices that
    closed meanwhile among it), then answers again. A scheduler started afterwards on the
    same store finds all of a's usage: what was refused is written again, not skipped."""
    on = {**ON, "window_s": 168 * 60.0}
    clock = VirtualClock()
    cluster = harness.make_cluster("n0: GPU=4", seed=0, clock=clock)
    store = UsageOutageStore()
    store.down = True
    first_loop = VirtualTimeLoop(clock, wall_limit_s=30)

    async def before():
        plane = make_plane(cluster, store, usage=on, **OPTIONS)
        warm = await submit(plane, "warm", "4xGPU=1", queue="a", seconds=600)
        await plane.wait(warm, timeout=700)
        refused_keys = first_loop_keys(store)
        store.down = False
        await asyncio.sleep(60)  # the writer retries (and the head is due every 30 s)
        return plane.loop.usage.keeper.ledger.view(), refused_keys

    async def after():
        plane = make_plane(cluster, store, usage=on, **OPTIONS)
        await plane.ready()
        return plane.loop.usage.keeper.ledger.view()

    try:
        (seen, refused_keys) = first_loop.run_until_complete(asyncio.wait_for(before(), 1000))
        second_loop = VirtualTimeLoop(clock, wall_limit_s=30)
        try:
            found = second_loop.run_until_complete(asyncio.wait_for(after(), 1000))
        finally:
            _close(second_loop)
    finally:
        _close(first_loop)
    assert store.refused > 0 and refused_keys == []  # nothing of the usage got through
    slices = [k for k in first_loop_keys(store) if k.startswith("slice-")]
    assert len(slices) >= 10  # a minute each: every one that closed during a's run
    assert found.used["a"]["GPU"] == pytest.approx(seen.used["a"]["GPU"], rel=0.01)
    assert seen.used["a"]["GPU"] >= 4 * 900 * 0.999

def first_loop_keys(store: MemoryStore) -> list[str]:
    return list(store._tables.get(USAGE, {}))


def _close(loop: VirtualTimeLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=10))
    loop.close()
