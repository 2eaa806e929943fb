"""How the examples connect: to RAY_ADDRESS if set, else a local cluster with virtual GPUs."""

from __future__ import annotations

import os

import ray


def connect(num_cpus: int = 4, num_gpus: int = 4, dashboard: bool = False) -> None:
    """`dashboard`: Ray Jobs need it (it serves the Job Submission API)."""
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # an existing cluster, e.g. RAY_ADDRESS=auto
    else:  # a new local one (even if /tmp/ray remembers another); the GPUs are virtual
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus,
                 include_dashboard=dashboard, **({"dashboard_port": 0} if dashboard else {}))
