"""A Train V2 run in a raygang job rides out a GCS outage that loses its worker group's
creation (tests/integration/train_gcs_outage.py runs it in a subprocess, with Redis as
the GCS's store): the GCS is killed just as Train starts the group's workers, Ray never
creates them, and raygang removes their placement group 30 s on, so that Train gives
up that start instead of waiting for ever; the job then runs to success, and nothing is
left behind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import script_env

pytestmark = pytest.mark.own_cluster  # see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)  # a loaded machine may take minutes to start the job's driver
def test_a_train_run_whose_workers_the_gcs_lost_goes_on_and_succeeds():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")
    proc = subprocess.run([sys.executable, "-m", "tests.integration.train_gcs_outage"],
                          cwd=ROOT, env=script_env(), capture_output=True, text=True,
                          timeout=560)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, (proc.stdout[-2000:], proc.stderr[-2000:])
    out = json.loads(lines[-1])
    if not out["lost_workers"]:
        # The kill came once Train's workers had started: this run did not lose them
        pytest.skip(f"the GCS kill did not lose the workers' creation this time: {out}")
    assert out["job"][0] == "SUCCEEDED", out  # before: it waited for ever
    assert out["trained"], out
    assert out["train_groups_left"] == 0, out
