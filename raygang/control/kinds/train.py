"""A Ray Train run's worker group, queued by raygang's Train callback and handed over to
Train once reserved. Its durable payload: {"controller": the Train controller actor's id,
"group": the placement group Train made, once adopted}. A sweep's trial (`raygang.tune`) is
of this kind too, its "controller" the driver's job ("job:<id>")."""

from __future__ import annotations

from raygang.control.kinds.kind import Kind, controller_in_workload
from raygang.core.lifecycle import Phases

KIND = Kind(
    name="train",
    phases=Phases("capacity held on its nodes",
                  "handing the nodes over to Ray Train's worker group",
                  "Train's worker group placed on them", "the Train run finished"),
    requester=controller_in_workload,
)
