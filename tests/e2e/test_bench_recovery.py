"""bench/recovery.py runs end to end and prints every figure (small sizes: --quick)."""

from __future__ import annotations

import re

from tests.scripts import run_script


def test_recovery_benchmark_quick():
    out = run_script("bench/recovery.py", "--quick", timeout=280)
    for store in ("gcs", "memory"):
        assert re.search(rf"^  submit with store {store} +[\d.]+/s +[\d.]+/s +median +[\d.]+/s$",
                         out, re.MULTILINE), out
    assert re.search(r"^  durable / memory: [\d.]+x", out, re.MULTILINE), out
    ready = re.search(r"^  kill -> restarted actor answers: ([\d.]+) s; -> ready \(state read "
                      r"back, 20 running gangs adopted\): ([\d.]+) s", out, re.MULTILINE)
    assert ready and float(ready.group(1)) <= float(ready.group(2)), out
    # Nothing lost, every running gang adopted (none restarted).
    assert re.search(r"^  after the restart: 200 gangs known, 180 pending, 20 adopted, "
                     r"0 requeued, 0 orphans removed$", out, re.MULTILINE), out
