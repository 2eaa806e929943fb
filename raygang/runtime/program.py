"""What each role runs: a function or a class, its arguments, and actor options.

Kept apart from `GangSpec` (pure, serializable intent): a program holds Python code.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RoleProgram:
    target: Any  # a function, or a class whose instances are the members
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_concurrency: int | None = None
    runtime_env: dict[str, Any] | None = None

    @property
    def is_class(self) -> bool:
        return inspect.isclass(self.target)

    @property
    def display(self) -> str:
        return getattr(self.target, "__qualname__", repr(self.target))
