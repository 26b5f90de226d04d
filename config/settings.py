"""The one settings module. Every knob is an environment variable read here.

Each variable is documented where it is read and listed with its default in
`.env.example`. Nothing exists only in production: the same module runs the
developer's `make run`, the test suite and a production deployment.
"""

from pathlib import Path

import environ

from config.durations import parse_duration

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# A local `.env` file, if present, fills in variables not set in the environment.
env_file = BASE_DIR / ".env"
if env_file.exists():
    env.read_env(str(env_file))

# --- Django core -------------------------------------------------------------

# DJANGO_DEBUG: show tracebacks in the browser. Never on in production.
DEBUG = env.bool("DJANGO_DEBUG", default=False)
# DJANGO_SECRET_KEY: signs sessions and CSRF tokens. The default is for local use
# only; production must set its own.
SECRET_KEY = env(
    "DJANGO_SECRET_KEY",
    default="insecure-local-development-key-change-me-in-production",
)
# DJANGO_ALLOWED_HOSTS: comma-separated host names the web server answers to.
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
# DJANGO_CSRF_TRUSTED_ORIGINS: origins (scheme://host) allowed to POST forms.
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "console.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "axes",
    "runtime",
    "users",
    "scheduling",
    "delivery",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.middleware.RequestBodyLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns locked-out logins into a 429 page.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    # First, so a locked-out operator is refused before the password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

# --- Database ----------------------------------------------------------------

# DATABASE_URL: which database to use. The default is an embedded SQLite file so
# `make run` needs no server; production and the test suite use PostgreSQL,
# e.g. postgres://postgres@127.0.0.1:5432/birthday_scheduler.
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
}
# DB_CONN_MAX_AGE: seconds a connection is kept open. Long-running workers
# reconnecting for every unit of work halves their throughput (measured with
# Django's default CONN_MAX_AGE=0 against a kept connection).
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web server, the scheduler and the worker write to this file at the same
    # time. WAL lets readers run beside the one writer; IMMEDIATE transactions take
    # the write lock at BEGIN, so a transaction never fails half-way with
    # "database is locked" when it upgrades from reading to writing; the busy
    # timeout makes a second writer wait for the lock instead of failing.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": (
                "PRAGMA journal_mode=WAL;"
                "PRAGMA synchronous=NORMAL;"
                "PRAGMA busy_timeout=30000;"
            ),
        }
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Internationalisation and time ------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files --------------------------------------------------------------

STATIC_URL = "static/"
# `manage.py collectstatic` gathers the admin's CSS/JS here; WhiteNoise serves it.
STATIC_ROOT = BASE_DIR / "var" / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- Security ------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# DJANGO_SECURE_COOKIES: mark session and CSRF cookies Secure (behind HTTPS).
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# ADMIN_URL: where the operator console lives; change it to keep scanners away.
ADMIN_URL = env("ADMIN_URL", default="admin/").strip("/") + "/"

# AXES_FAILURE_LIMIT: failed admin logins (per user name and address) before a
# lock-out; AXES_COOLOFF_MINUTES: how long the lock-out lasts.
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = env.float("AXES_COOLOFF_MINUTES", default=15) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True

# API_MAX_BODY_BYTES: the largest request body the API accepts (413 above it).
API_MAX_BODY_BYTES = env.int("API_MAX_BODY_BYTES", default=64 * 1024)
# Django's own ceiling on bodies read into memory, as a second line of defence.
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header is what makes DRF answer 401
        # (not 403) to a request without credentials.
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Django's model permissions (view / add / change / delete recipient), granted
    # to operator accounts or groups in the admin; superusers hold them all.
    "DEFAULT_PERMISSION_CLASSES": ["config.permissions.ModelPermissions"],
    "DEFAULT_PAGINATION_CLASS": "config.pagination.StandardPagination",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": ["config.parsers.JSONBodyParser"],
    "EXCEPTION_HANDLER": "config.exceptions.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

# --- The scheduler ---------------------------------------------------------------

# EVENT_SEND_TIME: local wall-clock time (HH:MM) at which messages go out.
EVENT_SEND_TIME = env("EVENT_SEND_TIME", default="09:00")
# EVENT_MAX_LATENESS: events more overdue than this are not sent but FAILED
# (a birthday greeting three days late does more harm than good). A duration:
# "48h", "90m", "3600s" or plain seconds.
EVENT_MAX_LATENESS = parse_duration(env("EVENT_MAX_LATENESS", default="48h"))
# SCHEDULER_RECONCILE_INTERVAL: how often run_scheduler looks for users without
# a pending event (rows created by paths that skipped signals).
SCHEDULER_RECONCILE_INTERVAL = parse_duration(
    env("SCHEDULER_RECONCILE_INTERVAL", default="5m")
)

# --- Delivery ----------------------------------------------------------------------

# WEBHOOK_URL: where messages are POSTed. A worker refuses to start without it.
WEBHOOK_URL = env("WEBHOOK_URL", default="")
# WEBHOOK_TIMEOUT: seconds to wait for the receiver (connect and read).
WEBHOOK_TIMEOUT = parse_duration(env("WEBHOOK_TIMEOUT", default="10s"))
# WEBHOOK_SECRET: a Standard Webhooks secret (whsec_...); when set, every request
# is signed with the webhook-id / webhook-timestamp / webhook-signature headers.
WEBHOOK_SECRET = env("WEBHOOK_SECRET", default="")
# DELIVERY_RETRY_BASE / DELIVERY_RETRY_MAX: capped exponential backoff with full
# jitter between attempts after a transient failure.
DELIVERY_RETRY_BASE = parse_duration(env("DELIVERY_RETRY_BASE", default="10s"))
DELIVERY_RETRY_MAX = parse_duration(env("DELIVERY_RETRY_MAX", default="1h"))
# DELIVERY_MAX_ATTEMPTS: attempts before a delivery is given up as DEAD.
DELIVERY_MAX_ATTEMPTS = env.int("DELIVERY_MAX_ATTEMPTS", default=8)
# DELIVERY_LEASE_MARGIN: a worker's lease on a delivery lasts WEBHOOK_TIMEOUT plus
# this margin and is renewed every third of that while the worker lives; the
# deliveries of a worker that dies are taken over after at most that long.
DELIVERY_LEASE_MARGIN = parse_duration(env("DELIVERY_LEASE_MARGIN", default="30s"))

# --- Logging -------------------------------------------------------------------------

# LOG_LEVEL: the level of the project's own loggers.
LOG_LEVEL = env("LOG_LEVEL", default="INFO")
# LOG_JSON: write logs as JSON lines (one object per line) for log shippers.
LOG_JSON = env.bool("LOG_JSON", default=False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"()": "config.logging.TextFormatter"},
        "json": {"()": "config.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_JSON else "text",
        },
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        app: {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False}
        for app in ("users", "scheduling", "delivery", "config")
    },
}
