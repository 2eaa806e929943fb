"""The Microsoft Philly trace (ATC'19) as processed by the Pollux authors, and the Helios
authors' node count per virtual cluster, mapped onto raygang's words.

    timestamp,duration,num_gpus,gpu_time,cluster      (philly_jobs_sep_oct.csv.gz)
    vc,node num                                       (philly_vc_nodes.csv)

The mapping (stated in docs/simulator.md): each Philly virtual cluster (VC) is a tenant and
becomes a queue; its quota is its share of the simulated cluster in proportion to its
node count in `philly_vc_nodes.csv`, in whole nodes (largest remainder, so the quotas add
up to the cluster and match a static partition of it). A job is `training` (preemptible)
and its `duration` (seconds of execution, summed over Philly's attempts) is its work. Jobs
of up to 8 GPUs are one member on one node; larger ones gangs of whole 8-GPU nodes
(`trace.gang_shape`). VCs without a node count (four tiny ones, 18 jobs in the whole file)
are dropped, as the file's SOURCE.txt allows; the count dropped is in the trace's notes.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path

from raygang.sim.trace import Trace, TraceError, TraceJob, gang_shape, open_text, sorted_jobs

ATTRIBUTION = (
    "Philly trace: Microsoft, CC BY 4.0 - Jeon, Venkataraman, Phanishayee, Qian, Xiao, Yang, "
    "\"Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads\", USENIX "
    "ATC 2019 (https://arxiv.org/abs/1901.05758); provided \"as is\". Job CSV as flattened by "
    "the Pollux authors (Qiao et al., OSDI 2021; github.com/petuum/adaptdl, Apache-2.0); "
    "September-October rows kept. VC node counts: HeliosArtifact (Hu et al., SC'21; MIT "
    "licence, Copyright (c) 2021-present NTU S-Lab).")
COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def is_philly(header: list[str]) -> bool:
    """Whether a CSV header is the Philly job file's."""
    return "num_gpus" in header and "cluster" in header


def read_vc_nodes(path: str | Path) -> dict[str, int]:
    """VC -> its node count (`philly_vc_nodes.csv`: header `vc,node num`)."""
    path = Path(path)
    out: dict[str, int] = {}
    try:
        with open_text(path) as text:
            reader = csv.reader(text)
            header = next(reader, None)
            if header is None or len(header) < 2:
                raise TraceError(str(path), 1, "expected a header `vc,node num`")
            for row in reader:
                if len(row) < 2 or not row[1].strip().isdigit():
                    raise TraceError(str(path), reader.line_num,
                                     f"expected `vc,nodes` with a whole number, got {row!r}")
                out[row[0].strip()] = int(row[1])
    except OSError as error:
        raise TraceError(str(path), None, f"cannot read: {error.strerror or error}") from None
    return out


def proportional_nodes(weights: Mapping[str, int], nodes: int) -> dict[str, int]:
    """`nodes` whole nodes shared in proportion to `weights` (largest remainder; ties by
    name): what each tenant is guaranteed, and its static partition."""
    total = sum(weights.values())
    if total <= 0:
        raise ValueError("the node counts add up to nothing")
    exact = {vc: nodes * w / total for vc, w in weights.items()}
    given = {vc: math.floor(x) for vc, x in exact.items()}
    left = nodes - sum(given.values())
    for vc in sorted(exact, key=lambda v: (given[v] - exact[v], v))[:left]:
        given[vc] += 1
    return given


