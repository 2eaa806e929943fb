"""A cluster read in a thread is shared by whoever asks while it is under way (a cycle and
the status page's views: control/sight.py), but never by a caller for whom it is stale.

A read is asked with what raygang holds at its start (the runtime counts a gang whose
group Ray does not show yet as used). A view caller can start a read while a cycle
decides; that cycle then admits a gang, and the next cycle comes while the read is still
under way. Shared, it would decide on a view without the admitted gang: a second gang of
a queue at its limit was admitted beside the first (the API load test's flake, where the
status page's reads are many). In real time: the virtual-time loop runs threads inline.
"""

from __future__ import annotations

import asyncio
import threading

from raygang.core.gang import GangState as S
from raygang.core.queues import QueueSpec

from tests.control.harness import make_cluster, make_plane, submit, until


def test_a_cycle_never_decides_on_a_read_begun_before_the_last_admission():
    async def scenario():
        cluster = make_cluster("n0: GPU=4 CPU=8", seed=None)
        cluster.calls_block = True
        plane = make_plane(cluster, queues=[QueueSpec(name="default"),
                                            QueueSpec(name="load", limit={"GPU": 1})])
        observe, decided = cluster.observe, plane.loop._decided
        read_gate, decide_gate, deciding = threading.Event(), threading.Event(), \
            threading.Event()
        hold_reads = [False]
        asked: list[tuple[str, ...]] = []  # per read: the gangs it was asked with

        def gated_observe(held, draining):
            asked.append(tuple(g.gang_id for g in held))
            if hold_reads[0]:
                read_gate.wait(10)
            return observe(held, draining)

        def gated_decided(*args):
            deciding.set()
            decide_gate.wait(10)
            return decided(*args)

        cluster.observe, plane.loop._decided = gated_observe, gated_decided
        first = await submit(plane, "first", "GPU=1", queue="load", seconds=None)
        second = await submit(plane, "second", "GPU=1", queue="load", seconds=None)
        await until(deciding.is_set, 5, lambda: "no cycle decided")
        # While the cycle decides, a view caller begins a read (holding nothing yet)...
        hold_reads[0] = True
        viewing = asyncio.ensure_future(plane.loop.view(max_age=0))
        await until(lambda: len(asked) >= 2, 5, lambda: f"reads: {asked}")
        decide_gate.set()  # ... the cycle admits one gang, and the next one begins
        records = [plane.registry.get(g) for g in (first, second)]
        await until(lambda: any(r.state is not S.PENDING for r in records), 5,
                    lambda: "none admitted")
        await asyncio.sleep(0.3)  # the next cycles come while the read is under way
        read_gate.set()
        await viewing
        await asyncio.sleep(0.5)  # cycles on what the reads show
        held = [g.gang_id for g in plane.fleet.held() if g.queue == "load"]
        assert len(held) == 1, (held, asked)
        assert sorted(r.state.value for r in records) == ["PENDING", "RUNNING"], records
        await plane.shutdown()
        await plane.close(1.0)

    asyncio.run(asyncio.wait_for(scenario(), 20))
