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
    # Shrink vs preempt: the elastic gang gives up its surplus and runs on at its minimum;
    # the rigid one is stopped whole and loses its work.
    elastic = re.search(r"^ +elastic 4\.\.8 +([\d.]+) +(\d)/1 +([\d.]+) +(\d+)$", out, re.M)
    rigid = re.search(r"^ +rigid 8 +([\d.]+) +(\d)/1 +([\d.]+) +(\d+)$", out, re.M)
    assert elastic and rigid, out
    assert (elastic[2], float(elastic[3]), elastic[4]) == ("0", 0.0, "4")
    assert rigid[2] == "1" and float(rigid[3]) > 0 and rigid[4] == "0"
