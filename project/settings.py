"""Settings of the example project.

Everything that differs between a laptop and a deployment comes from the environment; the
defaults give a working development setup (SQLite file, local Redis). docker/compose.yml sets
the same variables for its web and worker services:

    DJANGO_SECRET_KEY     secret key; required when DJANGO_DEBUG is false
    DJANGO_DEBUG          "true"/"false" (default "true": this is an example project)
    DJANGO_ALLOWED_HOSTS  comma-separated host names (default "localhost,127.0.0.1,[::1]")
    DATABASE_URL          e.g. postgres://user:pass@host:5432/db (default: SQLite at var/db.sqlite3)
    DATABASE_POOL_SIZE    PostgreSQL connections per process, at most (default 20)
    REDIS_URL             Celery broker and the cache (default redis://127.0.0.1:6379/0)
    OPENAI_API_KEY        API key of the OpenAI-compatible server
    OPENAI_BASE_URL       base URL of an OpenAI-compatible server (vLLM, Ollama); empty = OpenAI
    OPENAI_MODEL          chat model name (default "gpt-4o-mini")
    TOOL_CALLING_EXECUTION_MODE  "inline" (default) or "celery": where tool calls run
    OTEL_EXPORTER_OTLP_ENDPOINT  base URL of an OTLP/HTTP receiver (collector, Jaeger, Tempo,
                          Phoenix): every process exports its spans there (project/telemetry.py;
                          OTEL_METRICS_EXPORTER=otlp adds metrics, OTEL_SERVICE_NAME names it)

Production behind a TLS reverse proxy. The first six are off by default, for development over
plain HTTP; docker/compose.yml turns them on:

    DJANGO_SECURE_PROXY_SSL_HEADER  "true": trust the proxy's X-Forwarded-Proto: https
                          (SECURE_PROXY_SSL_HEADER); only when a proxy sets it on every request
    DJANGO_SECURE_SSL_REDIRECT  "true": redirect plain HTTP to HTTPS (SECURE_SSL_REDIRECT)
    DJANGO_SECURE_COOKIES "true": session and CSRF cookies are sent over HTTPS only
                          (SESSION_COOKIE_SECURE, CSRF_COOKIE_SECURE)
    DJANGO_SECURE_HSTS_SECONDS  Strict-Transport-Security max-age (SECURE_HSTS_SECONDS; 0 = no
                          header); start small, raise it to 31536000 once HTTPS works everywhere
    DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS  "true": HSTS covers subdomains too
    DJANGO_SECURE_HSTS_PRELOAD  "true": HSTS says "preload" (browsers' preload lists)
    DJANGO_CSRF_TRUSTED_ORIGINS  comma-separated origins, e.g. "https://portal.example.com", that
                          may send unsafe requests besides the site's own (CSRF_TRUSTED_ORIGINS)
    DJANGO_STATIC_ROOT    where collectstatic puts the static files that WhiteNoise serves
                          (default var/static)
    TOOL_CALLING_MCP_ALLOWED_HOSTS  comma-separated Host values /mcp/ accepts
                          (TOOL_CALLING["MCP"]["ALLOWED_HOSTS"]; unset: loopback only)
    TOOL_CALLING_MCP_ALLOWED_ORIGINS  comma-separated Origin values /mcp/ accepts
                          (TOOL_CALLING["MCP"]["ALLOWED_ORIGINS"]; unset: those of its hosts)
    TOOL_CALLING_MCP_RESOURCE  the URL clients reach /mcp/ at, e.g. "https://example.com/mcp/":
                          /mcp/ then also accepts OAuth access tokens of this project's
                          authorization server (/o/) issued for it (TOOL_CALLING["MCP"]
                          ["RESOURCE"]); unset: DRF tokens only
"""

import os
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

import tool_calling
from project import telemetry

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _as_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"The environment variable {name} must be true or false: {value!r}.")


