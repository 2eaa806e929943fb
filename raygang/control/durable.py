"""What of a gang is written to the store, and how it is read back after a restart.

A gang is one record (table `gangs`, key: its id): every field of its `GangRecord` but its
wait information and what only the scheduler process holds (`STORED`): its spec and
programs (the user's code, pickled by value as Ray pickles remote functions), its kind
and that kind's payload (`workload`), its place in line (priority, sequence, submission
time), its idempotency key, and where it stands (state, reason, restarts, preemptions,
error, cancellation, history). Member handles, the asyncio task and result refs live only
in the scheduler process (`GangRecord.live`). Queue changes made at run
time are records of table `queues`.

Records are pickled with the `pickler` given (a module with `dumps` and `loads`): the Ray
runtime gives Ray's cloudpickle, which ships user code defined in a driver script by value;
the default, the standard `pickle`, suits code that can be imported by name.
"""

from __future__ import annotations

import pickle
from dataclasses import fields
from typing import Any, Protocol

from raygang.core.gang import GangState
from raygang.core.queues import QueueSpec
from raygang.core.spec import GangSpec
from raygang.control import kinds
from raygang.control.records import GangRecord

GANGS = "gangs"
QUEUES = "queues"
RESULTS = "results"  # a finished gang's results, pickled (while small and recent)
# Bump when the record's shape changes, and read the older one too (`_from_format_1`).
# 2: a kind's payload is all in `workload` (format 1 kept a deployment's spec and app, and
# a job's Ray job id, in fields of their own).
FORMAT = 2

# What is stored of a record: every field but its wait information and what only this
# process holds (`GangRecord.wait`, `.live`); these are written in a form of their own.
STORED = tuple(f.name for f in fields(GangRecord) if f.name not in ("wait", "live"))
_AS_IS = tuple(n for n in STORED if n not in ("spec", "state", "workload"))


class Pickler(Protocol):
    def dumps(self, obj: Any) -> bytes: ...
    def loads(self, data: bytes) -> Any: ...


def dump_gang(record: GangRecord, pickler: Pickler = pickle) -> bytes:
    data: dict[str, Any] = {name: getattr(record, name) for name in _AS_IS}
    data.update(
        format=FORMAT,
        state=record.state.value,
        spec=record.spec.model_dump(mode="json"),
        workload=kinds.of(record.kind).dump_workload(record.workload),
    )
    return pickler.dumps(data)


def load_gang(raw: bytes, pickler: Pickler = pickle) -> GangRecord:
    data = pickler.loads(raw)
    if data.get("format") == 1:
        data = _from_format_1(data)
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
    for name in _AS_IS:
        if name in data:
            setattr(record, name, data[name])
    record.state = GangState(data["state"])
    record.workload = kinds.of(record.kind).load_workload(data.get("workload"))
    if record.state.finished:
        record.live.finished.set()
        record.live.released.set()
    return record


def _from_format_1(data: dict[str, Any]) -> dict[str, Any]:
    """A record as written by format 1 (before 2026-11-28), in format 2: its kind's payload
    gathered from the fields format 1 kept it in (each kind knows where)."""
    upgraded = {k: v for k, v in data.items() if k not in ("deployment", "app", "ray_job_id")}
    upgraded["workload"] = kinds.of(data["kind"]).workload_in_format_1(data)
    upgraded["format"] = 2
    return upgraded


def dump_queue(queue: QueueSpec) -> bytes:
    return queue.model_dump_json().encode()


def load_queue(raw: bytes) -> QueueSpec:
    return QueueSpec.model_validate_json(raw)
