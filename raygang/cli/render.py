"""Rich tables and text for the CLI, from the API's JSON (plain dicts: importing the
pydantic models would cost `raygang list` a fifth of a second)."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from datetime import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 200  # not a terminal: don't wrap lines at 80 columns for grep and logs
_FIRST = ("GPU", "CPU")
_BYTES = ("memory", "object_store_memory")
_STATE_STYLE = {
    "PENDING": "yellow", "RUNNING": "green", "SUCCEEDED": "bold green", "FAILED": "bold red",
    "CANCELLED": "magenta", "PREEMPTED": "red", "RESTARTING": "red",
}


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


# Values ------------------------------------------------------------------------------
def amount(name: str, value: float) -> str:
    if name in _BYTES:
        return f"{value / 2**30:.3g}GiB"
    return f"{value:g}"


def _names(*vectors: Mapping[str, float] | None) -> list[str]:
    seen = {n for v in vectors if v for n in v if not n.startswith(("node:", "accelerator_type:"))}
    return [n for n in _FIRST if n in seen] + sorted(seen - set(_FIRST))


def resources(vector: Mapping[str, float] | None, none: str = "-") -> str:
    if vector is None:
        return none
    names = [n for n in _names(vector) if vector[n]]  # fair shares list every resource at 0
    return ", ".join(f"{n} {amount(n, vector[n])}" for n in names) or "-"


def used_of(used: Mapping[str, float] | None, cap: Mapping[str, float] | None,
            none: str = "none") -> str:
    """`GPU 2/4, CPU 1/-`: usage against a quota or limit."""
    names = _names(used, cap)
    if not names:
        return "-" if cap is not None else none
    parts = []
    for n in names:
        top = amount(n, cap.get(n, 0)) if cap is not None else none
        parts.append(f"{n} {amount(n, (used or {}).get(n, 0))}/{top}")
    return ", ".join(parts)


def age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for size, unit, sub, subunit in ((86400, "d", 3600, "h"), (3600, "h", 60, "m"),
                                     (60, "m", 1, "s")):
        if seconds >= size:
            return f"{seconds // size}{unit}{(seconds % size) // sub:02d}{subunit}"
    return f"{seconds}s"


def timestamp(at: float | None) -> str:
    if at is None:
        return "-"
    local = time.localtime(at)
    return time.strftime("%Y-%m-%d %H:%M:%S", local) + f".{int(at * 1000) % 1000:03d}"


def state(name: str) -> Text:
    return Text(name, style=_STATE_STYLE.get(name, "cyan"))


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", show_edge=False,
                  pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


# Gangs -------------------------------------------------------------------------------
def gangs_table(page: Mapping[str, Any]) -> RenderableType:
    # SIZE (members now, and an elastic gang's range) only where the page lists an
    # elastic gang: for rigid gangs alone it says nothing the spec does not.
    sized = any(g.get("max_size") for g in page["items"])
    table = _table("ID", "QUEUE", "PRIORITY", "STATE", *(["SIZE"] if sized else []),
                   "POSITION", "AGE", "REASON")
    table.columns[0].no_wrap = True
    now = page["now"]
    for g in page["items"]:
        position = g.get("queue_position")
        size = [size_text(g)] if sized else []
        table.add_row(g["gang_id"], g["queue"], str(g["priority"]), state(g["state"]), *size,
                      "-" if position is None else str(position),
                      age(now - g["submitted_at"]), g.get("reason") or "")
    shown, total = len(page["items"]), page["total"]
    if shown < total:
        more = Text(f"{shown} of {total} gangs (use --limit to see more)", style="dim")
        return Group(table, more)
    return table


def size_text(g: Mapping[str, Any]) -> str:
    """Members now; an elastic gang's as "now (min-max)", e.g. "2 (2-4)"."""
    if g.get("max_size"):
        return f"{g['world_size']} ({g['min_size']}-{g['max_size']})"
    return str(g["world_size"])


def gang_details(g: Mapping[str, Any]) -> RenderableType:
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    error = g.get("error")
    rows: list[tuple[str, Any]] = [
        ("gang", g["gang_id"]), ("name", g["name"]), ("kind", g.get("kind", "gang")),
        *_job_rows(g),
        *([("inside job", g["parent"])] if g.get("parent") else []),
        ("queue", g["queue"]), ("priority", str(g["priority"])), ("state", state(g["state"])),
        ("reason", g.get("reason") or "-"),
        ("queue position", _or_dash(g.get("queue_position"))),
        ("world size", str(g["world_size"]) + (
            f" (elastic: {g['min_size']} to {g['max_size']})" if g.get("max_size") else "")),
        *([("grows", g["grow_reason"])] if g.get("grow_reason") else []),
        ("restarts", str(g.get("restarts", 0))), ("preemptions", str(g.get("preemptions", 0))),
        ("submitted", timestamp(g["submitted_at"])), ("started", timestamp(g.get("started_at"))),
        ("finished", timestamp(g.get("finished_at"))),
    ]
    if error:
        rows.append(("error", error_summary(error)))
    for key, value in rows:
        fields.add_row(key, value)
    parts: list[RenderableType] = [fields]
    if g.get("roles"):
        parts.append(roles_table(g["roles"]))
    if g.get("members"):
        members = _table("RANK", "ROLE", "INDEX", "ACTOR", "NODE", title="members")
        for m in g["members"]:
            members.add_row(str(m["rank"]), m["role"], str(m["index"]), m["actor_name"],
                            m.get("node_id") or "-")
        parts.append(members)
    parts.append(events_table(g.get("events", []), g["submitted_at"]))
    return Group(*parts)


