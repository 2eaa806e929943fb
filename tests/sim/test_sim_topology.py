"""Racks in the simulator: nodes labelled by `rack_nodes`, and what multi-member jobs ask
of them (`topology`), on a tiny hand-made trace (times in seconds)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from raygang.sim.metrics import summarize
from raygang.sim.settings import SimSettings

from tests.sim.builders import job, replay_of, trace

# Racks of two 8-GPU nodes on three nodes: r0 = n0, n1; r1 = n2. A 1-node job takes n0 at
# 0 s; a 2-node job comes at 1 s: n1 and n2 are free, in two racks.
T = trace(job("one", 0, 100, gpus=8), job("two", 1, 50, gpus=16))


@pytest.mark.parametrize("topology, start, racks", [
    (None, 1, 2),  # no rule: across racks at once
    ("preferred", 1, 2),  # as few racks as it can, now: never a reason to wait
    ("segment:1", 1, 2),  # one member per segment: any rack each
    ("required", 100, 1),  # one rack: waits for r0 to empty
])
def test_what_a_multi_member_job_asks_of_the_racks(topology, start, racks):
    result = replay_of(T, "raygang", nodes=3, rack_nodes=2, topology=topology)
    two = result.jobs["j000001"]
    assert (two.first_start, two.racks) == (start, racks)
    summary = summarize(result, 1800.0)["racks"]
    assert (summary["multi_member_jobs"], summary["across_racks"]) == (1, racks - 1)


def test_every_baseline_keeps_the_racks_too():
    for name in ("fifo", "kueue", "kai"):
        two = replay_of(T, name, nodes=3, rack_nodes=2, topology="required").jobs["j000001"]
        assert (two.first_start, two.racks) == (100, 1), name


def test_a_job_no_rack_could_ever_hold_is_skipped_with_the_reason():
    t = trace(job("big", 0, 10, gpus=24))
    log = replay_of(t, "raygang", nodes=4, rack_nodes=2, topology="required").jobs["j000000"]
    assert "within one domain of 'rack'" in log.skipped


@pytest.mark.parametrize("fields, words", [
    ({"topology": "required"}, "needs racks"),
    ({"topology": "nearby", "rack_nodes": 2}, "'required', 'preferred' or 'segment:N'"),
    ({"topology": "segment:0", "rack_nodes": 2}, "'required', 'preferred' or 'segment:N'"),
    ({"topology": "required", "rack_nodes": 2, "elastic_min": 0.5}, "not with elastic jobs"),
])
def test_bad_rack_settings_say_what_is_wrong(fields, words):
    with pytest.raises(ValidationError, match=words):
        SimSettings(**fields)
