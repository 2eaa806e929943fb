"""A Ray Job: its entrypoint is submitted through Ray's Job Submission API once its budget
is reserved. Its payload is `RayJob`: its `JobSpec`, and the Ray job of its last attempt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raygang.control.kinds.kind import Kind
from raygang.core.lifecycle import Phases
from raygang.core.workload_specs import JobSpec


@dataclass
class RayJob:
    job: JobSpec
    ray_job_id: str | None = None  # its last attempt's Ray job (set when submitted to Ray)


def _dump(payload: RayJob) -> dict[str, Any]:
    return {"job": payload.job.model_dump(mode="json"), "ray_job_id": payload.ray_job_id}


def _load(data: dict[str, Any]) -> RayJob:
    return RayJob(JobSpec.model_validate(data["job"]), data.get("ray_job_id"))


def _shown(payload: RayJob) -> dict[str, Any]:
    return {"ray_job_id": payload.ray_job_id, "entrypoint": payload.job.entrypoint}


def _in_format_1(record: dict[str, Any]) -> dict[str, Any]:
    return {"job": record["workload"], "ray_job_id": record.get("ray_job_id")}


KIND = Kind(
    name="job",
    phases=Phases("capacity held on its nodes", "submitting the Ray job",
                  "the Ray job is running", "the Ray job succeeded"),
    dump_workload=_dump, load_workload=_load, shown=_shown, workload_in_format_1=_in_format_1,
    ray_job=True,
    elastic=False,  # a job's budget is one fixed set of bundles
)
