"""The docs: `mkdocs build --strict` passes (a link to a missing page or anchor, a page left
out of the nav, fails it: mkdocs.yml's `validation`), the README stays a newcomer's page
(about 300 lines at most) and its links into docs/ reach pages and anchors that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                           cwd=ROOT, capture_output=True, text=True)
    if "No module named mkdocs" in build.stderr:
        pytest.fail("mkdocs is not installed: pip install -e '.[dev]'")
    assert build.returncode == 0, build.stdout + build.stderr
    return out


def test_the_docs_build_in_strict_mode(site: Path):
    pages = sorted(p.relative_to(ROOT / "docs").with_suffix("").as_posix()
                   for p in (ROOT / "docs").rglob("*.md"))
    for page in pages:
        html = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert html.exists(), page


def test_the_readme_is_short_and_its_links_into_the_docs_hold(site: Path):
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    links = [link for link in LINK.findall(readme) if not link.startswith("http")]
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), link
        if anchor:
            page = Path(path).relative_to("docs").with_suffix("")
            html = site / ("index.html" if page.name == "index" else f"{page}/index.html")
            assert f'id="{anchor}"' in html.read_text(), link
