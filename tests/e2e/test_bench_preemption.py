"""bench/preemption.py runs end to end and prints both sides, the ratio and the target."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_preemption_benchmark_quick():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [sys.executable, "bench/preemption.py", "--quick"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    rows = re.findall(r"^ +(\d) GPU +([\d.]+) +([\d.]+) +([\d.]+)x +([\d.]+)$", out.stdout,
                      re.MULTILINE)
    assert [int(r[0]) for r in rows] == [1, 4], out.stdout
    for _, reserve, raw, _, answer in rows:
        assert 0 < float(raw) and 0 < float(reserve) <= float(answer)
    assert "target reserve < 1.4 s (KAI Scheduler publishes 13.9 s for one GPU):" in out.stdout
