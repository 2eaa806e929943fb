"""A Ray Tune trial, queued by raygang's Tune resource manager (`raygang.tune`) and handed
over to the trial's placement group once reserved: the same exchange as a Train run's
(`control.kinds.train`), in a kind of its own so that its status and history say what it
is. Its durable payload: {"controller": the Tune driver's job ("job:<id>"), "group": the
trial's placement group, once adopted}. A Train V2 trainable's worker groups are Train
runs of their own (kind "train")."""

from __future__ import annotations

from raygang.control.kinds.kind import Kind, controller_in_workload
from raygang.core.lifecycle import Phases

KIND = Kind(
    name="tune",
    phases=Phases("capacity held on its nodes",
                  "handing the nodes over to the Tune trial's placement group",
                  "the trial's placement group placed on them", "Tune ended the trial"),
    requester=controller_in_workload,
)
