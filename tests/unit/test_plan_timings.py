"""A plan says how long each action took (`Plan.timings`, the per-action latency metric):
one entry per configured action, a measurement that never makes two plans differ."""

from __future__ import annotations

from raygang.core import PolicyConfig, schedule

from tests.unit.builders import cluster, gang


def test_each_configured_action_is_timed_and_the_timing_is_not_a_decision():
    nodes = cluster("w-1: GPU=4 CPU=8")
    pending = [gang("first", "2xGPU=1"), gang("later", "GPU=4")]
    config = PolicyConfig()
    first = schedule(nodes, pending, config, 100.0)
    again = schedule(nodes, pending, config, 100.0)
    assert list(first.timings) == list(config.actions)
    assert all(seconds >= 0.0 for seconds in first.timings.values())
    assert first.admitted_ids == ["first"] and "later" in first.waiting
    assert first == again and first.timings is not again.timings
