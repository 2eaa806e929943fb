"""Running a script of this repository (an example, a benchmark) as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Ray's housekeeping made cheaper for the whole suite (tests/conftest.py says why), scripts'
# own clusters included: how often Ray looks for new log files and reads process stats for
# its dashboard, nothing a script's behaviour depends on.
HOUSEKEEPING = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0", "REPORTER_UPDATE_INTERVAL_MS": "30000"}


def ray_temp_root(name: str) -> str:
    """A Ray temp root of its own (`RAY_TMPDIR`) for one pytest-xdist worker's clusters.

    Ray finds a cluster without an address (Ray Train's internals, `ray.init()` in a job,
    the State API) through the newest cluster recorded in its temp dir, and rejects the
    dashboard's default ports once another cluster holds them. With each worker's clusters
    in a dir of their own, two workers never find each other's cluster.
    """
    path = Path("/tmp") / f"rg-{name}"  # short: Ray's socket paths live under it
    # ... and where a cluster started from this process records its address, whatever
    # temp dir the cluster itself is given (`Cluster(temp_dir=...)` writes it here): the
    # examples' cluster may be the first of a worker's, before any made this dir
    (path / "ray").mkdir(parents=True, exist_ok=True)
    return str(path)


def script_env() -> dict[str, str]:
    """The environment of a script run as a user would run it: no `RAY_*` variable, so it
    starts a cluster of its own (or joins the one it is told to), except Ray's housekeeping
    (`HOUSEKEEPING`) and, under
    pytest-xdist, a temp root of this worker's scripts (`ray_temp_root`): apart from the
    session's cluster and from the other worker's scripts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOUSEKEEPING)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        env["RAY_TMPDIR"] = ray_temp_root(f"{worker}-scripts")
    return env


def run_script(path: str, *args: str, timeout: float) -> str:
    """Run `python <path> <args>` from the repository root and return its stdout; fail
    the test with its output if it exits non-zero.

    `timeout` must be below pytest's per-test limit (300 s, pyproject.toml): then a script
    that hangs is killed here, and what its driver holds (placement groups, Ray jobs) goes
    with it, instead of outliving the failed test into the next ones on that cluster.

    The environment is `script_env()`: a script that starts Ray starts its own local
    cluster, as on a fresh machine, rather than joining one this session started; it joins
    the session's cluster only when told to (the benchmarks' `--address`).
    """
    done = subprocess.run(
        [sys.executable, path, *args], cwd=ROOT, env=script_env(),
        capture_output=True, text=True, timeout=timeout,
    )
    assert done.returncode == 0, f"{path} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout
