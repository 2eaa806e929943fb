"""The layering from DESIGN.md: `raygang.core` stays pure, `raygang.control` runs without
Ray, imports point one way and no package's modules import each other in a cycle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package", ["raygang.core", "raygang.control.plane",
                                     "raygang.control.memory"])
def test_importing_core_does_not_import_ray_or_other_heavy_layers(package):
    # The control plane runs on an in-memory cluster without Ray (the trace simulator).
    code = (
        f"import sys, {package}; "
        "print(sorted(m for m in ('ray', 'kubernetes', 'fastapi', 'starlette', 'uvicorn', "
        "'raygang.runtime', 'raygang.api') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# The scheduler's side: its actor, the control plane's loop and state, the launcher of
# members. A Ray Train controller runs raygang's callback in its own process, and the REST
# API and a user's driver (the Python API) reach the scheduler the same way (issue 29):
# none of them should load any of it.
SCHEDULER_SIDE = ("raygang.runtime.scheduler", "raygang.runtime.cluster",
                  "raygang.runtime.launcher", "raygang.runtime.member",
                  "raygang.control.plane", "raygang.control.loop", "raygang.control.registry",
                  "raygang.control.fleet", "raygang.control.driver", "raygang.control.journal")


@pytest.mark.parametrize("module", ["raygang.runtime.train_callback",
                                    "raygang.runtime.client", "raygang.api"])
def test_the_client_side_loads_no_scheduler_code(module):
    code = (f"import sys, {module}; "
            f"print(sorted(m for m in {SCHEDULER_SIDE!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_import_linter_contracts_hold():
    # Contracts live in pyproject.toml [tool.importlinter]; lint-imports reads them from cwd.
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(lint).exists():
        pytest.fail("lint-imports is not installed: pip install -e '.[dev]'")
    out = subprocess.run(
        [lint, "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout
