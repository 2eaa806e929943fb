"""Public names loaded on first use (PEP 562), so importing a package stays light: `raygang`
must not import Ray for `raygang.core`, nor `raygang.sim` pydantic for the command line."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, names: Mapping[str, str],
                 namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__`: `names` maps each public name to the module it comes from;
    a name is imported when first asked for, then kept in `namespace` (the package's
    globals), so the next lookup does not come here."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
