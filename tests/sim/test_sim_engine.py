"""The engine: virtual time, determinism, the product loop's decisions, the report."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raygang.sim.api import simulate
from raygang.control.loop import SchedulingLoop
from raygang.control.virtual import SimulationStalled, VirtualTimeLoop
from raygang.sim import engine
from raygang.sim.engine import Replay
from raygang.sim.ledger import TenantUsage, jain
from raygang.sim.metrics import allocation, percentile, summarize
from raygang.sim.settings import SimSettings

from tests.sim.builders import job, replay_of, trace

ROOT = Path(__file__).resolve().parents[2]


def busy_trace(seed: int = 7, n: int = 60):
    rng = random.Random(seed)
    jobs = [job(f"j{i:03d}", at=rng.uniform(0, 4 * 3600), run=rng.uniform(60, 3 * 3600),
                gpus=rng.choice((1, 1, 2, 4, 8, 16)), queue=rng.choice(("t1", "t2", "t3")))
            for i in range(n)]
    return trace(*jobs, quotas={"t1": 8, "t2": 8, "t3": 16})


def outcome(result: Replay) -> list[tuple]:
    return [(name, log.first_start, log.finished_at,
             [(s.at, s.lost_s, s.action) for s in log.stops])
            for name, log in result.jobs.items()]


def test_a_day_of_sleeping_costs_no_wall_time():
    loop = VirtualTimeLoop()
    started = time.perf_counter()

    async def sleeper() -> float:
        await asyncio.sleep(86_400)
        await asyncio.wait_for(asyncio.sleep(3_600), timeout=7_200)
        return loop.time()

    try:
        assert loop.run_until_complete(sleeper()) == 90_000
    finally:
        loop.close()
    assert time.perf_counter() - started < 1


def test_waiting_for_an_event_nothing_will_send_is_reported_not_hung():
    loop = VirtualTimeLoop()
    try:
        with pytest.raises(SimulationStalled):
            loop.run_until_complete(asyncio.Event().wait())
    finally:
        loop.close()


def test_a_replay_is_deterministic():
    t = busy_trace()
    first, second = replay_of(t, "raygang", nodes=3), replay_of(t, "raygang", nodes=3)
    assert outcome(first) == outcome(second)
    assert any(stops for *_, stops in outcome(first)), "the trace should exercise reclaim"

    def report(result: Replay) -> dict:  # the same report, but for how long it took
        return {k: v for k, v in summarize(result, 1800).items() if k != "speed"}

    assert report(first) == report(second)


def test_a_replay_does_not_depend_on_string_hashing():
    t = busy_trace()
    code = ("from tests.sim.test_sim_engine import busy_trace, outcome; "
            "from tests.sim.builders import replay_of; "
            "print(repr(outcome(replay_of(busy_trace(), 'raygang', nodes=3))))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(outcome(replay_of(t, "raygang", nodes=3)))


def test_the_simulators_loop_decides_as_the_control_planes_own_loop():
    # On Ray the loop re-checks 0.1, 0.3 and 1 s after each release (Ray's lagging view);
    # the simulator leaves those out (sim.loop). Rules that change with time alone (the
    # reclaim delay and minimum runtime, sla_waiting_time_s, and the cheapest victims,
    # which depend on how long ago each gang saved) are seen by whichever cycle comes
    # first, so the two loops can decide them up to a resync apart: here they are off,
    # and what is compared is what events decide.
    t = busy_trace(seed=11)
    timeless = {"preemption": {"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0,
                               "reclaim_victim_order": "newest"},
                "sla_waiting_time_s": None}
    assert outcome(replay_of(t, "raygang", nodes=3, config=timeless)) == outcome(
        replay_of(t, "raygang", nodes=3, product_loop=True, config=timeless))


def test_the_report_has_every_policy_the_attribution_and_the_plots(tmp_path):
    t = busy_trace(n=30)
    t = type(t)(t.jobs, source="test", attribution="Data: test trace, CC BY 4.0",
                quotas=t.quotas)
    comparison = simulate(t, ["raygang", "fifo", "static"], SimSettings(nodes=4))
    written = comparison.write(tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert [p["policy"] for p in report["policies"]] == ["raygang", "fifo", "static"]
    assert report["trace"]["attribution"] == "Data: test trace, CC BY 4.0"
    assert report["policies"][2]["tenants"]["t1"]["jct_vs_static"] == 1.0
    text = (tmp_path / "report.txt").read_text()
    assert "JCT mean (h)" in text and "CC BY 4.0" in text
    if any(p.suffix == ".png" for p in written):  # matplotlib is optional
        assert (tmp_path / "jct_cdf.png").stat().st_size > 0


def test_percentiles_and_jains_index():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert jain([1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25


def test_allocation_integrates_the_gpus_held_over_the_window():
    usage = TenantUsage({"q": 8})
    usage.change(0, "q", running=8)
    usage.change(50, "q", running=-4)
    usage.change(100, "q", running=-4)
    replay = Replay("x", {}, usage, 100, 0, 0, gpus=8, quotas={"q": 8})
    assert allocation(replay, 0, 100) == pytest.approx(0.75)
    assert allocation(replay, 50, 100) == pytest.approx(0.5)


def test_fairness_counts_a_tenant_only_up_to_what_it_asked_for_and_its_quota():
    usage = TenantUsage({"a": 8, "b": 8})
    usage.change(0, "a", running=16)  # a borrows b's share while b asks for nothing
    usage.change(10, "b", pending=8)  # b waits for its guarantee for 10 s
    usage.change(20, "b", pending=-8, running=8)
    usage.change(20, "a", running=-8)
    usage.close(30)
    assert usage.got_s["a"] / usage.entitled_s["a"] == 1.0
    assert usage.got_s["b"] / usage.entitled_s["b"] == pytest.approx(0.5)


def test_simultaneous_timers_fire_in_the_order_they_were_set():
    # asyncio orders timers by time alone; its heap breaks ties by its own layout, which
    # other timers (set earlier, later, cancelled) move. Here ties keep the order they
    # were set in, whatever else is in the heap: a timer added elsewhere (a loop that no
    # longer wakes for nothing) leaves simultaneous ones as they were.
    loop = VirtualTimeLoop()
    rng = random.Random(3)
    fired: list[tuple[float, int]] = []
    expected: list[tuple[float, int]] = []
    try:
        handles = []
        for i in range(200):
            when = rng.choice((10.0, 20.0, 30.0))
            handles.append((when, i, loop.call_at(when, fired.append, (when, i))))
        for when, i, handle in handles:
            if rng.random() < 0.3:
                handle.cancel()
            else:
                expected.append((when, i))
        loop.run_until_complete(asyncio.sleep(40))
    finally:
        loop.close()
    assert fired == sorted(expected)  # by time, then by the order they were set


def test_a_call_off_the_loop_interleaves_as_through_an_executors_future(monkeypatch):
    """`VirtualTimeLoop.run_in_executor` runs the call inline without a thread's future,
    but the caller wakes the same rounds later as through one (asyncio's own path, with
    the inline executor): the other tasks' steps in between are the same, and so are a
    replay's decisions. An error reaches the caller either way."""
    def interleaving(loop: VirtualTimeLoop) -> list[str]:
        steps: list[str] = []

        def work(name: str) -> str:
            steps.append(f"{name} runs")
            if name == "bad":
                raise ValueError(name)
            return name

        async def caller(name: str) -> None:
            try:
                steps.append(f"{await asyncio.to_thread(work, name)} back")
            except ValueError as error:
                steps.append(f"{error} raised")

        async def ticker() -> None:
            for i in range(6):
                steps.append(f"tick {i}")
                await asyncio.sleep(0)

        async def main() -> None:
            await asyncio.gather(ticker(), caller("a"), caller("bad"), ticker(), caller("b"))
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
        return steps

    class Inline(concurrent.futures.ThreadPoolExecutor):  # asyncio's path, no thread
        def submit(self, fn, /, *args, **kwargs):
            future = concurrent.futures.Future()
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as error:
                future.set_exception(error)
            return future

    fast = interleaving(VirtualTimeLoop())
    monkeypatch.setattr(VirtualTimeLoop, "run_in_executor",
                        asyncio.SelectorEventLoop.run_in_executor)
    reference = VirtualTimeLoop()
    reference.set_default_executor(Inline(max_workers=1))
    assert fast == interleaving(reference)
    assert "bad raised" in fast and "b back" in fast