def _as_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _as_seconds(name: str, value: str) -> int:
    if value.strip().isascii() and value.strip().isdigit():
        return int(value)
    raise ImproperlyConfigured(
        f"The environment variable {name} must be a number of seconds (0 or more): {value!r}."
    )


# --- Core ----------------------------------------------------------------------------------

DEBUG = _as_bool("DJANGO_DEBUG", os.environ.get("DJANGO_DEBUG", "true"))

# INSECURE: a development-only key, published in this repository. Set DJANGO_SECRET_KEY anywhere
# else; with DJANGO_DEBUG false the project refuses to start without it.
_INSECURE_DEV_SECRET_KEY = "django-insecure-tool-calling-example-project-dev-only"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _INSECURE_DEV_SECRET_KEY
if not DEBUG and SECRET_KEY == _INSECURE_DEV_SECRET_KEY:
    raise ImproperlyConfigured("Set DJANGO_SECRET_KEY when DJANGO_DEBUG is false.")

ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if host.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    # The OAuth 2.1 authorization server (/o/authorize/, /o/token/) whose access tokens /mcp/
    # accepts when TOOL_CALLING_MCP_RESOURCE is set.
    "oauth2_provider",
    "drf_spectacular",
    # Swagger UI's assets as static files: the browsable schema needs no CDN.
    "drf_spectacular_sidecar",
    "tool_calling",
    # The chat page at / (tool_calling/contrib/chat): conversations, streamed answers, approvals.
    "tool_calling.contrib.chat",
    "project.demo",
]

MIDDLEWARE = [
    # First, so that it sees every answer: under /api/ every error is JSON with a "detail",
    # the ones Django answers before or instead of DRF included (404, 413, CSRF, 500).
    "tool_calling.api.middleware.JSONErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files (STATIC_ROOT, filled by collectstatic) with DEBUG off too; the admin's and
    # the chat page's. With DEBUG on it finds them in the apps, as runserver does.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"

# --- Database ------------------------------------------------------------------------------

_DATABASE_URL = os.environ.get("DATABASE_URL", "")
if not _DATABASE_URL:
    (BASE_DIR / "var").mkdir(exist_ok=True)
    _DATABASE_URL = f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}"

DATABASES = {
    "default": dj_database_url.parse(_DATABASE_URL, conn_max_age=600, conn_health_checks=True),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's SQLite backend plus a write gate per process: the hundreds of threads of a worker
    # (and of the web server) queue for SQLite's one writer instead of polling for it and
    # failing with "database is locked" (tool_calling/db/backends/sqlite3/base.py).
    DATABASES["default"]["ENGINE"] = "tool_calling.db.backends.sqlite3"
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            # BEGIN IMMEDIATE takes the write lock up front, so two concurrent turns on one
            # conversation queue up instead of failing with "database is locked" mid-transaction.
            "transaction_mode": "IMMEDIATE",
            # WAL lets readers run while a writer commits. synchronous=NORMAL is durable across
            # application crashes but can lose the last commits on power loss; use
            # synchronous=FULL where that matters.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "timeout": 30,
        }
    )

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A pool of connections per process (psycopg_pool), shared by its threads: the worker's
    # hundreds of threads and the web server's request threads take a connection when they query
    # and give it back when they wait on the network or end, so each process holds at most
    # max_size connections of the server's max_connections (PostgreSQL's default is 100).
    # Pooling needs CONN_MAX_AGE 0: a connection goes back to the pool, not away.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2,
        "max_size": int(os.environ.get("DATABASE_POOL_SIZE") or 20),
        # Seconds a thread waits for a free connection before the query fails.
        "timeout": 30,
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth, i18n, static files --------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

# The chat page sends users who are not logged in to its login form (Django's LoginView).
LOGIN_URL = "tool_calling_chat:login"

# --- Security behind a TLS proxy, static files ---------------------------------------------
# Every value comes from the environment (the module docstring); docker/compose.yml sets them for
# a deployment behind a TLS reverse proxy, where `manage.py check --deploy` finds nothing.

