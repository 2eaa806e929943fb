"""What the loop hands its metrics: cycle phases in order, waits per wait code (those
behind a blocked queue head counted without walking them), workloads per kind, and the
queue report with fair shares."""

from __future__ import annotations

import asyncio

from raygang.control.ports import NoMetrics, Tallies
from raygang.core.gang import GangState as S

from tests.control.harness import make_cluster, make_plane, run, submit, wait_for


class Recorded(NoMetrics):
    def __init__(self):
        self.phases: list[str] = []
        self.tallies: Tallies | None = None
        self.restarts: list[str] = []

    def restarted(self, record) -> None:
        self.restarts.append(record.gang_id)

    def phase_done(self, phase: str, since: float) -> float:
        self.phases.append(phase)
        return 0.0

    def refresh(self, gangs, queues, counts=None, tallies=None) -> None:
        self.tallies = tallies


def test_the_loop_tallies_waits_by_code_kinds_and_fair_shares():
    async def scenario():
        metrics = Recorded()
        cluster = make_cluster("n0: GPU=4 CPU=8")
        plane = make_plane(cluster, metrics=metrics, backfill_lookahead=0)  # strict FIFO
        big = await submit(plane, "big", "4xGPU=1", seconds=5)
        await wait_for(plane, big, S.RUNNING)
        # Three that cannot fit while `big` runs: the first blocks its queue, the other
        # two wait behind it (strict FIFO per queue).
        for name in ("w1", "w2", "w3"):
            await submit(plane, name, "2xGPU=1", seconds=0.01)
        while plane.loop.waits.get(("default", "BEHIND"), 0) < 2:
            await asyncio.sleep(0.01)
        assert plane.loop.waits == {("default", "NO_FIT"): 1, ("default", "BEHIND"): 2}
        (head,) = plane.loop.last_plan.looked_at  # w1: w2 and w3 wait behind it
        submitted = plane.registry.get(head).submitted_at
        await asyncio.sleep(2.1)  # two refreshes of the gauges (once a second)
        tallies = metrics.tallies
        assert tallies is not None and tallies.queues is not None
        # The head of the line has waited since it was submitted: a second and more.
        assert 1.0 <= tallies.longest_wait["default"] <= cluster.clock() - submitted
        assert tallies.kinds[S.PENDING, "gang"] == 3 and tallies.kinds[S.RUNNING, "gang"] == 1
        (row,) = tallies.queues()
        assert row.name == "default" and row.fair_share["GPU"] == 4
        cycle = metrics.phases[:3]
        assert cycle == ["observe", "decide", "apply"] and len(metrics.phases) % 3 == 0
        await plane.shutdown()

    run(scenario)


def test_each_whole_gang_restart_is_told_once_and_a_final_failure_is_not_one():
    async def scenario():
        metrics = Recorded()
        plane = make_plane(make_cluster("n0: CPU=4"), metrics=metrics)
        gang_id = await submit(plane, "flaky", "2xCPU=1", seconds=1, fails_after_s=0.02,
                               max_restarts=2)
        assert (await plane.wait(gang_id, timeout=10)).state is S.FAILED
        assert metrics.restarts == [gang_id, gang_id]
        await plane.shutdown()

    run(scenario)
