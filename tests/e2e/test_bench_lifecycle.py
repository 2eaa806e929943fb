"""bench/lifecycle.py runs end to end and prints both sides and the ratio (--quick)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_lifecycle_benchmark_quick():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [sys.executable, "bench/lifecycle.py", "--quick"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    rows = re.findall(r"^ +(\d) +([\d.]+) +([\d.]+) +([\d.]+)x$", out.stdout, re.MULTILINE)
    assert [int(r[0]) for r in rows] == [1, 2], out.stdout
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows)
    assert "target raygang >= 0.9x raw at every size:" in out.stdout
