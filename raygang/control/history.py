"""What the status page draws over time: per queue, its pending and running gangs and the
GPUs it holds against its guarantee, sampled every `interval_s` into a bounded ring (the
last `kept_s`), in the scheduler's memory. Not a database: a restarted scheduler starts a
new ring, and Prometheus (docs/operations.md) keeps the long view."""

from __future__ import annotations

import collections
import math
from collections.abc import Collection, Iterable, Mapping

from raygang.control.status import HistoryPoint, QueueHistory, QueueSample
from raygang.core.gang import GangState
from raygang.core.queues import QueueTree
from raygang.core.snapshot import PlacedGang

GPU = "GPU"


class History:
    def __init__(self, interval_s: float, kept_s: float):
        self.interval_s = interval_s
        self._points: collections.deque[HistoryPoint] = collections.deque(
            maxlen=max(1, math.ceil(kept_s / interval_s)))
        self._at = -math.inf  # when the last sample was taken

    def due(self, now: float) -> bool:
        return now - self._at >= self.interval_s

    def sample(self, now: float, tree: QueueTree,
               counts: Mapping[tuple[GangState, str], int],
               held: Iterable[PlacedGang]) -> None:
        """One point: `counts` as the registry keeps them (gangs per state and leaf queue),
        `held` what raygang's book holds; a parent queue sums its children."""
        self._at = now
        sums = {name: [0, 0, 0.0] for name in tree.specs}  # pending, running, GPUs

        def add(queue: str, i: int, amount: float) -> None:
            for name in tree.paths.get(queue, ()):  # a queue since removed: not drawn
                sums[name][i] += amount

        for (state, queue), n in counts.items():
            if state is GangState.PENDING:
                add(queue, 0, n)
            elif state.holds_resources:
                add(queue, 1, n)
        for gang in held:
            add(gang.queue, 2, gang.total.get(GPU))
        self._points.append(HistoryPoint(at=now, queues={
            name: QueueSample(pending=int(p), running=int(r), gpus=g,
                              guarantee=tree.specs[name].quota.get(GPU))
            for name, (p, r, g) in sums.items()}))

    def view(self, queues: Collection[str] | None = None) -> QueueHistory:
        """The ring, oldest first; only `queues` if given (what a team's token may see)."""
        points = list(self._points)
        if queues is not None:
            points = [HistoryPoint(at=p.at, queues={q: s for q, s in p.queues.items()
                                                    if q in queues}) for p in points]
        return QueueHistory(interval_s=self.interval_s, points=points)
