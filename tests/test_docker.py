"""docker/: the compose file and Dockerfile agree with project/settings.py and the requirements."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from tests._compose import (
    COMPOSE,
    DOCKERFILE,
    MissingVariable,
    command,
    dockerfile_env,
    dockerfile_runs,
    environment,
    interpolate,
    load,
)
from tool_calling.conf import DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
# The services built from docker/Dockerfile.
APP_SERVICES = ["web", "worker", "worker-processes", "beat"]
SETTINGS = ROOT / "project" / "settings.py"

# os.environ.get("X"...), os.environ["X"], os.getenv("X"...)
ENV_READ = re.compile(
    r"""os\.(?:environ\.get|getenv)\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""
    r"""|os\.environ\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\]"""
)


def env_vars_read_by_settings():
    names = set()
    for get_name, item_name in ENV_READ.findall(SETTINGS.read_text()):
        names.add(get_name or item_name)
    return names


@pytest.fixture(scope="module")
def compose():
    return load()


@pytest.fixture(scope="module")
def services(compose):
    return compose["services"]


def depends_on(service):
    deps = service.get("depends_on", [])
    return set(deps if isinstance(deps, list) else deps.keys())


def depends_on_condition(service, name):
    deps = service.get("depends_on", {})
    return None if isinstance(deps, list) else (deps.get(name) or {}).get("condition")


def test_settings_scan_finds_the_documented_variables():
    """The scan below is only as good as its regex: it must see what settings.py reads."""
    assert {
        "DATABASE_URL",
        "REDIS_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_MODEL",
        "DJANGO_SECRET_KEY",
        "DJANGO_DEBUG",
        "DJANGO_ALLOWED_HOSTS",
        "TOOL_CALLING_EXECUTION_MODE",
        *PRODUCTION_DEFAULTS,
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        "DJANGO_STATIC_ROOT",
        "TOOL_CALLING_MCP_ALLOWED_HOSTS",
        "TOOL_CALLING_MCP_ALLOWED_ORIGINS",
    } <= env_vars_read_by_settings()


def test_the_services_exist(services):
    assert {"web", "worker", "beat", "redis", "postgres"} <= set(services)


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_set_every_variable_settings_reads(services, name):
    missing = env_vars_read_by_settings() - set(environment(services[name]))
    assert not missing, f"{name} does not set {sorted(missing)}, which project/settings.py reads"


