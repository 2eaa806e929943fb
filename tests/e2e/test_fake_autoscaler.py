"""`tests.fake_autoscaler.FakeAutoscalingCluster`: a local cluster that Ray's real autoscaler
(v1, fake multi-node provider) scales. The scenario runs in a subprocess
(`python -m tests.fake_autoscaler --selftest`, one JSON line) so that its driver does not
clash with this session's Ray cluster: two `gpu4` nodes join on `request_resources`, labelled
`ray.io/node-group=gpu4`, leave after the idle timeout once the request is cleared, and
shutdown leaves no process of that cluster (and spares one that only looks like Ray's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fake_autoscaler import NODE_GROUP_LABEL, FakeAutoscalingCluster, psutil
from tests.scripts import ROOT, script_env

pytestmark = pytest.mark.own_cluster  # see tests/conftest.py

BOUND_S = 30  # for nodes to join, and to leave; measured here ~4 s and ~2 s


def test_config_is_complete_and_labels_each_worker_type():
    c = FakeAutoscalingCluster(
        {"CPU": 2}, {"gpu4": {"resources": {"CPU": 4, "GPU": 4}, "max_workers": 2}},
        idle_timeout_minutes=0.1, upscaling_speed=2.0, provider={"launch_multiple": False})
    config = c.autoscaling_config("10.0.0.1:1234")
    assert config["provider"] == {
        "type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
        "disable_launch_config_check": True, "launch_multiple": False,
        "gcs_address": "10.0.0.1:1234"}
    gpu4 = config["available_node_types"]["gpu4"]
    assert gpu4["labels"] == {NODE_GROUP_LABEL: "gpu4"}
    assert (gpu4["min_workers"], gpu4["max_workers"], gpu4["node_config"]) == (0, 2, {})
    assert config["available_node_types"]["ray.head.default"] == {
        "resources": {"CPU": 2}, "node_config": {}, "max_workers": 0}
    assert config["idle_timeout_minutes"] == 0.1 and config["upscaling_speed"] == 2.0
    # Autoscaler v1 merges no defaults: every key it reads must be in the file.
    for key in ("max_workers", "head_node_type", "file_mounts", "cluster_synced_files",
                "worker_setup_commands", "worker_start_ray_commands", "auth", "docker"):
        assert key in config


def test_scale_up_on_request_down_when_idle_and_clean_shutdown():
    done = subprocess.run(
        [sys.executable, "-m", "tests.fake_autoscaler", "--selftest", "--bound", str(BOUND_S)],
        cwd=ROOT, env=script_env(), capture_output=True, text=True, timeout=180)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON (rc {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}"
    r = json.loads(lines[-1])
    print("fake autoscaler:", {k: r.get(k) for k in ("start_s", "up_s", "down_s", "shutdown_s")})
    assert r["ok"] and done.returncode == 0, f"{r}\n{done.stderr[-3000:]}"

    assert "autoscaler/_private/monitor.py" in r["monitor"]  # v1, not v2
    assert r["head_resources"] == {"CPU": 2.0}
    assert len(r["nodes"]) == 2
    for node in r["nodes"]:
        assert node["labels"][NODE_GROUP_LABEL] == "gpu4"
        assert node["resources"] == {"CPU": 4.0, "GPU": 4.0}
    assert r["raylets_while_up"] == 3  # head + 2 fake nodes, all found by the cluster
    assert r["up_s"] < BOUND_S and r["down_s"] < BOUND_S
    assert r["alive_nodes_after"] == 1

    assert r["processes_before_shutdown"] >= 6
    assert r["left_after_shutdown"] == []
    assert r["decoy_alive"], "shutdown killed a process that was not the cluster's"
    assert not os.path.exists(r["dir"])
    leftover = []
    for p in psutil.process_iter():
        try:
            if any(r["dir"] in a for a in p.cmdline()):
                leftover.append(p.pid)
        except psutil.Error:
            pass
    assert leftover == []
