"""Running a script of this repository (an example, a benchmark) as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(path: str, *args: str, timeout: float) -> str:
    """Run `python <path> <args>` from the repository root and return its stdout; fail
    the test with its output if it exits non-zero.

    The environment has no `RAY_*` variables: a script that starts Ray starts its own
    local cluster, as on a fresh machine, rather than joining one this session started;
    it joins the session's cluster only when told to (the benchmarks' `--address`).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(
        [sys.executable, path, *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=timeout,
    )
    assert done.returncode == 0, f"{path} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout
