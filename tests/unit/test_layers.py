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


# The scheduler's side: its actor and ports, the kinds' launch code and hand-offs, what runs
# in member actors, the control plane's loop and state. A Ray Train controller runs
# raygang's callback in its own process, and the REST API and a user's driver (the Python
# API) reach the scheduler the same way (issue 29): none of them should load any of it.
# A package stands for all its modules (importing one imports its package).
SCHEDULER_SIDE = ("raygang.runtime.scheduler", "raygang.runtime.kinds",
                  "raygang.runtime.handoff", "raygang.runtime.member",
                  "raygang.runtime.serving",
                  "raygang.control.plane", "raygang.control.loop", "raygang.control.registry",
                  "raygang.control.fleet", "raygang.control.driver", "raygang.control.journal")


# The callback also as Train loads it from RAY_TRAIN_CALLBACKS: by its public name (what
# raygang's jobs set), or by the path an earlier raygang set (a shim).
@pytest.mark.parametrize("load", ["import raygang.runtime.client.train_callback",
                                  "import raygang; raygang.RaygangTrain",
                                  "import raygang.runtime.train_callback",
                                  "import raygang.runtime.client.connection",
                                  "import raygang.api"])
def test_the_client_side_loads_no_scheduler_code(load):
    code = (f"import sys; {load}; "
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


# An import inside a function, or in a script the tests run as a subprocess (benchmarks, the
# chaos scenario), is checked by nothing until it runs: a name moved between modules broke
# two of them at once, late in a CI run (stop 35). Every `raygang` import in the tree is
# resolved here, wherever it stands.
_RESOLVE = r'''
import ast, importlib, pathlib, sys
bad = []
for path in sorted(pathlib.Path(".").glob("[!.]*/**/*.py")):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and \
                (node.module or "").split(".")[0] == "raygang":
            wanted = [(node.module, a.name) for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Import):
            wanted = [(a.name, None) for a in node.names if a.name.split(".")[0] == "raygang"]
        else:
            continue
        for module, name in wanted:
            try:
                found = importlib.import_module(module)
                if name is not None and not hasattr(found, name):
                    importlib.import_module(f"{module}.{name}")
            except Exception as error:
                bad.append(f"{path}:{node.lineno}: {module} {name or ''}: {error!r}")
import raygang  # its public names are imported lazily, by module path: each must resolve
for name in raygang.__all__:
    try:
        getattr(raygang, name)
    except Exception as error:
        bad.append(f"raygang.{name}: {error!r}")
print("\n".join(bad))
'''


def test_every_raygang_import_in_the_tree_resolves():
    out = subprocess.run([sys.executable, "-c", _RESOLVE], cwd=ROOT, capture_output=True,
                         text=True, timeout=180, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"imports that do not resolve:\n{out.stdout}"


def test_no_module_of_the_package_is_over_450_lines():
    # Small modules with names from the domain (shared/STYLE.md, issue 29): a module that
    # outgrows this has two subjects; split it along them.
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "raygang").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}
