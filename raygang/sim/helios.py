"""The SenseTime Helios job logs (SC'21, HeliosData), mapped onto raygang's words, with
one day's virtual-cluster sizes as quotas.

    job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,...,duration,queue
                                                    (<cluster>/cluster_log.csv)
    date,<vc>,<vc>,...,total                        (<cluster>/cluster_gpu_number.csv)

The mapping (stated in docs/simulator.md):
- Each virtual cluster (VC) is a tenant and becomes a queue. (The log's own `queue`
  column is the time a job queued, in seconds: not read.)
- Only GPU jobs are replayed: the CPU jobs (`gpu_num` 0), most of the log, are skipped,
  as are jobs that ran 0 s; both counts are in the trace's notes.
- A job's work is its `duration` (its end less its start, in seconds), whatever its final
  state: a job that failed or was cancelled held its GPUs that long.
- Its shape is its `node_num` nodes with `gpu_num / node_num` GPUs each where that
  divides evenly and fits a node, else whole nodes as in the Philly trace (`gang_shape`).
- With the sizes file (default: `cluster_gpu_number.csv` beside the log), each VC's
  quota is its share of the simulated cluster in proportion to its GPUs on the day the
  replay starts (the latest row on or before it, else the first), in whole nodes (largest
  remainder, as for Philly); jobs of VCs the file does not name are dropped (counted).
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from raygang.core.spec import describe_errors
from raygang.sim.philly import TIME_FORMAT, log_rows, proportional_nodes, window
from raygang.sim.trace import Trace, TraceError, TraceJob, gang_shape, open_text, sorted_jobs

ATTRIBUTION = (
    "Helios trace: SenseTime, CC BY 4.0 - Hu, Sun, Yan, Wen, Zhang, \"Characterization and "
    "Prediction of Deep Learning Workloads in Large-Scale GPU Datacenters\", SC'21 "
    "(https://doi.org/10.1145/3458817.3476223); HeliosData "
    "(github.com/S-Lab-System-Group/HeliosData).")
COLUMNS = ("vc", "gpu_num", "submit_time", "duration")


def is_helios(header: list[str]) -> bool:
    """Whether a CSV header is a Helios job log's."""
    return all(column in header for column in COLUMNS)


def read_vc_gpus(path: str | Path) -> dict[str, dict[str, int]]:
    """Day (YYYY-MM-DD) -> VC -> its GPUs that day (`cluster_gpu_number.csv`)."""
    path = Path(path)
    days: dict[str, dict[str, int]] = {}
    try:
        with open_text(path) as text:
            reader = csv.DictReader(text)
            vcs = [c for c in reader.fieldnames or [] if c not in ("date", "total")]
            if "date" not in (reader.fieldnames or []) or not vcs:
                raise TraceError(str(path), 1, "expected a header `date,<vc>,...,total`")
            for row in reader:
                try:
                    days[row["date"].strip()] = {vc: int(row[vc]) for vc in vcs}
                except (TypeError, ValueError):
                    raise TraceError(str(path), reader.line_num,
                                     "expected a whole number of GPUs for every VC") from None
    except OSError as error:
        raise TraceError(str(path), None, f"cannot read: {error.strerror or error}") from None
    if not days:
        raise TraceError(str(path), None, "no days")
    return days


