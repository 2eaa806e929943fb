"""`raygang sim` from the command line (through the command's own function: the `raygang`
group registers it, see raygang/cli/main.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from raygang.sim.cli import sim

ROOT = Path(__file__).resolve().parents[2]
TRACE = """submit_s,duration_s,gpus,queue,name
0,600,8,a,first
10,300,8,b,second
20,60,16,a,wide
30,60,1,b,small
"""


def test_sim_replays_a_csv_and_writes_the_report(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    result = CliRunner().invoke(sim, [str(path), "--nodes", "2", "--policy", "raygang,fifo",
                                      "--out", str(tmp_path / "out"), "--no-plots", "-q"])
    assert result.exit_code == 0, result.output
    assert "raygang" in result.output and "fifo" in result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [p["jobs"]["completed"] for p in report["policies"]] == [4, 4]


def test_a_bad_trace_is_a_usage_error_with_the_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("submit_s,duration_s,gpus,queue\n0,10,1,a\n5,-1,1,a\n")
    result = CliRunner().invoke(sim, [str(path), "-q"])
    assert result.exit_code == 2
    assert f"{path}:3: duration_s" in result.output


def test_an_unknown_policy_is_a_usage_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    result = CliRunner().invoke(sim, [str(path), "--policy", "magic", "-q"])
    assert result.exit_code == 2 and "unknown policy 'magic'" in result.output


def test_the_command_module_is_light_and_the_simulator_never_imports_ray():
    # `raygang --help` loads raygang.sim.cli: no pydantic there; and nothing of the
    # simulator may pull Ray in (it runs the control plane alone).
    code = ("import sys, raygang.sim.cli; light = sorted(m for m in ('pydantic', 'ray') "
            "if m in sys.modules); import raygang.sim.api, raygang.sim.policies; "
            "print(light, sorted(m for m in ('ray', 'kubernetes', 'fastapi', "
            "'raygang.runtime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] []"


def test_the_example_trace_and_config_replay_under_every_policy():
    from raygang.sim.policies import POLICIES

    result = CliRunner().invoke(sim, [
        str(ROOT / "examples/sim/trace.csv"), "--config",
        str(ROOT / "examples/sim/scheduler.yaml"), "--nodes", "4", "-q",
        "--policy", ",".join(POLICIES)])
    assert result.exit_code == 0, result.output
    assert "12 / 0" in result.output  # every job completed under every policy


def test_the_benchmark_runs_quick():
    out = subprocess.run([sys.executable, "bench/sim.py", "--quick"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "simulated h / wall s" in out.stdout and "CC BY 4.0" in out.stdout
