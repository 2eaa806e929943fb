"""The kinds of workload on Ray, by the names `control.kinds` registers them under: how
each runs (`new_run`) and how a restarted scheduler adopts a running one (`adopt`).

Each kind is a package: its `RunKind` (`KIND`, in its `__init__`) beside its launch code.
No kind imports another; what several share is outside (`runtime.handoff`,
`runtime.serving`, `runtime.placement`), and only the scheduler's cluster port imports
this package (import-linter). Adding a kind is a package here, a module in
`control.kinds`, and a line in each registry."""

from __future__ import annotations

from collections.abc import Mapping

from raygang.control.kinds import find
from raygang.runtime.kinds import deployment, gang, job, train
from raygang.runtime.kinds.kind import Host, RunKind

RUN_KINDS: Mapping[str, RunKind] = {
    kind.name: kind for kind in (gang.KIND, deployment.KIND, job.KIND, train.KIND,
                                 train.TUNE_KIND)
}


def of(name: str) -> RunKind:
    """The Ray side of kind `name`; raises `UnknownKindError` naming the known ones."""
    return find(RUN_KINDS, name)


__all__ = ["RUN_KINDS", "Host", "RunKind", "of"]
