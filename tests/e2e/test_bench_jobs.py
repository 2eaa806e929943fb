"""bench/jobs.py runs end to end (--quick): both sides of the job burst, no raygang job
failed, the jobs/s ratio (its Train parts run Train through raygang as tests/integration/
test_train.py does: ~20 CPU-s a run here, so the quick mode runs none). It runs on the
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
    assert "hand-off window: not run (--handoff-runs 0)" in out, out
