"""A trace to replay: jobs with a submission time, a duration, a gang shape and a tenant.

The trace CSV format (`load_csv`), one job per row, with a header:

    submit_s,duration_s,gpus,queue,priority,name
    0,3600,8,team-a,training,resnet-1
    30,600,32,team-b,,bert-large

- `submit_s` (required): when the job is submitted, in seconds from the trace's start (>= 0).
- `duration_s` (required): seconds of work it needs on its GPUs (> 0); a job preempted loses
  the work since its last checkpoint and needs it again.
- `gpus` or `shape` (one is required): `gpus` is the job's GPU count; a job of up to one
  node's GPUs is one member on one node, a larger one a gang of whole nodes (`gang_shape`).
  `shape` gives the gang explicitly as `MEMBERSxGPUS` (`4x8`: four members of 8 GPUs each).
- `queue` (required): the tenant's queue. When the queues are configured (a scheduler config
  or a quota file), a job of any other queue is an error.
- `priority` (optional): a priority class name (`training`, `batch`, `inference`...) or an
  integer; empty means `training`.
- `name` (optional): the job's name in reports; default `job-<row>`.
- `start_s` (optional): the job's own start time (admitted to running) as measured on the
  cluster that ran it; empty means the replay's `SimSettings.start_s`. A trace recorded
  from a real run replays each gang at the pace Ray really started it.

Other columns are ignored. Rows are validated one by one: a bad file is rejected with the
line number and the reason (`TraceError`).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from raygang.core.spec import NAME_PATTERN, describe_errors

REQUIRED = ("submit_s", "duration_s", "queue")


class TraceError(ValueError):
    """A trace file that cannot be replayed: where (file and line) and why."""

    def __init__(self, source: str, line: int | None, message: str):
        self.source, self.line, self.reason = source, line, message
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")


class TraceJob(BaseModel):
    """One job of a trace. `members` x `gpus_per_member` GPUs (see `gang_shape`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    submit_s: float = Field(ge=0, allow_inf_nan=False)
    duration_s: float = Field(gt=0, allow_inf_nan=False)
    members: int = Field(ge=1)
    gpus_per_member: int = Field(ge=1)
    queue: str = Field(pattern=NAME_PATTERN)
    priority: int | str = "training"
    # Measured admitted -> running of this job on a recorded cluster; None: the replay's
    # SimSettings.start_s (one mean for every gang).
    start_s: float | None = Field(None, ge=0, allow_inf_nan=False)

    @field_validator("priority", mode="before")
    @classmethod
    def _class_or_int(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip()
            if not value:
                return "training"
            try:
                return int(value)
            except ValueError:
                return value
        return value

    @property
    def gpus(self) -> int:
        return self.members * self.gpus_per_member

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * self.duration_s


def gang_shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(members, GPUs per member) of a job asking for `gpus`: up to a node, one member on
    one node; beyond, whole nodes, as many as hold them (a 12-GPU job takes two 8-GPU
    nodes: schedulers of the trace's era gave multi-node jobs whole machines)."""
    if gpus <= gpus_per_node:
        return 1, gpus
    return math.ceil(gpus / gpus_per_node), gpus_per_node


@dataclass(frozen=True)
class Trace:
    """Jobs sorted by submission (then name), with where they came from. `attribution`
    is repeated wherever the jobs or results computed from them are shown (licences)."""

    jobs: tuple[TraceJob, ...]
    source: str
    attribution: str = ""
    start: str | None = None  # wall-clock time of submit_s 0, if the trace has one
    notes: tuple[str, ...] = ()  # what loading dropped or changed, for the report
    quotas: dict[str, int] = field(default_factory=dict)  # queue -> guaranteed GPUs, if known

    @property
    def queues(self) -> list[str]:
        return sorted({job.queue for job in self.jobs} | set(self.quotas))

    @property
    def span_s(self) -> float:
        return self.jobs[-1].submit_s - self.jobs[0].submit_s if self.jobs else 0.0


def sorted_jobs(jobs: Iterable[TraceJob]) -> tuple[TraceJob, ...]:
    return tuple(sorted(jobs, key=lambda j: (j.submit_s, j.name)))


def open_text(path: Path) -> io.TextIOBase:
    """A CSV file, gzip-compressed or not."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def load_csv(path: str | Path, gpus_per_node: int = 8,
             queues: Collection[str] | None = None) -> Trace:
    """Read a trace in the format of this module's docstring. `queues`: the known
    queues (a job of another one is an error); None accepts every queue."""
    path = Path(path)
    try:
        with open_text(path) as text:
            jobs = list(parse_rows(csv.DictReader(text), str(path), gpus_per_node, queues))
    except OSError as error:
        raise TraceError(str(path), None, f"cannot read: {error.strerror or error}") from None
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as error:
        raise TraceError(str(path), None, f"not a CSV text file ({error})") from None
    if not jobs:
        raise TraceError(str(path), None, "no jobs in the trace")
    return Trace(sorted_jobs(jobs), source=str(path))


def parse_rows(reader: csv.DictReader, source: str, gpus_per_node: int,
               queues: Collection[str] | None) -> Iterator[TraceJob]:
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in header]
    if "gpus" not in header and "shape" not in header:
        missing.append("gpus (or shape)")
    if missing:
        raise TraceError(source, 1, f"missing column(s): {', '.join(missing)} "
                                    f"(header: {','.join(header) or 'empty'})")
    known = None if queues is None else set(queues)
    names: set[str] = set()
    for row in reader:
        line = reader.line_num
        job = _job(row, line, source, gpus_per_node)
        if known is not None and job.queue not in known:
            raise TraceError(source, line, f"queue: unknown tenant {job.queue!r} (known: "
                                           f"{', '.join(sorted(known))})")
        if job.name in names:
            raise TraceError(source, line, f"name: job {job.name!r} appears twice")
        names.add(job.name)
        yield job


def _job(row: dict, line: int, source: str, gpus_per_node: int) -> TraceJob:
    if None in row:  # more fields than the header has
        raise TraceError(source, line, "more fields than the header names")
    members, per_member = _shape(row, line, source, gpus_per_node)
    fields = {
        "name": (row.get("name") or "").strip() or f"job-{line}",
        "submit_s": _number(row, "submit_s", line, source),
        "duration_s": _number(row, "duration_s", line, source),
        "members": members, "gpus_per_member": per_member,
        "queue": (row.get("queue") or "").strip(),
        "priority": row.get("priority") or "",
    }
    if (row.get("start_s") or "").strip():
        fields["start_s"] = _number(row, "start_s", line, source)
    try:
        return TraceJob(**fields)
    except ValidationError as error:
        field_name, message = next(describe_errors(error))
        raise TraceError(source, line, f"{field_name}: {message}") from None


def _number(row: dict, column: str, line: int, source: str) -> float:
    text = (row.get(column) or "").strip()
    try:
        return float(text)
    except ValueError:
        raise TraceError(source, line, f"{column}: not a number: {text!r}") from None


def _shape(row: dict, line: int, source: str, gpus_per_node: int) -> tuple[int, int]:
    shape = (row.get("shape") or "").strip()
    if shape:
        count, sep, each = shape.lower().partition("x")
        if not sep or not count.isdigit() or not each.isdigit() or "0" in (count, each):
            raise TraceError(source, line, f"shape: expected MEMBERSxGPUS such as 4x8, "
                                           f"got {shape!r}")
        return int(count), int(each)
    text = (row.get("gpus") or "").strip()
    if not text.isdigit() or int(text) < 1:
        raise TraceError(source, line, f"gpus: expected a whole number >= 1, got {text!r}")
    return gang_shape(int(text), gpus_per_node)
