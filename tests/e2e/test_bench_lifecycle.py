"""bench/lifecycle.py runs end to end and prints both sides and the ratio (--quick), on the
session's cluster (--address): no cluster of its own to start, and the leak check after."""

from __future__ import annotations

import re

from tests.scripts import run_script


def test_lifecycle_benchmark_quick(ray_cluster):
    out = run_script("bench/lifecycle.py", "--quick", "--address", ray_cluster.address,
                     timeout=270)
    rows = re.findall(r"^ +(\d) +([\d.]+) +([\d.]+) +([\d.]+)x$", out, re.MULTILINE)
    assert [int(r[0]) for r in rows] == [1, 2], out
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows)
    assert "target raygang >= 0.9x raw at every size:" in out