if _as_bool(
    "DJANGO_SECURE_PROXY_SSL_HEADER", os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER", "false")
):
    # The proxy says which scheme the client used: HTTPS requests are secure (request.is_secure:
    # CSRF origin checks, the redirect below, absolute URLs). Only behind a proxy that sets it
    # on every request: a client reaching Django directly could claim HTTPS.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = _as_bool(
    "DJANGO_SECURE_SSL_REDIRECT", os.environ.get("DJANGO_SECURE_SSL_REDIRECT", "false")
)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _as_bool(
    "DJANGO_SECURE_COOKIES", os.environ.get("DJANGO_SECURE_COOKIES", "false")
)
SECURE_HSTS_SECONDS = _as_seconds(
    "DJANGO_SECURE_HSTS_SECONDS", os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "0")
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _as_bool(
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS",
    os.environ.get("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", "false"),
)
SECURE_HSTS_PRELOAD = _as_bool(
    "DJANGO_SECURE_HSTS_PRELOAD", os.environ.get("DJANGO_SECURE_HSTS_PRELOAD", "false")
)
CSRF_TRUSTED_ORIGINS = _as_list(os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", ""))

# collectstatic copies every app's static files here; WhiteNoise (MIDDLEWARE) serves them.
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT") or BASE_DIR / "var" / "static")

# /mcp/ (tool_calling.asgi.with_mcp): which Host and Origin headers it accepts. Unset, the app's
# defaults: loopback hosts, and the origins of the accepted hosts.
_MCP: dict[str, object] = {}
if _mcp_hosts := _as_list(os.environ.get("TOOL_CALLING_MCP_ALLOWED_HOSTS", "")):
    _MCP["ALLOWED_HOSTS"] = _mcp_hosts
if _mcp_origins := _as_list(os.environ.get("TOOL_CALLING_MCP_ALLOWED_ORIGINS", "")):
    _MCP["ALLOWED_ORIGINS"] = _mcp_origins
# OAuth on /mcp/: this project is its own authorization server, so the issuer is the origin of
# /mcp/'s URL (its RFC 8414 metadata is at /.well-known/oauth-authorization-server).
if _mcp_resource := os.environ.get("TOOL_CALLING_MCP_RESOURCE", "").strip():
    _MCP["RESOURCE"] = _mcp_resource
    _resource = urlsplit(_mcp_resource)
    _MCP["AUTHORIZATION_SERVERS"] = [f"{_resource.scheme}://{_resource.netloc}"]

# The authorization server (django-oauth-toolkit, mounted at /o/): authorization code with PKCE
# (S256 only) for MCP clients, the scopes /mcp/ knows (TOOL_CALLING["MCP"]["SCOPE"], and any
# that TOOL_CALLING["MCP"]["TOOL_SCOPES"] names must be listed here too). Clients are registered
# in the admin (Applications: public, authorization code, their redirect URIs).
# Every RFC 9700 (OAuth 2.0 security best practice) behaviour is on: no implicit or password
# grant, no token in a URL, the `iss` response parameter, tokens stored hashed, refresh-token
# replay revoking the family, PKCE required.
OAUTH2_PROVIDER = {
    "PKCE_REQUIRED": True,
    "SCOPES": {"mcp": "Use the tools you may use, over MCP"},
    "DEFAULT_SCOPES": ["mcp"],
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
}
# But for http redirect URIs: desktop and IDE MCP clients receive the code on a loopback
# address (http://127.0.0.1:<port>/..., RFC 8252 section 7.3, which the BCP allows), and the
# toolkit's scheme check cannot tell loopback from other http URIs, so its warning is silenced.
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]

# --- Django REST framework -----------------------------------------------------------------

