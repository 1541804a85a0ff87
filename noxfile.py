"""The Django versions the package supports, each tested in a virtualenv of its own.

    .venv/bin/nox                        # the Django tier on every supported version
    .venv/bin/nox -s "django(django='4.2')"

scripts/test.sh runs the whole suite on the newest version (``.venv``, requirements/runtime.txt)
and then these sessions for the older ones, with the Django tier (tests/django: the app, its
API, admin, migrations, commands, on SQLite). The core tier (tests/core) imports no Django, so
one run covers every version. Each session installs requirements/runtime.txt with its Django
(and the newest Django REST framework release that supports it) in place of the pinned ones,
plus the test tools that tier uses; the virtualenvs are kept between runs (``.nox/``).
"""

from __future__ import annotations

import re
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

OLDER = {
    # Django version: (Django pin, Django REST framework pin); 5.2 is requirements/runtime.txt.
    "4.2": ("Django==4.2.30", "djangorestframework==3.17.2"),
    "5.1": ("Django==5.1.15", "djangorestframework==3.17.2"),
}
"""The supported versions below the pinned one (pyproject.toml's classifiers name all three)."""

TEST_TOOLS = ("pytest", "pytest-django", "pytest-timeout", "hypothesis", "schemathesis")
"""requirements/test.txt's tools that the Django tier uses (no linters, browser or build)."""


def _requirements(django: str, rest_framework: str) -> list[str]:
    runtime = (ROOT / "requirements" / "runtime.txt").read_text().splitlines()
    test = (ROOT / "requirements" / "test.txt").read_text().splitlines()
    wanted = []
    for line in runtime:
        name = re.split(r"[\[=<>!~ #]", line.strip(), maxsplit=1)[0].lower()
        if not name:
            continue
        wanted.append({"django": django, "djangorestframework": rest_framework}.get(name, line))
    for line in test:
        name = re.split(r"[\[=<>!~ #]", line.strip(), maxsplit=1)[0].lower()
        if name in TEST_TOOLS:
            wanted.append(line.split("#", 1)[0].strip())
    return wanted


@nox.session(python="3.11")
@nox.parametrize("django", list(OLDER))
def django(session: nox.Session, django: str) -> None:
    """The Django tier on an older supported Django (arguments go to pytest)."""
    requirements = Path(session.create_tmp()) / "requirements.txt"
    requirements.write_text("\n".join(_requirements(*OLDER[django])) + "\n")
    session.install("-r", str(requirements))
    session.run("python", "-c", "import django; print('Django', django.get_version())")
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *(session.posargs or ["tests/django"]),
    )
