"""`raygang sim --declared-runtime K`: every job declares a max_runtime_s of K times its
duration, and a strict line lets the ones declared short pass its blocked head."""

from __future__ import annotations

import pytest

from raygang.sim.settings import SimSettings

from tests.sim.builders import job, run, trace

STRICT = {"backfill_lookahead": 0, "sla_waiting_time_s": None}


@pytest.mark.parametrize(("duration", "k", "declared"), [
    (100.0, 1.0, 120.0), (120.0, 1.0, 180.0), (3599.0, 2.0, 7200.0), (7200.0, 2.0, 14460.0)])
def test_a_job_declares_k_times_its_duration_up_to_the_next_minute(duration, k, declared):
    assert SimSettings(declared_runtime=k).job_max_runtime(duration) == declared
    assert SimSettings().job_max_runtime(duration) is None


def test_a_job_declared_short_passes_the_blocked_head_of_a_strict_line():
    # One node: "long" holds 4 of its 8 GPUs for an hour; "head" wants all 8 and blocks;
    # behind it a 10-minute and a 5-hour job of 4 GPUs each
    t = trace(job("long", 0, 3600, gpus=4), job("head", 1, 100, gpus=8),
              job("short", 2, 600, gpus=4), job("slow", 3, 5 * 3600, gpus=4))
    plain = run(t, "raygang", config=STRICT)
    assert plain["short"][0] > 3600  # waits behind the head
    declared = run(t, "raygang", config=STRICT, declared_runtime=1.0)
    assert declared["short"][0] < 60  # declares 11 min (at most 4 h): passes
    assert declared["slow"][0] > 3600  # declares 5 h 1 min: waits behind the head
    assert all(stops == 0 for _, _, stops in declared.values())


def test_the_strict_baselines_let_no_declared_job_pass():
    t = trace(job("long", 0, 3600, gpus=4), job("head", 1, 100, gpus=8),
              job("short", 2, 600, gpus=4))
    for baseline in ("fifo", "kai"):
        assert run(t, baseline, declared_runtime=1.0)["short"][0] > 3600, baseline
