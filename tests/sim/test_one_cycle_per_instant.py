"""`SimSettings.one_cycle_per_instant`: the loop's cycle waits out the simulated instant
(`VirtualTimeLoop.settled`), so a cascade of events at one second makes one cycle."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from raygang.control.virtual import VirtualTimeLoop
from raygang.sim.cli import sim

from tests.sim.builders import job, replay_of, trace
from tests.sim.test_sim_engine import busy_trace, outcome


def run_on_virtual_time(main):
    loop = VirtualTimeLoop()
    try:
        return loop, loop.run_until_complete(main(loop))
    finally:
        loop.close()


def test_settled_waits_for_every_callback_and_due_timer_of_the_instant_not_later_ones():
    seen: list[str] = []

    async def main(loop: asyncio.AbstractEventLoop) -> tuple[float, list[str]]:
        async def cascade(step: int) -> None:  # each step starts the next, at one instant
            seen.append(f"step {step}")
            if step < 5:
                loop.create_task(cascade(step + 1))

        loop.call_later(0, seen.append, "timer due now")
        loop.call_later(5, seen.append, "timer 5 s on")
        loop.create_task(cascade(0))
        await loop.settled()
        return loop.time(), list(seen)

    _, (at, then) = run_on_virtual_time(main)
    assert at == 0
    assert sorted(then) == sorted([f"step {i}" for i in range(6)] + ["timer due now"])


def test_settled_ends_an_instant_with_nothing_else_to_run_instead_of_stalling():
    async def main(loop: VirtualTimeLoop) -> float:
        await loop.settled()
        await asyncio.sleep(3)
        await loop.settled()  # no timer is left at all: it still resolves
        return loop.time()

    _, at = run_on_virtual_time(main)
    assert at == 3


def test_every_waiter_of_an_instant_is_woken_once_it_is_over():
    async def main(loop: VirtualTimeLoop) -> list[float]:
        waits = [loop.create_task(loop.settled()) for _ in range(3)]
        await asyncio.sleep(0)
        await asyncio.gather(*waits)
        return [loop.time()]

    _, at = run_on_virtual_time(main)
    assert at == [0]


def test_jobs_that_start_together_run_as_before():
    # Seven jobs at one second, room for six: the seventh waits for the first to end.
    t = trace(*(job(f"j{i}", at=10, run=100 + i, gpus=8) for i in range(7)),
              quotas={"t1": 48})
    per_step = replay_of(t, "raygang", nodes=6)
    per_instant = replay_of(t, "raygang", nodes=6, one_cycle_per_instant=True)
    assert outcome(per_instant) == outcome(per_step)
    assert per_step.jobs["j000006"].first_start == 110  # when the first one ended
    # A cycle's own admissions start after it: their wake is a cycle of its own in both
    # (10 s twice, 110 s; the resync at 70 s would decide as the cycle before did, and
    # nothing else happens then: control.ticks); what one instant merges are wakes that
    # came while a cycle ran (the busy replay below).
    assert per_instant.cycles == per_step.cycles == 3


def test_a_busy_replay_one_cycle_per_instant_ends_every_job_and_is_deterministic():
    t = busy_trace(n=30)
    first = replay_of(t, "raygang", nodes=3, one_cycle_per_instant=True)
    second = replay_of(t, "raygang", nodes=3, one_cycle_per_instant=True)
    assert outcome(first) == outcome(second)
    assert all(log.finished_at is not None or log.skipped for log in first.jobs.values())
    assert first.cycles < replay_of(t, "raygang", nodes=3).cycles


@pytest.mark.parametrize("flag", [[], ["--one-cycle-per-instant"]])
def test_the_command_takes_the_flag(tmp_path, flag):
    path = tmp_path / "t.csv"
    path.write_text("submit_s,duration_s,gpus,queue\n0,60,8,a\n0,30,8,a\n5,10,1,b\n")
    result = CliRunner().invoke(sim, [str(path), "--nodes", "1", "-q", *flag])
    assert result.exit_code == 0, result.output
    assert "raygang" in result.output
