"""A gang's view in the backlog says since when it has been pending: from its submission,
and again from each requeue (what `sla_waiting_time_s` measures)."""

from __future__ import annotations

from raygang.control.records import GangRecord
from raygang.core.gang import GangState

from tests.unit.builders import spec


def test_pending_since_is_the_submission_then_the_last_requeue():
    record = GangRecord("g-1", spec("g", "2xGPU=1"), {}, 100, 0, submitted_at=10.0)
    assert record.pending_view().pending_since == 10.0
    for state, at in [(GangState.ADMITTED, 20.0), (GangState.RESERVED, 21.0),
                      (GangState.STARTING, 22.0), (GangState.RUNNING, 23.0),
                      (GangState.PREEMPTED, 500.0), (GangState.PENDING, 501.0)]:
        record.move(state, "", at)
    view = record.pending_view()
    assert view.pending_since == 501.0
    assert (view.gang_id, view.seq) == ("g-1", 0)  # same place in its queue's line
