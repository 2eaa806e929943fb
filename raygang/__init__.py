"""raygang: gang scheduling inside a Ray cluster.

Public names are loaded lazily so that `import raygang.core` (the pure policy) never
imports Ray.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    "QueueStatus": "raygang.runtime.status",
    "ClusterStatus": "raygang.runtime.status",
    "ScaleConfig": "raygang.core.config",
    "NodeType": "raygang.core.config",
    "DeploymentRef": "raygang.api",
    "DryRunResult": "raygang.runtime.status",
    "DeploymentExistsError": "raygang.runtime.errors",
    "DeploymentSpec": "raygang.core.spec",
    "QueueSpec": "raygang.core.queues",
    "get_context": "raygang.runtime.context",
    "GangContext": "raygang.runtime.context",
    "GangStatus": "raygang.runtime.status",
    "MemberStatus": "raygang.runtime.status",
    "GangError": "raygang.runtime.status",
    "GangFailedError": "raygang.runtime.errors",
    "GangCancelledError": "raygang.runtime.errors",
    "UnschedulableError": "raygang.runtime.errors",
    "SchedulerNotRunningError": "raygang.runtime.errors",
    "GangSpec": "raygang.core.spec",
    "RoleSpec": "raygang.core.spec",
    "SpecError": "raygang.core.spec",
    "Strategy": "raygang.core.spec",
    "GangState": "raygang.core.gang",
    "SchedulerConfig": "raygang.core.config",
    "PriorityClass": "raygang.core.config",
    "Resources": "raygang.core.resources",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'raygang' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from raygang.api import (
        DeploymentRef, Gang, GangRef, GangTask, deploy, dry_run, gang, gang_task,
        cluster, list_deployments, list_gangs, queues, shutdown, start, undeploy,
    )
    from raygang.core.config import NodeType, PriorityClass, ScaleConfig, SchedulerConfig
    from raygang.core.gang import GangState
    from raygang.core.queues import QueueSpec
    from raygang.core.resources import Resources
    from raygang.core.spec import DeploymentSpec, GangSpec, RoleSpec, SpecError, Strategy
    from raygang.runtime.context import GangContext, get_context
    from raygang.runtime.errors import (
        DeploymentExistsError, GangCancelledError, GangFailedError, SchedulerNotRunningError,
        UnschedulableError,
    )
    from raygang.runtime.status import (
        ClusterStatus, DryRunResult, GangError, GangStatus, MemberStatus, QueueStatus,
    )
