"""mypy, as configured in pyproject.toml [tool.mypy]: `raygang/core` and `raygang/control`
are strictly typed and clean, the rest of the package (but `raygang/sim`) checked (issue
29). A cache in a temp dir of the session: each run checks from scratch, as CI does (about
30 s on a loaded 2-core machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_core_and_control_are_strictly_typed_and_the_rest_checked(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy")],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout, out.stdout
