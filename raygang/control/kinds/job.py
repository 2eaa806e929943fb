"""A Ray Job: its entrypoint is submitted through Ray's Job Submission API once its budget
is reserved. Its durable payload is its `JobSpec`."""

from __future__ import annotations

from typing import Any

from raygang.control.kinds.kind import Kind
from raygang.core.lifecycle import Phases
from raygang.core.workload_specs import JobSpec


def _dump(job: Any) -> Any:
    return job.model_dump(mode="json") if isinstance(job, JobSpec) else job


def _load(data: Any) -> Any:
    return JobSpec.model_validate(data)


KIND = Kind(
    name="job",
    phases=Phases("capacity held on its nodes", "submitting the Ray job",
                  "the Ray job is running", "the Ray job succeeded"),
    dump_workload=_dump, load_workload=_load,
    ray_job=True,
    elastic=False,  # a job's budget is one fixed set of bundles
)
