"""The release: the sdist and the wheel build, pass ``twine check``, carry what the app needs at
run time, and the wheel alone (no extras) makes a working minimal project.

The files git knows about (committed or not, ignored ones left out) are copied to a temporary
directory and built there with docs/release.md's command (``python -m build``, then ``twine
check --strict``), so the checkout gets no ``build/``, ``dist/`` or ``*.egg-info`` and the
package is what a clean clone would build. The wheel is installed into a
fresh virtualenv with the pinned versions of requirements/runtime.txt as constraints (any
version the package's ranges accept would do; the pins keep the install fast and repeatable),
then a two-file project runs ``manage.py check``, ``migrate`` and one ``manage.py chat`` turn
against the ReplayServer of ``tool_calling.testing``.
"""

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tool_calling.testing import ReplayServer, text, tool_call

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

pytestmark = pytest.mark.timeout(300)


def run(*args, cwd=None, env=None, timeout=240):
    result = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """(sdist, wheel) built from a copy of the files git knows about."""
    source = tmp_path_factory.mktemp("source")
    files = run(
        "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT
    ).stdout.split("\0")
    for name in filter(None, files):
        path = ROOT / name
        if path.is_file():  # a file deleted but not yet committed is listed too
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    # docs/release.md's command, run in the copy: it builds into dist/ and checks both files.
    page = (ROOT / "docs" / "release.md").read_text()
    command = next(
        b
        for b in re.findall(r"```bash\n(.*?)```", page, re.S)
        if "twine check --strict dist/*" in b
    )
    run("bash", "-c", command.replace(".venv/bin/python", shlex.quote(sys.executable)), cwd=source)
    (sdist,) = (source / "dist").glob("*.tar.gz")
    (wheel,) = (source / "dist").glob("*.whl")
    return sdist, wheel


def test_the_version_is_the_changelog_s_latest_release(dist):
    import tool_calling

    version = tool_calling.__version__
    assert dist[1].name.startswith(f"django_tool_calling-{version}-py3-none-any")
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d[^\]]*)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert releases and releases[0] == version


def test_the_classifiers_name_only_what_is_tested():
    classifiers = PYPROJECT["project"]["classifiers"]
    pythons = {c.rsplit(" ", 1)[1] for c in classifiers if re.fullmatch(r".*Python :: 3\.\d+", c)}
    assert pythons == {f"{sys.version_info.major}.{sys.version_info.minor}"}
    djangos = {c.rsplit(" ", 1)[1] for c in classifiers if c.startswith("Framework :: Django ::")}
    import django

    # The main run's Django, and the older ones noxfile.py runs the Django tier on.
    older = re.findall(r'^    "(\d\.\d+)": \(', (ROOT / "noxfile.py").read_text(), re.M)
    assert older and djangos == {f"{django.VERSION[0]}.{django.VERSION[1]}", *older}
    assert PYPROJECT["project"]["license"] == "BSD-3-Clause"
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License")


def test_twine_accepts_the_sdist_and_the_wheel(dist):
    result = run(sys.executable, "-m", "twine", "check", "--strict", *dist)
    assert result.stdout.count("PASSED") == 2


def test_the_wheel_carries_templates_static_files_migrations_and_py_typed(dist):
    names = set(zipfile.ZipFile(dist[1]).namelist())
    for path in [
        *(ROOT / "tool_calling").rglob("templates/**/*.html"),
        *(ROOT / "tool_calling").rglob("static/**/*.*"),
        *(ROOT / "tool_calling" / "migrations").glob("0*.py"),
        ROOT / "tool_calling" / "py.typed",
    ]:
        assert str(path.relative_to(ROOT)) in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert not [name for name in names if name.startswith(("tests/", "project/"))]


MINIMAL_SETTINGS = """
SECRET_KEY = "release-check"
DEBUG = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "shop",
    "tool_calling",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}
STATIC_URL = "static/"
USE_TZ = True
"""

MINIMAL_URLS = """
from django.contrib import admin
from django.urls import path

# tool_calling.api.urls is left out: its turns run as Celery tasks, which need the project's
# Celery app (tool_calling.E018 says how).
urlpatterns = [path("admin/", admin.site.urls)]
"""

SHOP_TOOLS = '''
from tool_calling import tool


@tool
def add_numbers(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b
'''


def test_the_wheel_without_extras_runs_a_minimal_project(dist, tmp_path):
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # requirements/runtime.txt as constraints: pip refuses extras ("celery[redis]") there.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(
        re.sub(r"\[[^\]]*\]", "", (ROOT / "requirements" / "runtime.txt").read_text())
    )
    run(python, "-m", "pip", "install", "-q", "-c", constraints, dist[1])
    installed = run(python, "-m", "pip", "list", "--format=freeze").stdout.lower()
    for extra in ("mcp==", "opentelemetry-sdk==", "sentence-transformers=="):
        assert extra not in installed  # the extras stay out

    project = tmp_path / "project"
    (project / "shop").mkdir(parents=True)
    (project / "settings.py").write_text(MINIMAL_SETTINGS)
    (project / "urls.py").write_text(MINIMAL_URLS)
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "tools.py").write_text(SHOP_TOOLS)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "settings"}
    env["PYTHONPATH"] = str(project)

    def manage(*args):
        return run(python, "-m", "django", *args, cwd=project, env=env)

    check = manage("check")
    assert "System check identified no issues" in check.stdout, check.stdout + check.stderr
    manage("migrate", "-v", "0")
    with ReplayServer([tool_call("add_numbers", a=2, b=3), text("2 + 3 = 5.")]) as server:
        env.update(OPENAI_BASE_URL=server.base_url + "/v1", OPENAI_API_KEY="release-check")
        answer = manage("chat", "What is 2 + 3?")
        requests = server.requests
    assert answer.stdout == "2 + 3 = 5.\n"
    assert requests[1]["messages"][-1]["content"] == "5.0"
