"""What each role runs: a function or a class, its arguments, and actor options.

Kept apart from `GangSpec` (pure, serializable intent): a program holds Python code —
or, for gangs submitted over REST or the CLI, names it by import path ("pkg.module:attr"),
resolved inside the member's process once its `runtime_env` is in place.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RoleProgram:
    target: Any  # a function, a class whose instances are the members, or an import path
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_concurrency: int | None = None
    runtime_env: dict[str, Any] | None = None

    @property
    def is_class(self) -> bool:
        return inspect.isclass(self.target)

    @property
    def is_import_path(self) -> bool:
        return isinstance(self.target, str)

    @property
    def display(self) -> str:
        if isinstance(self.target, str):  # an import path
            return self.target
        return getattr(self.target, "__qualname__", repr(self.target))
