"""The queue tree as operators see it: quota, limit, usage, fair share, pending count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from raygang.core.backlog import demand
from raygang.core.config import PolicyConfig
from raygang.core.fairshare import QueueBook
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot
from raygang.core.usage import time_share


@dataclass(frozen=True, slots=True)
class QueueReport:
    name: str
    parent: str | None
    leaf: bool
    weight: float
    quota: Resources
    limit: Resources | None
    usage: Resources
    fair_share: dict[str, float]
    share_ratio: float  # dominant usage / fair share: below 1 means below its fair share
    pending: int  # gangs waiting in it (in its leaves, for a parent)
    running: int  # gangs holding resources in it


def queue_report(
    snapshot: ClusterSnapshot, pending: Mapping[str, Mapping[Resources, int]],
    config: PolicyConfig,
) -> list[QueueReport]:
    """One row per queue, parents before their children. `pending`: per queue, the
    distinct totals its waiting gangs ask for and how many ask each (as `Backlog.totals`):
    a report costs the queues and the shapes that wait, not the gangs."""
    tree = config.queue_tree
    book = QueueBook(tree, snapshot.placed, time_share(config.usage, snapshot.usage,
                                                       tree.paths))
    waiting = dict.fromkeys(tree.specs, 0)
    running = dict.fromkeys(tree.specs, 0)
    for queue, totals in pending.items():
        if queue in tree.specs:
            for above in tree.paths[queue]:
                waiting[above] += sum(totals.values())
    for placed in snapshot.placed:
        if placed.queue in tree.specs:
            for above in tree.paths[placed.queue]:
                running[above] += 1
    book.share_out_demand(snapshot.alive_nodes,
                          {queue: demand(totals) for queue, totals in pending.items()})
    rows = []
    for name in tree.top_down():
        if name is None:
            continue
        spec = tree.specs[name]
        rows.append(QueueReport(
            name=name, parent=spec.parent, leaf=tree.is_leaf(name), weight=spec.weight,
            quota=spec.quota, limit=spec.limit, usage=book.usage[name],
            fair_share=dict(book.fair.get(name, {})), share_ratio=book.share_ratio(name),
            pending=waiting[name], running=running[name],
        ))
    return rows
