"""Loading a `bench/` script as a module, for the unit tests of its pure parts (the benches
are scripts run from a checkout, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_bench(name: str) -> ModuleType:
    """`bench/<name>.py` as module `bench_<name>`."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / f"bench/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
