"""bench/recovery.py runs end to end and prints every figure (small sizes: --quick), on the
session's cluster (--address): it replaces the scheduler while it runs, then starts it
again with the session's config, and the leak check follows."""

from __future__ import annotations

import re

import ray

import raygang
from tests.scripts import run_script


def test_recovery_benchmark_quick(ray_cluster):
    config = ray.get(raygang.start().ping.remote())["config"]
    out = run_script("bench/recovery.py", "--quick", "--address", ray_cluster.address,
                     timeout=280)
    sizes = re.search(r"^recovery: (\d+) gangs, (\d+) running;", out, re.MULTILINE)
    assert sizes, out
    n, running = map(int, sizes.groups())
    for store in ("gcs", "memory"):
        assert re.search(rf"^  submit with store {store} +(?:[\d.]+/s +)+median +[\d.]+/s$",
                         out, re.MULTILINE), out
    assert re.search(r"^  durable / memory: [\d.]+x", out, re.MULTILINE), out
    ready = re.search(rf"^  kill -> restarted actor answers: ([\d.]+) s; -> ready \(state read "
                      rf"back, {running} running gangs adopted\): ([\d.]+) s", out, re.MULTILINE)
    assert ready and float(ready.group(1)) <= float(ready.group(2)), out
    # Nothing lost, every running gang adopted (none restarted).
    assert re.search(rf"^  after the restart: {n} gangs known, {n - running} pending, "
                     rf"{running} adopted, 0 requeued, 0 orphans removed$", out, re.MULTILINE), out
    # The session's scheduler is back, with its config.
    assert ray.get(raygang.start().ping.remote())["config"] == config
