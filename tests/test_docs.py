"""The documentation site (mkdocs.yml): builds strictly (a broken link or anchor fails), every
page in docs/ is in its navigation, and the home page carries the sections it includes from
README.md (a renamed section would otherwise leave it empty: pymdownx.snippets only fails on a
missing file)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_with_every_included_section(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr

    def page(name):
        return (tmp_path / name / "index.html").read_text()

    home = (tmp_path / "index.html").read_text()
    assert "Pythonic form" in home and "the weather in Oslo?" in home
    assert "Runs in the admin" in page("operations") and "purge_expired" in page("operations")
    assert "twine check" in page("release")
    assert "drf_create_token admin" in page("api") and "S21" in page("checklist")
    assert "Keep a Changelog" in page("changelog")
    assert (tmp_path / "openapi.yaml").exists()
