"""What of a gang is written to the store, and how it is read back after a restart.

A gang is one record (table `gangs`, key: its id): its spec and programs (the user's code,
pickled by value as Ray pickles remote functions), its kind and deployment, its place in
line (priority, sequence, submission time), its idempotency key, and where it stands
(state, reason, restarts, preemptions, error, cancellation, history). Member handles, the
asyncio task and result refs live only in the scheduler process. Queue changes made at run
time are records of table `queues`.

Records are pickled with the `pickler` given (a module with `dumps` and `loads`): the Ray
runtime gives Ray's cloudpickle, which ships user code defined in a driver script by value;
the default, the standard `pickle`, suits code that can be imported by name.
"""

from __future__ import annotations

import pickle
from typing import Any, Protocol

from raygang.core.gang import GangState
from raygang.core.queues import QueueSpec
from raygang.core.spec import GangSpec
from raygang.core.workload_specs import DeploymentSpec
from raygang.control import kinds
from raygang.control.records import GangRecord

GANGS = "gangs"
QUEUES = "queues"
RESULTS = "results"  # a finished gang's results, pickled (while small and recent)
FORMAT = 1  # bump when the record's shape changes; older records are read by version

_KEPT = ("gang_id", "kind", "priority", "seq", "submitted_at", "preemptible",
         "min_runtime_s", "reason", "nodes", "restarts", "preemptions", "preempted_by",
         "cancel_reason", "error", "started_at", "finished_at", "events", "members",
         "idempotency_key", "fingerprint", "not_before", "results_kept", "ray_job_id",
         "parent")


class Pickler(Protocol):
    def dumps(self, obj: Any) -> bytes: ...
    def loads(self, data: bytes) -> Any: ...


def dump_gang(record: GangRecord, pickler: Pickler = pickle) -> bytes:
    data: dict[str, Any] = {name: getattr(record, name) for name in _KEPT}
    data.update(
        format=FORMAT,
        state=record.state.value,
        spec=record.spec.model_dump(mode="json"),
        programs=record.programs,
        deployment=None if record.deployment is None else record.deployment.model_dump(
            mode="json"),
        app=record.app,
        workload=kinds.of(record.kind).dump_workload(record.workload),
    )
    return pickler.dumps(data)


def load_gang(raw: bytes, pickler: Pickler = pickle) -> GangRecord:
    data = pickler.loads(raw)
    if data.get("format") != FORMAT:
        raise ValueError(f"gang record format {data.get('format')!r}, expected {FORMAT}")
    record = GangRecord(
        gang_id=data["gang_id"],
        spec=GangSpec.model_validate(data["spec"]),
        programs=data["programs"],
        priority=data["priority"],
        seq=data["seq"],
        submitted_at=data["submitted_at"],
        kind=data["kind"],
    )
    for name in _KEPT:
        setattr(record, name, data.get(name))
    record.state = GangState(data["state"])
    if data["deployment"] is not None:
        record.deployment = DeploymentSpec.model_validate(data["deployment"])
    record.app = data["app"]
    record.workload = kinds.of(record.kind).load_workload(data.get("workload"))
    if record.state.finished:
        record.finished.set()
        record.released.set()
    return record


def dump_queue(queue: QueueSpec) -> bytes:
    return queue.model_dump_json().encode()


def load_queue(raw: bytes) -> QueueSpec:
    return QueueSpec.model_validate_json(raw)
