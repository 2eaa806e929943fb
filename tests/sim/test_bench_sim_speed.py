"""bench/sim_speed.py runs end to end on a small slice of the shipped Philly week (Microsoft
Philly trace, CC BY 4.0, see raygang/sim/data/SOURCE.txt): a line per policy with its wall
and CPU seconds, every outcome saved, and a second run checked against it (the same
decisions: the simulator is deterministic), which also shows that a changed outcome fails."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.scripts import ROOT, run_script

SLICE = ("--days", "0.1", "--nodes", "8", "--policies", "raygang,kueue")


def test_sim_speed_saves_every_outcome_and_a_second_run_decides_the_same(tmp_path):
    saved = tmp_path / "outcomes.json"
    out = run_script("bench/sim_speed.py", *SLICE, "--save", str(saved), timeout=240)
    rows = re.findall(r"^ *(\w+): +[\d.]+ s wall, +[\d.]+ s CPU, +(\d+) cycles", out, re.M)
    assert [r[0] for r in rows] == ["raygang", "kueue"] and all(int(r[1]) > 0 for r in rows)
    assert "CC BY 4.0" in out or "Philly" in out, out
    outcomes = json.loads(saved.read_text())
    assert set(outcomes) == {"raygang", "kueue"} and outcomes["raygang"]["jobs"]

    checked = run_script("bench/sim_speed.py", *SLICE, "--check", str(saved), timeout=240)
    assert checked.count("same outcome") == 2, checked

    # One job's recorded start moved: the check names it and exits 1.
    name = sorted(outcomes["kueue"]["jobs"])[0]
    outcomes["kueue"]["jobs"][name]["first_start"] = -1.0
    saved.write_text(json.dumps(outcomes))
    done = subprocess.run([sys.executable, "bench/sim_speed.py", *SLICE, "--check", str(saved)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1 and f"DIFFERS at /jobs/{name}/" in done.stdout, done.stdout


def test_the_walk_baseline_replays_gang_by_gang_side_by_side_and_decides_the_same(tmp_path):
    """Best-effort lines (`backfill: true`), where the walk jumps over runs: the replay
    again with every run cut to one gang prints its times, the ratio, and the same outcome."""
    config = tmp_path / "best-effort.yaml"
    config.write_text("backfill: true\n")
    out = run_script("bench/sim_speed.py", "--days", "0.1", "--nodes", "8", "--policies",
                     "raygang", "--config", str(config), "--walk-baseline", timeout=240)
    assert re.search(r"gang by gang: +[\d.]+ s wall, +[\d.]+ s CPU; runs jumped: [\d.]+x "
                     r"less CPU, same outcome", out), out
