"""`tests.fake_autoscaler.FakeAutoscalingCluster`'s config: complete for Ray's v1
autoscaler, each worker type labelled. The cluster itself runs under raygang in
tests/e2e/test_scaling.py's autoscaler scenario: nodes join labelled on a request and leave
once it is cleared, v1's monitor runs, and shutdown takes all of its processes and spares
one that only looks like Ray's."""

from __future__ import annotations

from tests.fake_autoscaler import NODE_GROUP_LABEL, FakeAutoscalingCluster


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