def test_app_services_share_one_environment(services):
    web = environment(services["web"])
    assert all(environment(services[name]) == web for name in APP_SERVICES)


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_build_the_dockerfile(services, name):
    build = services[name]["build"]
    assert (ROOT / "docker" / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE


def test_superuser_credentials_pass_through(services):
    env = environment(services["web"])
    assert env["DJANGO_SUPERUSER_USERNAME"] == "${DJANGO_SUPERUSER_USERNAME:-}"
    assert env["DJANGO_SUPERUSER_PASSWORD"] == "${DJANGO_SUPERUSER_PASSWORD:-}"


def test_database_url_points_at_the_postgres_service(services):
    url = urlsplit(environment(services["web"])["DATABASE_URL"])
    postgres = environment(services["postgres"])
    assert url.scheme in {"postgres", "postgresql"}
    assert url.hostname == "postgres"
    assert url.username == postgres["POSTGRES_USER"]
    assert url.password == postgres["POSTGRES_PASSWORD"]
    assert url.path.lstrip("/") == postgres["POSTGRES_DB"]


def test_redis_url_points_at_the_redis_service(services):
    url = urlsplit(environment(services["web"])["REDIS_URL"])
    assert (url.scheme, url.hostname) == ("redis", "redis")


def test_worker_runs_celery_on_the_tool_queue(services):
    cmd = command(services["worker"])
    assert "celery -A project worker" in cmd
    queues = re.search(r"-Q\s+(\S+)", cmd)
    assert queues is not None
    assert {DEFAULTS["EXECUTION"]["QUEUE"], "celery"} <= set(queues.group(1).split(","))


def test_the_worker_waits_on_the_network_in_threads_and_has_the_files_for_them(services):
    cmd = command(services["worker"])
    assert re.search(r"-P threads --concurrency \$\$\{WORKER_THREADS:-\d+\}", cmd), cmd
    assert services["worker"]["ulimits"]["nofile"] >= 65536


def test_cpu_heavy_or_untrusted_tools_have_a_prefork_worker(services):
    cmd = command(services["worker-processes"])
    assert "celery -A project worker" in cmd and "-P prefork" in cmd
    queues = re.search(r"-Q\s+(\S+)", cmd)
    assert queues is not None and queues.group(1) == DEFAULTS["EXECUTION"]["PROCESS_QUEUE"]


def test_exactly_one_beat(services):
    """Beat runs as its own service; a worker with -B as well would send every task twice."""
    assert "celery -A project beat" in command(services["beat"])
    assert "deploy" not in services["beat"]  # no replicas
    for name in set(services) - {"beat"}:
        words = shlex.split(command(services[name]))
        assert "-B" not in words and "--beat" not in words, name
        assert "beat" not in words, name


def test_the_sweeper_is_scheduled():
    schedule = {entry["task"]: entry for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    sweeper = schedule["tool_calling.sweep_tool_executions"]
    assert 0 < float(sweeper["schedule"]) <= 60


def test_web_collects_static_files_migrates_creates_the_superuser_then_serves(services):
    cmd = command(services["web"])
    collect = cmd.index("manage.py collectstatic --noinput")
    migrate = cmd.index("manage.py migrate")
    superuser = cmd.index("scripts/devserver.py superuser")
    assert collect < migrate < superuser
    assert superuser < cmd.index("uvicorn project.asgi:application --host 0.0.0.0")
    assert "&&" in cmd[collect:migrate]  # a failed collectstatic stops the service
    assert "&&" in cmd[migrate:superuser]  # a failed migrate stops the service
    assert (ROOT / "scripts" / "devserver.py").is_file()


def test_the_image_holds_the_static_files_collected_as_its_user():
    """So that the image alone (`docker run`) serves them, and compose's collectstatic may
    update them: after USER app, with a throwaway key (the image's ENV has DEBUG off)."""
    runs = dockerfile_runs()
    (collect,) = [run for run in runs if "collectstatic" in run]
    assert re.fullmatch(
        r"DJANGO_SECRET_KEY=\S+ python manage\.py collectstatic --noinput( -v0)?", collect
    )
    text = DOCKERFILE.read_text()
    assert text.index("USER app") < text.index("collectstatic")
    assert dockerfile_env()["DJANGO_DEBUG"] == "false"


# The variables compose sets for the TLS proxy it expects in front of web, and their defaults.
PRODUCTION_DEFAULTS = {
    "DJANGO_SECURE_PROXY_SSL_HEADER": "true",
    "DJANGO_SECURE_SSL_REDIRECT": "true",
    "DJANGO_SECURE_COOKIES": "true",
    "DJANGO_SECURE_HSTS_SECONDS": "3600",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "DJANGO_SECURE_HSTS_PRELOAD": "true",
}


def test_compose_sets_django_up_for_the_tls_proxy_by_default(services):
    env = environment(services["web"])
    for name, default in PRODUCTION_DEFAULTS.items():
        assert interpolate(env[name], {}) == default, name
        assert interpolate(env[name], {name: "false"}) == "false", name
    for name in (
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        "TOOL_CALLING_MCP_ALLOWED_HOSTS",
        "TOOL_CALLING_MCP_ALLOWED_ORIGINS",
    ):
        assert interpolate(env[name], {}) == "", name
        assert interpolate(env[name], {name: "x"}) == "x", name
    # Where the Dockerfile's collectstatic puts them (its WORKDIR /app, var/static).
    assert interpolate(env["DJANGO_STATIC_ROOT"], {}) == "/app/var/static"


def test_the_web_healthcheck_comes_as_the_tls_proxy_does(services):
    """With the HTTPS redirect on, a plain request would get a 301 to a port nothing serves."""
    assert "'X-Forwarded-Proto': 'https'" in " ".join(services["web"]["healthcheck"]["test"])


def test_whitenoise_serves_static_files_right_after_the_security_middleware():
    middleware = list(settings.MIDDLEWARE)
    security = middleware.index("django.middleware.security.SecurityMiddleware")
    assert middleware[security + 1] == "whitenoise.middleware.WhiteNoiseMiddleware"
    runtime = (ROOT / "requirements" / "runtime.txt").read_text()
    assert re.search(r"^whitenoise==", runtime, re.M)


def test_services_depend_on_redis_and_postgres(services):
    for name in APP_SERVICES:
        for dep in ("redis", "postgres"):
            assert depends_on_condition(services[name], dep) == "service_healthy", (name, dep)


@pytest.mark.parametrize("name", ["worker", "worker-processes", "beat"])
def test_worker_and_beat_wait_for_the_migrated_web(services, name):
    assert depends_on_condition(services[name], "web") == "service_healthy"


@pytest.mark.parametrize("name", ["web", "worker", "worker-processes", "redis", "postgres"])
def test_healthchecks(services, name):
    check = services[name]["healthcheck"]
    assert check["test"][0] in {"CMD", "CMD-SHELL"}
    assert check.get("retries", 0) >= 3


def test_web_healthcheck_asks_the_admin_login_page(services):
    assert "/admin/login/" in " ".join(services["web"]["healthcheck"]["test"])


def test_worker_healthcheck_pings_the_worker(services):
    assert "celery -A project inspect ping" in " ".join(services["worker"]["healthcheck"]["test"])


def test_redis_never_evicts_queued_tasks(services):
    cmd = command(services["redis"])
    assert services["redis"]["image"].startswith("redis:7")
    assert "--maxmemory-policy noeviction" in cmd
    assert "--appendonly yes" in cmd
    assert "--appendfsync everysec" in cmd


def test_postgres_service(services):
    assert services["postgres"]["image"].startswith("postgres:15")
    assert {"POSTGRES_DB", "POSTGRES_USER", "POSTGRES_PASSWORD"} <= set(
        environment(services["postgres"])
    )


def test_dockerfile_builds_from_python_311_slim_and_installs_the_runtime_requirements():
    """The runtime only: no test tools in the image (requirements/test.txt)."""
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.MULTILINE)
    assert re.search(r"^RUN pip install .*-r requirements/runtime\.txt", text, re.MULTILINE)
    assert re.search(r"^COPY requirements/runtime\.txt ", text, re.MULTILINE)
    assert not re.search(r"^(COPY|RUN) .*(requirements\.txt|test\.txt)", text, re.MULTILINE)
    assert (ROOT / "requirements" / "runtime.txt").is_file()


def test_requirements_include_the_postgres_driver():
    """DATABASE_URL in compose.yml is postgres://, so the image needs a driver."""
    runtime = (ROOT / "requirements" / "runtime.txt").read_text()
    assert re.search(r"^psycopg(\[binary\])?==", runtime, re.M)


# -- safe defaults ----------------------------------------------------------------------------


def test_compose_refuses_to_start_without_a_secret_key(services):
    """No published fallback key: compose stops, naming the variable."""
    env = environment(services["web"])
    assert env["DJANGO_SECRET_KEY"].startswith("${DJANGO_SECRET_KEY:?")
    for unset in ({}, {"DJANGO_SECRET_KEY": ""}):
        with pytest.raises(MissingVariable, match="DJANGO_SECRET_KEY: set DJANGO_SECRET_KEY"):
            interpolate(env["DJANGO_SECRET_KEY"], unset)
    assert interpolate(env["DJANGO_SECRET_KEY"], {"DJANGO_SECRET_KEY": "k" * 50}) == "k" * 50


def test_compose_runs_django_with_debug_off_by_default(services):
    env = environment(services["web"])
    assert interpolate(env["DJANGO_DEBUG"], {}) == "false"
    assert interpolate(env["DJANGO_DEBUG"], {"DJANGO_DEBUG": "true"}) == "true"


def test_only_the_web_server_is_published_and_on_loopback_by_default(services):
    assert [name for name, service in services.items() if service.get("ports")] == ["web"]
    (published,) = services["web"]["ports"]
    assert interpolate(published, {}) == "127.0.0.1:8000:8000"
    assert interpolate(published, {"WEB_BIND": "0.0.0.0", "WEB_PORT": "80"}) == "0.0.0.0:80:8000"
    # The file says what it binds, where a person reads it.
    assert "127.0.0.1:8000 only" in COMPOSE.read_text()


def test_the_image_runs_with_debug_off():
    """Outside compose too: `docker run` of the image alone gets DEBUG off."""
    assert re.search(r"^ENV DJANGO_DEBUG=false\b", DOCKERFILE.read_text(), re.MULTILINE)


def test_the_settings_refuse_debug_off_without_a_secret_key(tmp_path):
    """What the image does with DEBUG off and no key: it refuses to start, saying why."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_DEBUG="false",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured: Set DJANGO_SECRET_KEY when DJANGO_DEBUG is false." in (
        result.stderr
    )
    env["DJANGO_SECRET_KEY"] = "tests-only-" + "k" * 40
    accepted = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert accepted.returncode == 0, accepted.stderr
