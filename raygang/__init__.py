"""raygang: gang scheduling inside a Ray cluster.

Public names are loaded lazily so that `import raygang.core` (the pure policy) never
imports Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raygang._lazy import lazy_exports

__version__ = "0.1.0"

_PUBLIC = {
    "gang_task": "raygang.api",
    "gang": "raygang.api",
    "GangTask": "raygang.api",
    "Gang": "raygang.api",
    "GangRef": "raygang.api",
    "start": "raygang.api",
    "shutdown": "raygang.api",
    "list_gangs": "raygang.api",
    "dry_run": "raygang.api",
    "deploy": "raygang.api",
    "undeploy": "raygang.api",
    "list_deployments": "raygang.api",
    "queues": "raygang.api",
    "cluster": "raygang.api",
    "debug_cycle": "raygang.api",
    "QueueStatus": "raygang.control.status",
    "ClusterStatus": "raygang.control.status",
    "ScaleConfig": "raygang.control.config",
    "StateConfig": "raygang.control.config",
    "PolicyConfig": "raygang.core.config",
    "NodeType": "raygang.core.config",
    "DeploymentRef": "raygang.api",
    "JobRef": "raygang.api",
    "submit_job": "raygang.api",
    "list_jobs": "raygang.api",
    "train": "raygang.api",
    "tune": "raygang.runtime.client.tune",
    "JobSpec": "raygang.core.workload_specs",
    "RaygangTrain": "raygang.runtime.client.train_callback",
    "DryRunResult": "raygang.control.status",
    "DeploymentExistsError": "raygang.control.errors",
    "DeploymentSpec": "raygang.core.workload_specs",
    "QueueSpec": "raygang.core.queues",
    "get_context": "raygang.runtime.member.context",
    "GangContext": "raygang.runtime.member.context",
    "World": "raygang.runtime.member.context",
    "GangStatus": "raygang.control.status",
    "MemberStatus": "raygang.control.status",
    "GangError": "raygang.control.status",
    "GangFailedError": "raygang.control.errors",
    "GangCancelledError": "raygang.control.errors",
    "UnschedulableError": "raygang.control.errors",
    "SchedulerNotRunningError": "raygang.control.errors",
    "GangSpec": "raygang.core.spec",
    "RoleSpec": "raygang.core.spec",
    "SpecError": "raygang.core.spec",
    "Strategy": "raygang.core.spec",
    "Topology": "raygang.core.topology",
    "GangState": "raygang.core.gang",
    "SchedulerConfig": "raygang.control.config",
    "PriorityClass": "raygang.core.config",
    "Resources": "raygang.core.resources",
}

__all__ = sorted(_PUBLIC)


__getattr__ = lazy_exports(__name__, _PUBLIC, globals())


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from raygang.api import (
        DeploymentRef, Gang, GangRef, GangTask, deploy, dry_run, gang, gang_task,
        cluster, debug_cycle, list_deployments, list_gangs, queues, shutdown, start,
        undeploy,
    )
    from raygang.control.config import ScaleConfig, SchedulerConfig, StateConfig
    from raygang.core.config import NodeType, PolicyConfig, PriorityClass
    from raygang.core.gang import GangState
    from raygang.core.queues import QueueSpec
    from raygang.core.resources import Resources
    from raygang.core.spec import GangSpec, RoleSpec, SpecError, Strategy
    from raygang.core.topology import Topology
    from raygang.core.workload_specs import DeploymentSpec
    from raygang.runtime.client.tune import tune
    from raygang.runtime.member.context import GangContext, World, get_context
    from raygang.control.errors import (
        DeploymentExistsError, GangCancelledError, GangFailedError, SchedulerNotRunningError,
        UnschedulableError,
    )
    from raygang.control.status import (
        ClusterStatus, DryRunResult, GangError, GangStatus, MemberStatus, QueueStatus,
    )