def roles_table(roles: list[Mapping[str, Any]]) -> RenderableType:
    """An elastic gang's roles: each one's size now (min-max), what it grows by at a time
    (a ratio step's members of it, else 1) and why it is not larger."""
    table = _table("ROLE", "SIZE", "STEP", "WHY NOT LARGER", title="roles")
    for r in roles:
        table.add_row(r["role"], role_size(r), str(r.get("step", 1)), r.get("grow_reason") or "-")
    return table


def role_size(r: Mapping[str, Any]) -> str:
    return f"{r['size']} ({r['min_size']}-{r['max_size']})"


def _job_rows(g: Mapping[str, Any]) -> list[tuple[str, str]]:
    if g.get("kind") != "job":
        return []
    return [("entrypoint", g.get("entrypoint") or "-"),
            ("ray job", g.get("ray_job_id") or "- (not started)")]


def jobs_table(page: Mapping[str, Any]) -> RenderableType:
    """Jobs: like gangs, with the Ray job of the last attempt (`job status` shows the
    command: here it would leave the reason no room)."""
    table = _table("ID", "QUEUE", "STATE", "POSITION", "AGE", "RAY JOB", "REASON")
    for column in table.columns[:-1]:
        column.no_wrap = True
    now = page["now"]
    for g in page["items"]:
        table.add_row(g["gang_id"], g["queue"], state(g["state"]),
                      _or_dash(g.get("queue_position")), age(now - g["submitted_at"]),
                      g.get("ray_job_id") or "-", g.get("reason") or "")
    shown, total = len(page["items"]), page["total"]
    if shown < total:
        more = Text(f"{shown} of {total} jobs (use --limit to see more)", style="dim")
        return Group(table, more)
    return table


def events_table(events: Iterable[Mapping[str, Any]], since: float,
                 title: str = "events") -> Table:
    table = _table("TIME", "+", "FROM", "TO", "REASON", title=title)
    for e in events:
        table.add_row(timestamp(e["at"]), f"{e['at'] - since:.1f}s", e.get("from_state") or "-",
                      state(e["to_state"]), e.get("reason") or "")
    return table


def error_summary(error: Mapping[str, Any]) -> str:
    where = f"member {error['member']} (rank {error.get('rank')}) raised " if error.get("member") else ""
    return f"{where}{error['error_type']}: {error['message']}"


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


# Explain -----------------------------------------------------------------------------
def explain(g: Mapping[str, Any], queues: list[Mapping[str, Any]] | None,
            last: int = 5) -> RenderableType:
    lines = [Text.assemble(("gang ", "bold"), g["gang_id"], " is ", state(g["state"]),
                           f" in queue {g['queue']} (priority {g['priority']})")]
    if g.get("reason"):
        lines.append(Text(f"  why: {g['reason']}"))
    if g.get("queue_position") is not None:
        lines.append(Text(f"  queue position: {g['queue_position']} (1 = next in its queue)"))
    if g.get("error"):
        lines.append(Text(f"  error: {error_summary(g['error'])}"))
    if g.get("max_size"):  # elastic: what it runs now, and why it grows no further
        lines.append(Text(f"  elastic: runs {g['world_size']} of {g['min_size']} to "
                          f"{g['max_size']} members"
                          + (f"; grows: {g['grow_reason']}" if g.get("grow_reason") else "")))
        for r in g.get("roles", []):
            lines.append(Text(f"    role {r['role']}: {role_size(r)}, by {r.get('step', 1)} at "
                              f"a time; {r.get('grow_reason') or '-'}"))
    preemptions = [e for e in g.get("events", []) if e["to_state"] == "PREEMPTED"]
    lines.append(Text(f"  preempted {g.get('preemptions', 0)} time(s), "
                      f"restarted {g.get('restarts', 0)} time(s)"))
    for e in preemptions:
        lines.append(Text(f"    {timestamp(e['at'])}  {e.get('reason') or 'preempted'}"))
    parts: list[RenderableType] = [Text("\n").join(lines)]
    if queues is not None:
        parts.append(queue_chain(g["queue"], queues))
    events = g.get("events", [])[-last:]
    parts.append(events_table(events, g["submitted_at"], title=f"last {len(events)} events"))
    return Group(*parts)


