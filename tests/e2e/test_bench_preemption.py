"""bench/preemption.py runs end to end and prints both sides, the ratio and the target."""

from __future__ import annotations

import re

from tests.scripts import run_script


def test_preemption_benchmark_quick():
    out = run_script("bench/preemption.py", "--quick", timeout=400)
    rows = re.findall(r"^ +(\d) GPU +([\d.]+) +([\d.]+) +([\d.]+)x +([\d.]+)$", out,
                      re.MULTILINE)
    assert [int(r[0]) for r in rows] == [1, 4], out
    for _, reserve, raw, _, answer in rows:
        assert 0 < float(raw) and 0 < float(reserve) <= float(answer)
    assert "target reserve < 1.4 s (KAI Scheduler publishes 13.9 s for one GPU):" in out