@pytest.fixture
def looks(monkeypatch) -> list[float]:
    """The simulated times at which replays' loops looked (`SchedulingLoop._begin`)."""
    seen: list[float] = []
    begin = SchedulingLoop._begin

    def counted(self):
        seen.append(self._clock())
        return begin(self)

    monkeypatch.setattr(SchedulingLoop, "_begin", counted)
    return seen


def test_an_idle_replay_sleeps_until_its_next_event(looks):
    # Two jobs ten days apart: between them nothing waits, and a simulated cluster tells
    # the loop of every change (`Cluster.tells_changes`), so the loop does not look again
    # every resync interval (14,400 looks in ten days at 60 s).
    t = trace(job("a", at=0, run=3600, gpus=8, queue="t1"),
              job("b", at=10 * 86_400, run=3600, gpus=8, queue="t1"), quotas={"t1": 8})
    result = replay_of(t, "raygang", nodes=1)
    assert [log.finished_at for log in result.jobs.values()] == [3600, 10 * 86_400 + 3600]
    assert len(looks) < 50, len(looks)


@pytest.mark.parametrize("policy_name, most", [("fifo", 50), ("static", 50), ("raygang", 300)])
def test_a_waiting_gang_is_looked_at_by_the_clock_only_when_the_clock_may_change_a_decision(
        looks, policy_name, most):
    # A gang waits ten days for the one before it to end. FIFO and the static partitions
    # only allocate (`PolicyConfig.decides_by_time` is false): until something changes,
    # a look decides as the last one did, and a replay's cluster tells every change, so
    # the loop looks only when told. raygang's rules wait out delays, minimum runtimes
    # and the SLA hold: its loop looks on the resync interval (60 s) only where the last
    # plan says the clock may let something through (`Plan.steady_until`), or where
    # something else happens at the instant an interval ends (the replay's hourly
    # report): 240 of 14,400 (`control.ticks`).
    t = trace(job("a", at=0, run=10 * 86_400, gpus=8, queue="t1"),
              job("b", at=60, run=3600, gpus=8, queue="t1"), quotas={"t1": 8})
    result = replay_of(t, policy_name, nodes=1)
    assert [log.finished_at for log in result.jobs.values()] == \
        [10 * 86_400, 10 * 86_400 + 3600]
    assert len(looks) < most, len(looks)