def load_philly(jobs_path: str | Path, vc_nodes_path: str | Path | None = None, *,
                start: str | None = None, end: str | None = None, days: float | None = None,
                nodes: int = 80, gpus_per_node: int = 8) -> Trace:
    """The jobs submitted in [start, end) (or `days` from `start`; default: the whole
    file), each VC a queue. With `vc_nodes_path` (default: `philly_vc_nodes.csv` beside
    the jobs file, if there), the VCs it lists get quotas of `nodes` x `gpus_per_node`
    GPUs in proportion to their node counts, and jobs of other VCs are dropped."""
    jobs_path = Path(jobs_path)
    if vc_nodes_path is None and (jobs_path.parent / "philly_vc_nodes.csv").exists():
        vc_nodes_path = jobs_path.parent / "philly_vc_nodes.csv"
    vc_nodes = read_vc_nodes(vc_nodes_path) if vc_nodes_path is not None else None
    begin, stop = window(start, end, days)
    rows, dropped = _read(jobs_path, begin, stop, vc_nodes, gpus_per_node)
    if not rows:
        raise TraceError(str(jobs_path), None, f"no jobs between {start} and {end or stop}")
    origin = begin or rows[0][0]
    jobs = [job.model_copy(update={"submit_s": (at - origin).total_seconds()})
            for at, job in rows]
    notes = [f"{len(jobs)} jobs submitted {origin:%Y-%m-%d %H:%M} .. {rows[-1][0]:%Y-%m-%d %H:%M}"]
    if dropped:
        notes.append(f"{dropped} jobs of VCs without a node count dropped")
    quotas = {}
    if vc_nodes:
        quotas = {vc: n * gpus_per_node
                  for vc, n in proportional_nodes(vc_nodes, nodes).items()}
        notes.append(f"quotas: the {len(vc_nodes)} VCs' node counts scaled to {nodes} nodes")
    return Trace(sorted_jobs(jobs), source=str(jobs_path), attribution=ATTRIBUTION,
                 start=origin.strftime(TIME_FORMAT), notes=tuple(notes), quotas=quotas)


def window(start: str | None, end: str | None, days: float | None
           ) -> tuple[datetime | None, datetime | None]:
    """The submissions kept, [begin, stop): from `start` (or the first), to `end` (or
    `days` after `start`, or the last)."""
    begin = _when(start, "start") if start else None
    if days is not None:
        if begin is None:
            raise ValueError("--days needs --start")
        return begin, begin + timedelta(days=days)
    return begin, _when(end, "end") if end else None


def _when(text: str, what: str) -> datetime:
    for fmt in (TIME_FORMAT, "%Y-%m-%d"):
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    raise ValueError(f"--{what}: expected YYYY-MM-DD[ HH:MM:SS], got {text!r}")


def log_rows(path: Path, columns: tuple[str, ...], time_column: str,
             begin: datetime | None, stop: datetime | None
             ) -> Iterator[tuple[int, datetime, dict[str, str]]]:
    """(line, submission time, row) of each row of a job log submitted in [begin, stop):
    a CSV whose `time_column` holds fixed-width times (Philly's, Helios's). A missing
    column or a bad time is a `TraceError` with the line."""
    low = begin.strftime(TIME_FORMAT) if begin is not None else ""
    high = stop.strftime(TIME_FORMAT) if stop is not None else ""
    source = str(path)
    try:
        with open_text(path) as text:
            reader = csv.DictReader(text)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(source, 1, f"missing column(s): {', '.join(missing)}")
            for row in reader:
                stamp = row[time_column] or ""
                # Fixed-width times sort as text: skip rows outside without parsing.
                if (low and stamp < low) or (high and stamp >= high):
                    continue
                try:
                    at = datetime.strptime(stamp, TIME_FORMAT)
                except (TypeError, ValueError) as error:
                    raise TraceError(source, reader.line_num, f"bad row: {error}") from None
                yield reader.line_num, at, row
    except OSError as error:
        raise TraceError(source, None, f"cannot read: {error.strerror or error}") from None
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as error:
        raise TraceError(source, None, f"not a CSV text file ({error})") from None


def _read(path: Path, begin: datetime | None, stop: datetime | None,
          vc_nodes: Mapping[str, int] | None, gpus_per_node: int
          ) -> tuple[list[tuple[datetime, TraceJob]], int]:
    rows: list[tuple[datetime, TraceJob]] = []
    dropped = 0
    source = str(path)
    for line, at, row in log_rows(path, COLUMNS, "timestamp", begin, stop):
        try:
            duration, gpus = float(row["duration"]), int(row["num_gpus"])
        except (TypeError, ValueError) as error:
            raise TraceError(source, line, f"bad row: {error}") from None
        vc = row["cluster"]
        if vc_nodes is not None and vc not in vc_nodes:
            dropped += 1
            continue
        if duration <= 0 or gpus < 1:
            raise TraceError(source, line, f"duration {duration:g} s and num_gpus "
                                           f"{gpus}: both must be positive")
        members, each = gang_shape(gpus, gpus_per_node)
        # The job's name is its line: a reader of the report can find the row.
        rows.append((at, TraceJob(name=f"philly-{line:05d}", submit_s=0.0,
                                  duration_s=duration, members=members,
                                  gpus_per_member=each, queue=vc)))
    return rows, dropped