REST_FRAMEWORK = {
    # Default-deny: every endpoint needs a logged-in user unless a view says otherwise.
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Token first, so an anonymous request gets 401 with "WWW-Authenticate: Token" (the first
    # class decides). Session-authenticated unsafe requests must carry the CSRF token.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # ScopedRateThrottle scopes of tool_calling.api: new turns (POST .../messages/) per user.
    "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": "30/min"},
    # The OpenAPI schema at /api/schema/ (drf-spectacular; docs/openapi.yaml is its snapshot).
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# --- OpenAPI schema (drf-spectacular) -------------------------------------------------------

SPECTACULAR_SETTINGS = {
    "TITLE": "tool_calling API",
    "DESCRIPTION": (
        "Conversations with an LLM that calls governed tools: send a message to start a turn "
        "(a run), follow its events, cancel or retry it, and approve or deny the tool calls "
        "that wait for a person. Every endpoint needs an authenticated user (a DRF token or a "
        "session); objects of other users answer 404."
    ),
    "VERSION": tool_calling.__version__,
    # Separate request and response components (e.g. Conversation / ConversationRequest), so
    # read-only fields never appear in request bodies.
    "COMPONENT_SPLIT_REQUEST": True,
    # The schema documents the API, not the schema's own endpoint.
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from drf_spectacular_sidecar's static files, not from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Runs and tool calls both have a "status" enum: name each after its choices.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "tool_calling.models.RunStatus",
        "ExecutionStatusEnum": "tool_calling.models.ExecutionStatus",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        # GET /api/runs/{id}/events/ is a plain async Django view: this hook documents it.
        "tool_calling.api.schema.add_run_events",
        # The limits of TOOL_CALLING["API"] (?wait, message length), read when generating.
        "tool_calling.api.schema.add_input_limits",
    ],
}

# --- Cache ----------------------------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

# Redis, shared by every web process (the admin's dashboards keep their settled figures there;
# the API's turn rate counts in the database). Bounded timeouts: a stalled Redis costs a figure,
# never a hang. JSON, never pickle: this is the broker's Redis, and a pickled value planted there
# would run code in whichever process read it (S21; tool_calling.W003 warns of that).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "tool_calling_example",
        "OPTIONS": {
            "socket_connect_timeout": 2,
            "socket_timeout": 2,
            # One pool of connections per process, not one per request (tool_calling/cache.py).
            "pool_class": "tool_calling.cache.SharedConnectionPool",
            "serializer": "tool_calling.cache.JSONSerializer",
        },
    },
}

# --- Celery (read by project/celery.py through the CELERY_ namespace) ----------------------

CELERY_BROKER_URL = REDIS_URL
# kombu's Redis transport with one Redis client per channel, not a new one per command (the
# consumer of a worker running hundreds of calls spent a quarter of its time building them).
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT = "tool_calling.calls.transport:RedisTransport"
# No result backend: tool_calling's tasks keep their outcomes in the database, and with one every
# publish built a result object on the backend, and every thread its own connection to it.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# JSON only: a pickled message pushed into the queue is refused, never unpickled.
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
# At-least-once: a task is acknowledged after it ran, and redelivered if its worker dies.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_ACKS_ON_FAILURE = True
CELERY_TASK_ACKS_ON_TIMEOUT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes the database connections before and after every task unless this
# is set: a tool call would open (and on PostgreSQL authenticate) a connection each time. With
# it, a worker process keeps its connections for this many tasks; tool_calling's task bodies
# still drop a connection that failed (close_old_connections), as Django does per request.
CELERY_DB_REUSE_MAX = 1000
# A Redis blip must not abort the calls that are running: they need no Redis to finish. Celery
# would cancel them (a non-idempotent call would then end "outcome unknown"); left running, a
# call finishes, its row records the outcome, and a message redelivered later finds it done (the
# call's lease, not the broker, decides whether a tool runs again).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = 30
# Time limits of tasks without their own (a run step on a prefork worker; tool calls get their
# tool's): longer than the model client waits for a model call (CHAT_MODEL TIMEOUT 60 s x 3
# attempts), so a stalled model ends by the client's timeout and retries (tool_calling.W004).
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_TASK_TIME_LIMIT = 300
# Redis redelivers an unacknowledged task after this many seconds. Celery's Redis caveats ask
# for the same value wherever it is read (here, the broker's options and the top level).
_VISIBILITY_TIMEOUT = 1800
# The socket timeouts make a worker give up on a stalled Redis instead of hanging on it
# (checked by tool_calling.W001; tool_calling's own publishes use EXECUTION["BROKER_TIMEOUT"]).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _VISIBILITY_TIMEOUT,
    "socket_timeout": 5,
    "socket_connect_timeout": 5,
}
CELERY_VISIBILITY_TIMEOUT = _VISIBILITY_TIMEOUT
CELERY_TIMEZONE = TIME_ZONE

