"""`raygang.get_context()`: who am I in my gang, and who are my peers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GangContext:
    """Set in every member's process before user code runs.

    `peers` (every member's actor handle, in rank order, this one included) is filled in at
    the launch barrier, so it is available in `run()` / the gang function and in methods
    called after it, not in `__init__` (later roles may not exist yet then).
    """

    gang_id: str
    gang_name: str
    role: str
    role_rank: int  # index of this member within its role
    rank: int  # index of this member in the whole gang
    world_size: int
    role_sizes: dict[str, int]
    attempt: int = 0  # how many times the gang was restarted before this run
    node_id: str | None = None
    peers: tuple[Any, ...] | None = None
    _role_ranks: dict[str, range] = field(default_factory=dict, repr=False)

    def peers_in(self, role: str) -> tuple[Any, ...]:
        """The actor handles of `role`'s members, in role-rank order."""
        if self.peers is None:
            raise RuntimeError("peers are known only once the gang is released to run")
        return tuple(self.peers[i] for i in self._role_ranks[role])


_current: GangContext | None = None


def get_context() -> GangContext:
    """The gang context of the calling member; raises outside a gang member."""
    if _current is None:
        raise RuntimeError("raygang.get_context() works only inside a gang member")
    return _current


def _set_context(context: GangContext | None) -> None:
    global _current
    _current = context
