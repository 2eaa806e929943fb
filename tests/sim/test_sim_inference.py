"""The diurnal inference stream (sim.inference): its curve, and preemption by inference
on a tiny trace (raygang preempts training for it; FIFO makes it wait)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from raygang.sim.inference import deployments_wanted
from raygang.sim.metrics import summarize
from raygang.sim.settings import SimSettings
from tests.sim.builders import job, replay_of, trace

HOUR = 3600.0


def test_the_stream_peaks_at_14h_and_falls_to_its_low_at_2h():
    settings = SimSettings(inference_gpus=64, inference_gang_gpus=8, inference_low=0.25)
    assert deployments_wanted(settings, 14) == 8
    assert deployments_wanted(settings, 2) == 2
    by_hour = [deployments_wanted(settings, h) for h in range(24)]
    assert max(by_hour) == 8 and min(by_hour) == 2
    assert by_hour[2:15] == sorted(by_hour[2:15])  # rising through the morning


def test_inference_preempts_training_under_raygang_and_waits_for_it_under_fifo():
    # One 8-GPU node; a 20-hour training job from midnight; by mid-morning the stream
    # wants its one 8-GPU deployment.
    t = trace(job("train", at=0, run=20 * HOUR, gpus=8, queue="t1"), quotas={"t1": 8})
    stream = dict(inference_gpus=8, inference_gang_gpus=8)

    ours = replay_of(t, "raygang", **stream)
    log = next(iter(ours.jobs.values()))
    assert log.stops and log.stops[0].for_gpus == 8  # preempted for the deployment
    assert log.finished_at > 20 * HOUR
    waits = summarize(ours, 1800)["inference"]
    assert waits["wait_max_s"] <= 60  # the victim's 30 s grace period, then it runs
    assert all(s.running_at is not None for s in ours.services)

    fifo = replay_of(t, "fifo", **stream)
    assert not next(iter(fifo.jobs.values())).stops
    assert summarize(fifo, 1800)["inference"]["wait_max_s"] >= 8 * HOUR


def test_stream_settings_that_cannot_work_are_refused_with_why():
    with pytest.raises(ValidationError, match="12 GPUs is not a whole number of 8-GPU nodes"):
        SimSettings(inference_gpus=24, inference_gang_gpus=12)
    with pytest.raises(ValidationError, match="less than one deployment"):
        SimSettings(inference_gpus=4, inference_gang_gpus=8)