# Periodic tasks, sent by beat: `celery -A project worker -B` (scripts/run.sh) or a separate
# `celery -A project beat` (docker/compose.yml). Run exactly one beat per deployment.
CELERY_BEAT_SCHEDULE = {
    # Re-dispatches tool calls stuck before a worker took them (lost between the commit and the
    # publish, or by the broker) and settles attempts whose worker died (R3, R10).
    "sweep-tool-executions": {
        "task": "tool_calling.sweep_tool_executions",
        "schedule": 30.0,
        # A sweep that waited longer than one period is dropped: the next one does its work.
        "options": {"expires": 25},
    },
    # Deletes what TOOL_CALLING["RETENTION"] no longer keeps (nothing while its days are None),
    # in batches of its BATCH_SIZE rows, each a short transaction of its own.
    "purge-expired": {
        "task": "tool_calling.purge_expired",
        "schedule": 3600.0,
        "options": {"expires": 3000},
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(BASE_DIR / "var" / "celerybeat-schedule")

# Queues. Each tool call is published on its tool's queue: Tool.queue in the admin, else
# TOOL_CALLING["EXECUTION"]["QUEUE"] ("tool_calling"); everything else (turns, the sweeper)
# goes to Celery's default queue "celery". Those names need no route here; start workers that
# consume them, e.g. `celery -A project worker -Q tool_calling,celery` plus, for a slow or
# rate-limited tool given its own queue "search", `celery -A project worker -Q search -c 4`.
# Route other tasks by name when they should leave the default queue:
#     CELERY_TASK_ROUTES = {"myapp.tasks.*": {"queue": "myapp"}}

# --- tool_calling (every key and its default: tool_calling/conf.py) ------------------------

TOOL_CALLING = {
    "CHAT_MODEL": {
        "MODEL": os.environ.get("OPENAI_MODEL") or "gpt-4o-mini",
        # None lets the openai SDK use its own default (api.openai.com).
        "BASE_URL": os.environ.get("OPENAI_BASE_URL") or None,
        "API_KEY": os.environ.get("OPENAI_API_KEY") or None,
    },
    # "inline" runs tool calls in the process of the turn; "celery" sends each to a worker.
    "EXECUTION": {"MODE": os.environ.get("TOOL_CALLING_EXECUTION_MODE") or "inline"},
    # TOOL_CALLING_MCP_ALLOWED_HOSTS / _ORIGINS (the security section above).
    "MCP": _MCP,
    # What the hourly purge-expired task (CELERY_BEAT_SCHEDULE) deletes: a run's events a month
    # after it ended, the run after three, the audit of a call after six.
    "RETENTION": {"RUN_EVENT_DAYS": 30, "FINISHED_RUN_DAYS": 90, "AUDIT_DAYS": 180},
}

# --- OpenTelemetry (docs/observability.md) -----------------------------------------------

# With OTEL_EXPORTER_OTLP_ENDPOINT set, this process (web, worker, beat or command) exports its
# spans over OTLP/HTTP, and its metrics only with OTEL_METRICS_EXPORTER=otlp (or a metrics
# endpoint): project/telemetry.py lists the variables. Unset, nothing is recorded. Set here,
# where every process of the project passes before its first request or task.
telemetry.configure()

# --- Logging -------------------------------------------------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "console": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "console"},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        # Replaces the handlers Django gives its own logger (DEFAULT_LOGGING: a console handler
        # while DEBUG is on): with those and the root's, every 4xx and 500 was logged twice.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "tool_calling": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
