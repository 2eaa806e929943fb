"""What a kind of workload is to the control plane, without Ray (see `control.kinds`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raygang.core.lifecycle import GANG_PHASES, Phases


def _as_is(workload: Any) -> Any:
    return workload


def _no_requester(workload: Any) -> str | None:
    return None


def controller_in_workload(workload: Any) -> str | None:
    """The requester a hand-off kind keeps in its payload's "controller" (a Train
    controller's actor id, or a Tune driver's "job:<id>")."""
    controller = (workload or {}).get("controller")
    return None if controller is None else str(controller)


def _nothing_shown(workload: Any) -> dict[str, Any]:
    return {}


def _stored_as_workload(record: dict[str, Any]) -> Any:
    return record.get("workload")


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of gang: the book-keeping every kind shares (queueing, priorities,
    preemption, the lifecycle, recovery) is the plane's; this is what differs.

    `name` is what a gang record and its status say (`GangRecord.kind`), and what the
    Ray side's run for it is registered under (`runtime.kinds`)."""

    name: str
    phases: Phases = GANG_PHASES  # the words its history uses for each step
    # Its payload (`GangRecord.workload`: what its runs need besides the gang's spec): as
    # written to the store (plain data the pickler can keep) and as read back; as kept
    # once the gang has ended (its user objects dropped); what its status shows of it
    # (`GangStatus` fields); and as a record of the store's format 1 held it (`durable`).
    dump_workload: Callable[[Any], Any] = _as_is
    load_workload: Callable[[Any], Any] = _as_is
    shed: Callable[[Any], Any] = _as_is
    shown: Callable[[Any], dict[str, Any]] = _nothing_shown
    workload_in_format_1: Callable[[dict[str, Any]], Any] = _stored_as_workload
    # The actor that queued it and must outlive its wait (a Train run's controller): a
    # run waiting for a dead one is cancelled, never admitted.
    requester: Callable[[Any], str | None] = _no_requester
    by_name: bool = False  # known by its spec's name, not its id (a Serve application)
    ray_job: bool = False  # a Ray Job: listed by `list_jobs`, has a Ray job's logs
    elastic: bool = True  # may have elastic roles (where the cluster resizes)
    # Its members stay on the nodes it was first given when it grows (Serve places a
    # deployment's replicas there: runtime/kinds/deployment/launch.py).
    keeps_its_nodes: bool = False
    # Its members run until it is stopped, not until their programs return (a Serve
    # application's replicas serve until it is undeployed).
    serves_until_stopped: bool = False
    # While it starts, its capacity passes from raygang's holds to a library's own group
    # (Serve's): booked to it, but in Ray's view neither held nor used until that group is
    # placed (runtime/scheduler/observe.py counts it as used meanwhile).
    hands_off_at_start: bool = False

    def display(self, gang_id: str, spec_name: str) -> str:
        """How a reason names a gang of this kind: "deployment llm", "job j-1a2b3c4d"."""
        return f"{self.name} {spec_name if self.by_name else gang_id}"
