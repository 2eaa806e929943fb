"""bench/jobs.py runs end to end (--quick): both sides of the job burst, no raygang job
failed, the jobs/s ratio, and the hand-off window's quiet row (one Train run through
raygang; the full bench adds unmanaged Train runs and a neighbour). It runs on the
session's cluster (--address; the same shape as the bench's own: a head with the dashboard
and 2 workers x 4 GPUs), so it starts no cluster of its own, and the leak check follows."""

from __future__ import annotations

import re

from tests.scripts import run_script


def test_jobs_benchmark_quick(ray_cluster):
    out = run_script("bench/jobs.py", "--quick", "--address", ray_cluster.address, timeout=180)
    rows = re.findall(r"^ +(\d+) +(raw|raygang) +(\d+) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) "
                      r"+(\d+) +(\d+|-) +[\d.]+$", out, re.MULTILINE)
    assert [(r[0], r[1]) for r in rows] == [("2", "raw"), ("2", "raygang")], out
    raygang_row = rows[1]
    assert raygang_row[2:4] == ("2", "0"), out  # both completed, none failed
    assert all(float(r[6]) > 0 and int(r[7]) > 0 for r in rows), out
    assert re.search(r"^ +2 +raygang/raw jobs/s: [\d.]+x", out, re.MULTILINE), out
    assert "train: not run (--train-runs 0)" in out, out
    handoff = re.findall(r"^ +(none|[\d.]+ GPUs) +1 +(\d+) +(\d+) +(\d+) +(\d+) +(\d+) +"
                         r"([\d.]+)$", out, re.MULTILINE)
    assert [h[0] for h in handoff] == ["none"], out
    (quiet,) = handoff
    assert quiet[1:4] == ("0", "0", "0"), out  # no neighbour, no hit, no requeue
    assert 0 < int(quiet[4]) <= int(quiet[5]) and float(quiet[6]) > 0, out
