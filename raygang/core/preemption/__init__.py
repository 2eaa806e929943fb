"""Choosing which running gangs to stop so that a pending gang fits: the victim search.

- `pool`: the gangs an action may stop during one cycle, sorted once, read lazily;
- `probe`: the search's scratch state, virtual ("would the gang fit with these gone?");
- `victims`: the search itself (free, least important first, until the gang fits; give
  back what it does not need), the victim orders and what reclaim protects;
- `excess`: reclaim's search by amount, where the victims beyond a queue's share would
  not make room (any of those queues' gangs, no more than the amounts they run beyond);
- `plain`: the plain reference search (free every candidate on the capacity, place after
  each step), the definition the fast one must match (tests, `bench/core_scale.py`).

A cycle searches through `VictimSearch` as named here, so that the plain search can stand
in for it (`plain.searching_plainly`).
"""

from raygang.core.preemption.victims import VictimSearch

__all__ = ["VictimSearch"]
