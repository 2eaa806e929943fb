"""The plain victim search: the definition the fast one (`victims.VictimSearch`) matches.

raygang's first victim search, on the capacity itself: free every candidate that holds
some resource the gang asks for, to see whether the gang could fit at all, then free them
one by one (placing after each) until it fits, then give back, most important first, each
victim it fits without, in rounds until no victim left can be given back (every one kept
is needed). It frees and checks a fit the way the fast search does (`_free`, `_fits`);
only the walk differs. Slow (it places after every step), and plain to read: the
equivalence tests and `bench/core_scale.py` run whole cycles with it
(`searching_plainly`) and compare their plans with the fast search's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import raygang.core.preemption as preemption
from raygang.core.capacity import Undo
from raygang.core.preemption.victims import VictimSearch
from raygang.core.snapshot import PlacedGang


class PlainVictimSearch(VictimSearch):
    """The plain walk over `candidates` (see the module)."""

    _kept: list[Undo]

    def run(self, candidates: Iterable[PlacedGang]
            ) -> tuple[tuple[str, ...], list[PlacedGang]] | None:
        nodes = self._fits()
        if nodes is not None:
            self._kept = []
            return nodes, []
        names = list(self.gang.total)  # a victim holding none of them cannot help
        found = [v for v in candidates if any(v.total.units(n) for n in names)]
        if not found:
            return None
        undos = [self._free(v) for v in found]
        possible = self._fits() is not None
        for undo in reversed(undos):
            undo()
        if not possible:
            return None
        chosen: list[PlacedGang] = []
        undos = []
        for victim in found:
            undos.append(self._free(victim))
            chosen.append(victim)
            if self._fits() is not None:
                break
        needed = [True] * len(chosen)
        for i in range(len(chosen) - 2, -1, -1):
            undos[i]()
            if self._fits() is not None:
                needed[i] = False
            else:
                undos[i] = self._free(chosen[i])
        # Placement is not monotone: a victim needed while others were still freed may
        # not be once they are given back. Give back, most important first, any kept
        # victim the gang fits without, until none can go (every one left is needed).
        changed = True
        while changed:
            changed = False
            for i in range(len(chosen) - 1, -1, -1):
                if not needed[i] or sum(needed) == 1:
                    continue
                undos[i]()
                if self._fits() is not None:
                    needed[i], changed = False, True
                else:
                    undos[i] = self._free(chosen[i])
        nodes = self._fits()
        assert nodes is not None
        self._kept = [undo for undo, keep in zip(undos, needed) if keep]
        return nodes, [v for v, keep in zip(chosen, needed) if keep]

    def undo(self) -> None:
        for undo in reversed(self._kept):
            undo()


@contextlib.contextmanager
def searching_plainly() -> Iterator[None]:
    """Make every cycle search for victims the plain way, in this process, for a while
    (what `raygang.core.preemption.VictimSearch` names is what a cycle uses)."""
    fast = preemption.VictimSearch
    preemption.VictimSearch = PlainVictimSearch  # type: ignore[misc]
    try:
        yield
    finally:
        preemption.VictimSearch = fast  # type: ignore[misc]