def test_an_interval_that_ends_with_nothing_to_let_through_makes_no_look(monkeypatch, looks):
    """t1 runs a gang beyond its quota; t2's gang, within its quota, may reclaim it once
    pending the reclaim delay (300 s) and once the victim ran its minimum runtime (900 s
    since 0): the looks of the intervals between would decide nothing. Skipped, every
    decision is made when it was: the reclaim at the first interval's end past both."""
    t = trace(job("a1", at=0, run=86_400, gpus=8, queue="t1"),
              job("a2", at=0, run=86_400, gpus=8, queue="t1"),
              job("b", at=600, run=3600, gpus=8, queue="t2"), quotas={"t1": 8, "t2": 8})
    fixed = {"preemption": {"reclaim_trade_ratio": None}}  # the delay and runtime alone
    skipping = replay_of(t, "raygang", nodes=2, config=fixed)
    skipped = list(looks)
    looks.clear()
    monkeypatch.setattr(engine, "Ticks", lambda quiet: None)  # a look at every interval
    every = replay_of(t, "raygang", nodes=2, config=fixed)
    assert outcome(skipping) == outcome(every)
    # Reclaimed at 900 s, once both passed: a2 ends its grace period (30 s), b starts.
    assert [s.at for s in skipping.jobs["j000001"].stops] == [930.0]
    assert skipping.jobs["j000002"].first_start == 930.0
    assert 900.0 in skipped
    assert [at for at in looks if 600 < at < 900] == [660, 720, 780, 840]
    assert [at for at in skipped if 600 < at < 900] == []