def load_helios(jobs_path: str | Path, vc_gpus_path: str | Path | None = None, *,
                start: str | None = None, end: str | None = None, days: float | None = None,
                nodes: int = 80, gpus_per_node: int = 8) -> Trace:
    """The GPU jobs submitted in [start, end) (or `days` from `start`; default: the whole
    log), each VC a queue, with quotas from the VC sizes (module docstring)."""
    jobs_path = Path(jobs_path)
    beside = jobs_path.parent / "cluster_gpu_number.csv"
    if vc_gpus_path is None and beside.exists():
        vc_gpus_path = beside
    sizes = read_vc_gpus(vc_gpus_path) if vc_gpus_path is not None else None
    begin, stop = window(start, end, days)
    rows, skipped = _read(jobs_path, begin, stop, gpus_per_node)
    notes = []
    quotas: dict[str, int] = {}
    if sizes is not None and rows:
        day = _day(sizes, begin or rows[0][0])
        kept = [(at, job) for at, job in rows if job.queue in sizes[day]]
        if len(kept) < len(rows):
            notes.append(f"{len(rows) - len(kept)} jobs of VCs without a size dropped")
        rows = kept
        quotas = {vc: n * gpus_per_node
                  for vc, n in proportional_nodes(sizes[day], nodes).items()}
        notes.append(f"quotas: the {len(quotas)} VCs' GPUs on {day} scaled to {nodes} nodes")
    origin = begin or (rows[0][0] if rows else None)  # a dropped job does not start it
    if not rows or origin is None:
        raise TraceError(str(jobs_path), None,
                         f"no GPU jobs between {start or 'the start'} and "
                         f"{end or stop or 'the end'}")
    jobs = [job.model_copy(update={"submit_s": (at - origin).total_seconds()})
            for at, job in rows]
    notes.insert(0, f"{len(jobs)} GPU jobs submitted {rows[0][0]:%Y-%m-%d %H:%M} .. "
                    f"{rows[-1][0]:%Y-%m-%d %H:%M}")
    notes[1:1] = [f"{n} {what} skipped" for what, n in skipped.items() if n]
    return Trace(sorted_jobs(jobs), source=str(jobs_path), attribution=ATTRIBUTION,
                 start=origin.strftime(TIME_FORMAT), notes=tuple(notes), quotas=quotas)


def _day(sizes: dict[str, dict[str, int]], origin: datetime) -> str:
    """The sizes' latest day on or before `origin`, else their first."""
    on = origin.strftime("%Y-%m-%d")
    before = [day for day in sizes if day <= on]
    return max(before) if before else min(sizes)


def _shape(gpus: int, nodes: int, gpus_per_node: int) -> tuple[int, int]:
    if nodes >= 1 and gpus % nodes == 0 and gpus // nodes <= gpus_per_node:
        return nodes, gpus // nodes
    return gang_shape(gpus, gpus_per_node)


def _read(path: Path, begin: datetime | None, stop: datetime | None, gpus_per_node: int
          ) -> tuple[list[tuple[datetime, TraceJob]], dict[str, int]]:
    rows: list[tuple[datetime, TraceJob]] = []
    skipped = {"CPU jobs": 0, "jobs that ran 0 s": 0}
    source = str(path)
    for line, at, row in log_rows(path, COLUMNS, "submit_time", begin, stop):
        try:
            gpus, duration = int(row["gpu_num"]), float(row["duration"])
            nodes = int(row.get("node_num") or 1)
        except (TypeError, ValueError) as error:
            raise TraceError(source, line, f"bad row: {error}") from None
        if gpus == 0:
            skipped["CPU jobs"] += 1
            continue
        if duration == 0:
            skipped["jobs that ran 0 s"] += 1
            continue
        if gpus < 0 or duration < 0:
            raise TraceError(source, line, f"gpu_num {gpus} and duration {duration:g} s: "
                                           f"neither may be negative")
        members, each = _shape(gpus, nodes, gpus_per_node)
        job_id = (row.get("job_id") or "").strip()
        name = f"helios-{job_id}" if job_id.isalnum() else f"helios-{line:07d}"
        try:
            job = TraceJob(name=name, submit_s=0.0, duration_s=duration, members=members,
                           gpus_per_member=each, queue=(row["vc"] or "").strip())
        except ValidationError as error:
            field_name, message = next(describe_errors(error))
            column = "vc" if field_name == "queue" else field_name
            raise TraceError(source, line, f"{column}: {message}") from None
        rows.append((at, job))
    rows.sort(key=lambda pair: pair[0])  # a log is in job id order, not submission order
    return rows, skipped
