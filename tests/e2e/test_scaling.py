"""raygang grows and shrinks a Ray cluster to what its queue needs, end to end, in both
modes (see tests/e2e/scaling_scenarios.py; each scenario runs on a Ray cluster of its own,
in a process of its own)."""

from __future__ import annotations

import json
import re
import subprocess
import sys


import pytest

from tests.scripts import ROOT, script_env

pytestmark = pytest.mark.own_cluster  # see tests/conftest.py


def scenario_output(module: str, *args: str, timeout: float = 300) -> dict:
    """Run `python -m module args` on a Ray cluster of its own; the JSON it printed."""
    env = script_env()
    env["RAY_AUTH_MODE"] = "disabled"  # local test clusters: no token (stated, not default)
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"{module}:\n{done.stdout}\n{done.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def scenario(name: str, timeout: float = 300) -> dict:
    return scenario_output("tests.e2e.scaling_scenarios", name, timeout=timeout)


def assert_one_round_trip(result: dict) -> None:
    # Asked within one cycle of the submission, told the user so, ran on the new nodes.
    assert result["request_s"] < 1.0, result
    assert re.search(r"waiting for (2 nodes|1 node) of group gpu \(requested at ", result["reason"])
    assert len(result["nodes"]) == 2
    assert result["running_s"] < 60


@pytest.fixture(scope="module")
def kuberay() -> dict:
    """The kuberay scenario: a gang's round trip, then a burst of short gangs (one cluster)."""
    return scenario("kuberay")


def test_kuberay_mode_grows_for_a_gang_and_releases_the_idle_nodes(kuberay):
    result = kuberay
    assert_one_round_trip(result)
    # Driven only by raygang's patches: 0 -> 2 for the gang, then each idle node named.
    gpu = [r for g, r in result["replica_history"] if g == "gpu"]
    # (The two nodes go in one patch or two, as their idle clocks ran out together or not.)
    assert gpu in ([0, 2, 1, 0], [0, 2, 0]), result["replica_history"]
    assert [r for g, r in result["replica_history"] if g == "cpu"] == [0]
    actions = result["scaling"]["actions"]
    assert actions[0].endswith("gpu: replicas 0 -> 2"), actions
    named = [pod for a in actions if "workersToDelete +=" in a
             for pod in re.findall(r"raygang-gpu-worker-[a-z]{5}", a)]
    assert len(set(named)) == 2, actions  # each idle node named once, by its pod


def test_autoscaler_mode_asks_rays_autoscaler_and_clears_the_request():
    result = scenario("autoscaler")
    assert_one_round_trip(result)
    assert result["released_after_s"] < 90
    # The fake autoscaling cluster under it (tests/fake_autoscaler.py) is Ray's v1 monitor,
    # and its shutdown takes all of its processes and nothing else.
    assert "autoscaler/_private/monitor.py" in result["monitor"], result["monitor"]
    assert result["processes_before_shutdown"] >= 6
    assert result["left_after_shutdown"] == [] and not result["dir_left"]
    assert result["decoy_alive"], "shutdown killed a process that was not the cluster's"


def test_a_burst_of_short_gangs_does_not_make_the_cluster_flap(kuberay):
    seen = kuberay["burst"]["replicas_seen"]
    # Replicas rise while gangs keep coming and fall only once they have all ended:
    # one peak, never down-then-up (the hysteresis of core.scale).
    peak = seen.index(max(seen))
    assert seen[: peak + 1] == sorted(seen[: peak + 1]), seen
    assert seen[peak:] == sorted(seen[peak:], reverse=True), seen
    assert seen[0] == 0 and seen[-1] == 0 and 1 <= max(seen) <= 3, seen
