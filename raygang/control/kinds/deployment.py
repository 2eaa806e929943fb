"""A Serve application queued as one gang (its replicas are its members). Its payload is
`Served`: its `DeploymentSpec` and the application to deploy."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from raygang.control.kinds.kind import Kind
from raygang.core.lifecycle import Phases
from raygang.core.workload_specs import DeploymentSpec


@dataclass(frozen=True)
class Served:
    deployment: DeploymentSpec
    app: Any = None  # a bound Serve application, or its import path (None once ended)


def _dump(served: Served) -> dict[str, Any]:
    return {"deployment": served.deployment.model_dump(mode="json"), "app": served.app}


def _load(data: dict[str, Any]) -> Served:
    return Served(DeploymentSpec.model_validate(data["deployment"]), data.get("app"))


def _shed(served: Served) -> Served:
    return replace(served, app=None)  # user code is not needed once it has ended


def _in_format_1(record: dict[str, Any]) -> dict[str, Any]:
    return {"deployment": record["deployment"], "app": record.get("app")}


KIND = Kind(
    name="deployment",
    phases=Phases("capacity held on its nodes", "deploying the Serve app there",
                  "every replica running", "the Serve app ended"),
    dump_workload=_dump, load_workload=_load, shed=_shed, workload_in_format_1=_in_format_1,
    by_name=True, keeps_its_nodes=True, serves_until_stopped=True, hands_off_at_start=True,
)