def queue_chain(name: str, queues: list[Mapping[str, Any]]) -> RenderableType:
    """The gang's queue and its ancestors: what each uses against its quota and limit."""
    by_name = {q["name"]: q for q in queues}
    chain: list[Mapping[str, Any]] = []
    at: str | None = name
    while at is not None and at in by_name and at not in [q["name"] for q in chain]:
        chain.append(by_name[at])
        at = by_name[at].get("parent")
    if not chain:
        return Text("  (its queue is not visible to this token)")
    table = _table("QUEUE", "USAGE/QUOTA", "USAGE/LIMIT", "FAIR SHARE", "PENDING", "RUNNING",
                   title="its queue (and parents)")
    for q in chain:
        table.add_row(q["name"], used_of(q["usage"], q["quota"]),
                      used_of(q["usage"], q.get("limit")), resources(q["fair_share"]),
                      str(q["pending"]), str(q["running"]))
    return table


# Queues and cluster ------------------------------------------------------------------
def queues_table(queues: Iterable[Mapping[str, Any]]) -> Table:
    table = _table("NAME", "PARENT", "QUOTA", "LIMIT", "USAGE", "FAIR SHARE", "PENDING",
                   "RUNNING")
    for q in queues:
        table.add_row(q["name"], q.get("parent") or "-", resources(q["quota"]),
                      resources(q.get("limit"), none="none"), resources(q["usage"]),
                      resources(q["fair_share"]), str(q["pending"]), str(q["running"]))
    return table


def cluster_view(cluster: Mapping[str, Any]) -> RenderableType:
    """The nodes, and (when raygang scales the cluster) its node groups; first, while
    Ray's GCS does not answer, since when (nothing is decided meanwhile)."""
    parts: list[RenderableType] = []
    since = cluster.get("unreachable_since")
    if since is not None:
        at = datetime.fromtimestamp(since).strftime("%H:%M:%S")
        parts += [Text(f"Ray's GCS does not answer since {at}: no scheduling decision until "
                       f"it does; nodes as last seen ({cluster.get('unreachable_reason')})",
                       style="bold red"), Text("")]
    parts.append(cluster_table(cluster))
    scaling = cluster.get("scaling")
    if scaling:
        parts += [Text(""), scaling_table(scaling),
                  *(Text(line) for line in scaling_notes(scaling))]
    return Group(*parts)


def scaling_table(scaling: Mapping[str, Any]) -> Table:
    table = _table("GROUP", "NODE SHAPE", "NODES", "DESIRED", "MIN-MAX")
    for g in scaling["groups"]:
        shape = ", ".join(f"{k} {amount(k, v)}" for k, v in g["shape"].items())
        bounds = (f"{g['min_nodes']}+" if g["max_nodes"] >= 2**31 - 1
                  else f"{g['min_nodes']}-{g['max_nodes']}")
        table.add_row(g["name"], shape, str(g["nodes"]), str(g["desired"]), bounds)
    return table


def scaling_notes(scaling: Mapping[str, Any]) -> list[str]:
    lines = [f"scaling: {scaling['mode']} mode"]
    if scaling.get("draining"):
        lines.append(f"being released: {len(scaling['draining'])} node(s)")
    if scaling.get("last_error"):
        lines.append(f"last request failed: {scaling['last_error']}")
    if scaling.get("actions"):
        lines.append(f"last request: {scaling['actions'][-1]}")
    return lines


def cluster_table(cluster: Mapping[str, Any]) -> Table:
    table = _table("NODE", "ALIVE", "GPU USED/TOTAL", "CPU USED/TOTAL", "GANGS")
    for n in cluster["nodes"]:
        gangs = Counter(b["gang_id"] for b in n.get("bundles", []))
        table.add_row(n["name"], "yes" if n["alive"] else "no", _used_total(n, "GPU"),
                      _used_total(n, "CPU"),
                      ", ".join(f"{g} ×{k}" if k > 1 else g for g, k in gangs.items()) or "-")
    total, free = cluster["total"], cluster["free"]
    table.caption = (f"{len(cluster['nodes'])} nodes; free GPU {amount('GPU', free.get('GPU', 0))}"
                     f"/{amount('GPU', total.get('GPU', 0))}, CPU "
                     f"{amount('CPU', free.get('CPU', 0))}/{amount('CPU', total.get('CPU', 0))}")
    table.caption_justify = "left"
    return table


def _used_total(node: Mapping[str, Any], name: str) -> str:
    return f"{amount(name, node['used'].get(name, 0))}/{amount(name, node['total'].get(name, 0))}"
