"""Serve builds a deployment's config with a switch global to the process (cloudpickle's
"pickle this module by value": register, dump, unregister). The scheduler actor builds
applications in threads (two deploys at once each read their app's graph); unguarded,
one build unregisters the other's module and that deploy fails. No cluster: building an
application starts nothing."""

from __future__ import annotations

import threading

from raygang.core.workload_specs import DeploymentSpec
from raygang.runtime import serve_graph


def test_applications_read_in_threads_at_once_all_succeed():
    errors: list[str] = []

    def deploys() -> None:
        for _ in range(60):
            try:
                spec = serve_graph.complete(DeploymentSpec(
                    name="echo", import_path="raygang.demo:echo", replicas=1))
                assert spec.name == "echo"
            except Exception as error:  # noqa: BLE001 - counted, then asserted
                errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=deploys) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [], errors[:3]
