"""The one settings module. Every knob is an environment variable read here.

Each variable is documented where it is read and listed with its default in
`.env.example`. Nothing exists only in production: the same module runs the
developer's `make run`, the test suite and a production deployment.
"""

from ipaddress import ip_network
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from config import __version__
from config.durations import parse_duration
from config.esp import esp_webhooks_check
from config.secret_key import check_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent


def _network(setting: str, entry: str):
    """One CIDR entry of a list of networks, or a start-up error that names the setting and the entry."""
    entry = entry.strip()
    try:
        return ip_network(entry)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{setting}: {entry!r} is not a network in CIDR form ({exc})") from None


env = environ.Env()
# A local `.env` file, if present, fills in variables not set in the environment.
env_file = BASE_DIR / ".env"
if env_file.exists():
    env.read_env(str(env_file))

# --- Django core -------------------------------------------------------------

# DJANGO_DEBUG: show tracebacks in the browser. Never on in production.
DEBUG = env.bool("DJANGO_DEBUG", default=False)
# DJANGO_SECRET_KEY: signs sessions, CSRF tokens and password-reset links. Without
# it, the key is read from DJANGO_SECRET_KEY_FILE (default var/secret-key, which
# `make run` and `make test` fill with a random key on first use; a mounted secret
# in a container). With debug off, a missing, short or well-known key stops every
# process at start-up: a key anyone can read lets them forge an operator's session.
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
SECRET_KEY_FILE = Path(env("DJANGO_SECRET_KEY_FILE", default=str(BASE_DIR / "var" / "secret-key")))
if not SECRET_KEY and SECRET_KEY_FILE.is_file():
    SECRET_KEY = SECRET_KEY_FILE.read_text().strip()
if not SECRET_KEY and DEBUG:
    SECRET_KEY = "django-insecure-debug-only-key-never-used-with-debug-off"
if not DEBUG:
    check_secret_key(SECRET_KEY, source=SECRET_KEY_FILE)
# DJANGO_ALLOWED_HOSTS: comma-separated host names the web server answers to.
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
# DJANGO_CSRF_TRUSTED_ORIGINS: origins (scheme://host) allowed to POST forms.
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# This project's own apps: installed below, and their loggers write at LOG_LEVEL.
PROJECT_APPS = ("runtime", "users", "scheduling", "delivery", "people", "console", "monitoring")

INSTALLED_APPS = [
    "console.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # PostgreSQL's own index types and operator classes in models' Meta (the
    # recipients' trigram indexes, users.models): without it Django writes an
    # index expression with an operator class as SQL PostgreSQL refuses.
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    # Swagger UI's JavaScript and CSS as static files: the docs page needs no CDN.
    "drf_spectacular_sidecar",
    "axes",
    # Not "anymail": users/esp/ uses only its webhook views and signals, which need no app, and
    # the app would only register two checks of settings this file builds itself (ANYMAIL,
    # below), importing requests into every process (a tenth of a worker's start).
    *PROJECT_APPS,
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The people's pages' privacy headers (people.middleware), on every answer under /p/.
    "people.middleware.PrivatePageHeadersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.middleware.RequestBodyLimitMiddleware",
    # Every request computes with the time zone rules in force (scheduling.zonedata).
    "scheduling.middleware.ZoneDataMiddleware",
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

# DATABASE_URL: the PostgreSQL database (the only kind the code is written for).
# Unset or empty, it is the server of this checkout's own that `make run` starts
# (devtools/local.py, data in var/postgres, as root under /var/lib/birthday-scheduler-dev;
# on 5433, beside any system server on 5432), so manage.py commands typed while `make run` runs work on the same data.
# Several hosts, for a primary and its standbys, are libpq's own failover:
# postgres://u@db1:5432,db2:5432/name?target_session_attrs=read-write gives HOST
# "db1,db2", PORT "5432,5432" and OPTIONS {"target_session_attrs": "read-write"},
# which psycopg hands to libpq as they are; every new connection goes to the node
# that takes writes (docs/operations.md, "High availability").
LOCAL_DATABASE_URL = "postgres://postgres@127.0.0.1:5433/birthday_scheduler"
DATABASES = {
    "default": env.db_url_config(env.str("DATABASE_URL", default="") or LOCAL_DATABASE_URL),
}
if DATABASES["default"].get("ENGINE") != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        "DATABASE_URL must name a PostgreSQL database: postgres://user@host:port/name."
    )
# DB_CONN_MAX_AGE: seconds a connection is kept open. Long-running workers
# reconnecting for every unit of work (Django's default, CONN_MAX_AGE=0) would
# spend a large share of their time connecting instead of working.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# DATABASE_TRANSACTION_POOLING: DATABASE_URL goes through a pooler in transaction
# mode (PgBouncer's pool_mode = transaction), which lends each transaction
# whichever server connection is free: nothing may outlive a transaction on the
# server. The code keeps none (no session SET, no advisory lock, no temporary
# table, no cursor WITH HOLD); LISTEN is what needs a session, hence
# DATABASE_LISTEN_URL below. Django's server-side cursors (QuerySet.iterator()
# outside a transaction) would be lost between transactions, so they are off.
DATABASE_TRANSACTION_POOLING = env.bool("DATABASE_TRANSACTION_POOLING", default=False)
if DATABASE_TRANSACTION_POOLING:
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# Django's, with lost connections behind a pooler reported as such
# (runtime/postgresql/base.py says how they otherwise look).
DATABASES["default"]["ENGINE"] = "runtime.postgresql"
# Never server-side prepared statements, pooled or not (Django's default,
# stated here so that nobody turns them on for speed): psycopg prepares a
# statement on the server after a few runs, and a transaction pooler then
# sends a later run to a server connection that never saw it ("prepared
# statement does not exist"). They would save only the planning, a fraction
# of a percent of a claim or record batch (docs/capacity.md, section 3).
DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None
# DATABASE_LISTEN_URL: where schedulers and workers LISTEN for wake-ups (a new due
# event, queued deliveries), on a connection of their own that must keep its
# session: the database server itself (or a session-mode pool), never a
# transaction pooler. Empty: DATABASE_URL's server, or, with
# DATABASE_TRANSACTION_POOLING, no notifications at all: the processes then find
# new work by looking every --interval (scheduled events are still claimed on
# time; what an operator or the API makes due now waits up to one interval at
# the scheduler and one more at the worker).
DATABASE_LISTEN = env.db("DATABASE_LISTEN_URL") if env("DATABASE_LISTEN_URL", default="") else None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Internationalisation and time ------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# ISO dates and moments with their zone in every page (config/formats/en/formats.py).
FORMAT_MODULE_PATH = ["config.formats"]
USE_I18N = True
# The languages the product has strings in (locale/: the people's pages, people/): a person's
# language tag picks the first of these along its fallbacks (de-AT: de), else English. The
# compiled catalogues (.mo) are committed beside their .po, so no install needs gettext
# (docs/operations.md, "Translations").
LANGUAGES = [("en", "English"), ("de", "Deutsch")]
LOCALE_PATHS = [BASE_DIR / "locale"]
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
# DJANGO_SECURE_SSL_REDIRECT: redirect plain-HTTP requests to HTTPS.
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=False)
# DJANGO_SECURE_HSTS_SECONDS: how long browsers must use HTTPS only (0: no HSTS
# header). Start small (3600) and raise it to a year once HTTPS is known good;
# DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS and DJANGO_SECURE_HSTS_PRELOAD extend it.
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)

# TRUSTED_PROXY_COUNT: reverse proxies in front of the web server that append to
# X-Forwarded-For (1 behind one nginx). The client's address is read through
# them, so lock-outs and throttles apply to the client, not to the proxy every
# client shares; 0 ignores the header, which clients could forge.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
# With a TLS proxy in front, requests reach Django over plain HTTP; the proxy's
# X-Forwarded-Proto says whether the client used HTTPS (for the redirect and the
# Secure cookies). Only trusted when there is a proxy to set it.
if TRUSTED_PROXY_COUNT:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# PUBLIC_BASE_URL: the product's address as people reach it (https://greetings.example.com),
# for links that leave it: a mail's one-click unsubscribe, a person's own page.
PUBLIC_BASE_URL = env("PUBLIC_BASE_URL", default="http://127.0.0.1:8000")

# ADMIN_URL: where the operator console lives; change it to keep scanners away.
ADMIN_URL = env("ADMIN_URL", default="admin/").strip("/") + "/"

# AXES_FAILURE_LIMIT: failed admin logins (per user name and address) before a
# lock-out; AXES_COOLOFF_MINUTES: how long the lock-out lasts.
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = env.float("AXES_COOLOFF_MINUTES", default=15) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "config.client_address.client_address"

# API_MAX_BODY_BYTES: the largest request body the API accepts (413 above it).
API_MAX_BODY_BYTES = env.int("API_MAX_BODY_BYTES", default=64 * 1024)
# Django's own ceiling on bodies read into memory, as a second line of defence (raised below
# to ESP_WEBHOOK_MAX_BODY_BYTES when ESPs post).
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES

# CACHE_URL: where rate-limit counters live. The default, a table in the
# database, is shared by every web process on every host, so a limit means the
# same however many there are (a per-process memory cache would multiply it by
# the process count); rediscache://host:6379/0 takes that load off PostgreSQL.
CACHES = {"default": env.cache("CACHE_URL", default="dbcache://django_cache")}

# API_THROTTLE_ACCOUNT: requests per operator account; API_THROTTLE_ANONYMOUS: per
# client address without an account (the public schema and docs);
# API_THROTTLE_FAILED_AUTHENTICATION: wrong tokens per client address before it
# is refused outright. Over a limit the API answers 429 with Retry-After. Rates
# are "<count>/<second|minute|hour|day>".
API_THROTTLE_RATES = {
    "user": env("API_THROTTLE_ACCOUNT", default="1200/minute"),
    "anon": env("API_THROTTLE_ANONYMOUS", default="120/minute"),
    "failed_authentication": env("API_THROTTLE_FAILED_AUTHENTICATION", default="20/minute"),
    # PERSONAL_PAGE_THROTTLE: requests to the people's own pages (/p/) per client address,
    # wrong links included, so guessing one is slow; over it a 429 page (config.throttling).
    "personal_page": env("PERSONAL_PAGE_THROTTLE", default="60/minute"),
}

# PERSONAL_LINK_MAX_AGE_DAYS: how long a link to a person's own page opens it after it was
# issued (users.services.personal_link_issue); issuing a new one ends the one before at once.
PERSONAL_LINK_MAX_AGE_DAYS = env.int("PERSONAL_LINK_MAX_AGE_DAYS", default=30)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header is what makes DRF answer 401
        # (not 403) to a request without credentials.
        "config.authentication.ThrottledTokenAuthentication",
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
    "DEFAULT_THROTTLE_CLASSES": [
        "config.throttling.AccountThrottle",
        "config.throttling.AnonymousThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": API_THROTTLE_RATES,
    "EXCEPTION_HANDLER": "config.exceptions.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "config.openapi.AutoSchema",
}

# The OpenAPI 3 description of the API, served at /api/v1/schema/ (Swagger UI at
# /api/v1/docs/) and generated from the serializers and views themselves.
SPECTACULAR_SETTINGS = {
    "TITLE": "Birthday scheduler API",
    "VERSION": __version__,
    "DESCRIPTION": (
        "Recipients of the birthday webhook: each gets a message once per birthday, at "
        "the same local time (09:00 unless configured otherwise) in their own IANA time "
        "zone.\n\n"
        "Every operation needs an operator's credentials: a DRF token "
        "(`Authorization: Token <key>`) or the session of an operator logged in to the "
        "admin (unsafe methods then also need the `X-CSRFToken` header), and the "
        "matching model permission (view, add, change or delete recipient; reading "
        "events also needs view event; destinations need the destination permissions, "
        "rotate-secret, pause and resume its change permission). Request and response bodies are JSON with "
        "snake_case fields. Lists are paginated (`count`, `next`, `previous`, "
        "`results`; `?page=` and `?page_size=` up to 500).\n\n"
        "Errors are JSON: a 400 for invalid fields maps each bad field (or "
        "`non_field_errors`) to a list of messages; every other error is "
        '`{"detail": "..."}`.'
    ),
    # Public, on purpose: the schema describes only the API's shape (which the
    # docs/api.md publishes too), never data, and a client developer needs it before
    # holding a token. Every operation it describes still requires credentials.
    # No authentication classes either, so a stale token or session cannot turn
    # the documentation itself into a 401 or 403.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    # The schema endpoint is not part of the API it describes.
    "SERVE_INCLUDE_SCHEMA": False,
    # Separate request and response components: `id`, `next_event` and the
    # timestamps are then required in responses and absent from request bodies,
    # which is what a client (and a generated client) must rely on.
    "COMPONENT_SPLIT_REQUEST": True,
    # One name for the event types wherever they appear (events, destinations' subscriptions).
    "ENUM_NAME_OVERRIDES": {
        "EventTypeEnum": "scheduling.event_types.EventType",
        "StatusEnum": "scheduling.models.EventStatus",
        "RecoveryStatusEnum": "delivery.models.RecoveryStatus",
    },
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
}

# --- The scheduler ---------------------------------------------------------------

# EVENT_SEND_TIME: local wall-clock time (HH:MM) at which messages go out, for
# the recipients without a send time of their own (users.User.send_time).
EVENT_SEND_TIME = env("EVENT_SEND_TIME", default="09:00")
# EVENT_MAX_LATENESS: events more overdue than this are not sent but FAILED
# (a birthday greeting three days late does more harm than good). A duration:
# "48h", "90m", "3600s" or plain seconds.
EVENT_MAX_LATENESS = parse_duration(env("EVENT_MAX_LATENESS", default="48h"))
# EVENT_CATCH_UP_WINDOW: a recipient created, or edited (a date of birth, zone or
# send time), after the day's send time of one of their occurrences but no longer
# than this after it gets that occurrence at once, under its usual idempotency key,
# once; later than that, the next occurrence. 0: no catch-up, the first occurrence
# whose send time has not passed. Cut to EVENT_MAX_LATENESS if longer (an
# occurrence later than that would be failed as too late). A duration, as above.
EVENT_CATCH_UP_WINDOW = parse_duration(env("EVENT_CATCH_UP_WINDOW", default="12h"))
# EVENT_CATCH_UP_WINDOW_BY_TYPE: the event types whose window differs, as
# TYPE=duration pairs separated by commas ("ANNIVERSARY=0,BIRTHDAY=6h"). A type
# that is not registered stops every process at start-up (scheduling.apps).
EVENT_CATCH_UP_WINDOW_BY_TYPE = {
    event_type.strip(): parse_duration(window)
    for event_type, window in env.dict("EVENT_CATCH_UP_WINDOW_BY_TYPE", default={}).items()
}
# SCHEDULER_RECONCILE_INTERVAL: how often run_scheduler looks for users without
# a pending event (rows created by paths that skipped signals).
SCHEDULER_RECONCILE_INTERVAL = parse_duration(env("SCHEDULER_RECONCILE_INTERVAL", default="5m"))
# HISTORY_RETENTION: how long COMPLETED and FAILED events (by target time) are kept,
# with their deliveries and attempts; older ones are deleted by the scheduler
# between claims and by `manage.py prune_history`. Each recipient's latest
# handled occurrence of each type is kept whatever its age: rescheduling reads it
# (scheduling.services.occurrences.last_handled_occurrence).
HISTORY_RETENTION = parse_duration(env("HISTORY_RETENTION", default="400d"))

# MENTIONS_BY_DEFAULT: whether a recipient who has said nothing (users.User.mention_consent
# null) agrees to be mentioned by the chat destinations that mention the person they greet
# (delivery.Destination.mention_recipient). Off by default: a mention notifies a person, so
# it waits for their yes unless the company has decided otherwise; each person's own
# true or false always wins.
MENTIONS_BY_DEFAULT = env.bool("MENTIONS_BY_DEFAULT", default=False)

# --- Delivery ----------------------------------------------------------------------

# WEBHOOK_URL: the receiver of an installation from before destinations (delivery.Destination).
# While no destination exists, the scheduler and the worker seed one named "default" from it
# (and WEBHOOK_SECRET), subscribed to every event type. Once destinations are managed from the
# console or the API, unset it: otherwise deleting every destination seeds it again.
# run_scheduler and run_worker refuse to start with one the worker would refuse to connect to (below).
WEBHOOK_URL = env("WEBHOOK_URL", default="")
# WEBHOOK_ALLOW_HTTP: receivers may be plain http, not only https. For development
# (`make run`'s sink and the test suite set it); a production receiver has TLS.
WEBHOOK_ALLOW_HTTP = env.bool("WEBHOOK_ALLOW_HTTP", default=False)
# SMTP_CA_FILE: a PEM file of CA certificates an email destination's relay may be signed by, trusted
# besides the system's (a relay with a private CA; the tests' self-signed one). There is no
# setting that skips verification: a relay's certificate is always checked against its name.
SMTP_CA_FILE = env("SMTP_CA_FILE", default="")
# SMTP_MESSAGES_PER_SESSION: messages sent over one SMTP session before it is closed and a new one
# opened (relays limit them: Postfix's default is 100 per connection for many setups; SES 50 per connection).
SMTP_MESSAGES_PER_SESSION = env.int("SMTP_MESSAGES_PER_SESSION", default=100)
# SMTP_IDLE_SECONDS: an SMTP session unused this long is closed rather than reused (relays drop idle
# sessions after a minute or so; RFC 5321 asks a server to wait at least 5 minutes).
SMTP_IDLE_SECONDS = env.float("SMTP_IDLE_SECONDS", default=30.0)
# SMTP_LOCAL_HOSTNAME: the name our EHLO gives; empty: this host's fully qualified name.
SMTP_LOCAL_HOSTNAME = env("SMTP_LOCAL_HOSTNAME", default="")
# WEBHOOK_ALLOWED_NETWORKS: comma-separated networks (CIDR) of receivers on premises.
# The worker connects to no loopback, private, shared, link-local, multicast,
# unspecified or reserved address, nor a cloud metadata address (169.254.169.254),
# checked on each address it connects to after DNS, unless it lies in one of these;
# a metadata address only when an entry names it alone (/32, /128). Empty: none
# (delivery/receivers/addresses.py). A bad entry stops every process at start-up.
WEBHOOK_ALLOWED_NETWORKS = [
    _network("WEBHOOK_ALLOWED_NETWORKS", entry) for entry in env.list("WEBHOOK_ALLOWED_NETWORKS", default=[])
]
# WEBHOOK_TIMEOUT: seconds to wait for a receiver (connect and read); a destination's own
# timeout may only be shorter (a delivery's lease is sized from this one).
WEBHOOK_TIMEOUT = parse_duration(env("WEBHOOK_TIMEOUT", default="10s"))
# WEBHOOK_SECRET: one or more Standard Webhooks secrets (whsec_...), separated by
# spaces; when set, every request carries webhook-id / webhook-timestamp and one
# signature per secret in webhook-signature, so a secret can be rotated without
# downtime (docs/operations.md, "Rotating the signing secret"). A worker refuses to start with
# a secret it cannot use.
WEBHOOK_SECRET = env("WEBHOOK_SECRET", default="")
# WEBHOOK_SECRET_KEYS: comma-separated Fernet keys that encrypt the destinations' signing
# secrets at rest (delivery.credentials.signing_secrets). The first encrypts, every one decrypts, so the key
# itself can rotate: put a new key first, keep the old one after it until every secret has been
# re-encrypted (manage.py destination_secrets_reencrypt), then drop it. Unset: one key derived
# from DJANGO_SECRET_KEY (HKDF); it stays last in the list to decrypt what it encrypted, so
# moving to explicit keys is: set them, re-encrypt.
WEBHOOK_SECRET_KEYS = env.list("WEBHOOK_SECRET_KEYS", default=[])
# DESTINATION_SECRET_GRACE: after a destination's secret is rotated, the previous ones keep
# signing beside the new one this long, so its receiver can move over; then they are dropped.
DESTINATION_SECRET_GRACE = parse_duration(env("DESTINATION_SECRET_GRACE", default="24h"))
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
# DELIVERY_RECOVERY_BATCH: deliveries a worker queues again per turn for a destination's
# recovery (delivery.actions.recovery), in one short transaction: small enough that the
# turn's sending goes on beside it, large enough that 100,000 take a few minutes at most.
DELIVERY_RECOVERY_BATCH = env.int("DELIVERY_RECOVERY_BATCH", default=500)

# --- Bounces and complaints from an ESP (docs/operations.md, "Bounces and complaints") ---------

# ESP_WEBHOOKS: comma-separated ESPs (amazon_ses, postmark, sendgrid, mailgun; config/esp.py)
# whose tracking webhooks are taken at /esp/<esp>/tracking/ (django-anymail). A hard bounce or
# a complaint reported there marks the recipient's address undeliverable. Empty: none mounted.
ESP_WEBHOOKS = [esp.strip() for esp in env.list("ESP_WEBHOOKS", default=[]) if esp.strip()]
# What verifies the posts (anymail's settings; an enabled ESP without one stops every process):
# ESP_WEBHOOK_SECRET: comma-separated "user:password" pairs for HTTP basic auth, given to the ESP
# in the webhook's URL (https://user:password@host/esp/postmark/tracking/); two during a rotation.
# ESP_MAILGUN_WEBHOOK_SIGNING_KEY: Mailgun's HTTP webhook signing key.
# ESP_SENDGRID_TRACKING_WEBHOOK_VERIFICATION_KEY: SendGrid's signed event webhook public key
# (the base64 text, without the PEM lines).
ANYMAIL = {
    name: value
    for name, value in {
        "WEBHOOK_SECRET": [
            pair.strip() for pair in env.list("ESP_WEBHOOK_SECRET", default=[]) if pair.strip()
        ],
        "MAILGUN_WEBHOOK_SIGNING_KEY": env("ESP_MAILGUN_WEBHOOK_SIGNING_KEY", default=""),
        "SENDGRID_TRACKING_WEBHOOK_VERIFICATION_KEY": env(
            "ESP_SENDGRID_TRACKING_WEBHOOK_VERIFICATION_KEY", default=""
        ),
    }.items()
    # Unset is absent: anymail would take an empty signing key as a key.
    if value
}
esp_webhooks_check(enabled=ESP_WEBHOOKS, anymail=ANYMAIL)
# ESP_WEBHOOK_MAX_BODY_BYTES: the largest post taken at /esp/ (API_MAX_BODY_BYTES is the API's):
# SendGrid batches events into posts of up to 768 KB.
ESP_WEBHOOK_MAX_BODY_BYTES = env.int("ESP_WEBHOOK_MAX_BODY_BYTES", default=1024 * 1024)
if ESP_WEBHOOKS:
    DATA_UPLOAD_MAX_MEMORY_SIZE = max(API_MAX_BODY_BYTES, ESP_WEBHOOK_MAX_BODY_BYTES)

# --- The receiver's limits and health (per endpoint, over every worker) ------------------

# WEBHOOK_MAX_RATE: most requests per second to the receiver from all workers on
# all hosts together (0: no cap), in every calendar second: workers take the slots
# of each second from the endpoint's row (delivery.rules.pace). Without it, a receiver that refuses with 429 and no
# Retry-After still gets a rate: each worker learns one from those 429s.
WEBHOOK_MAX_RATE = env.float("WEBHOOK_MAX_RATE", default=0.0)
# WEBHOOK_MAX_IN_FLIGHT: most requests open at the receiver from all workers
# together (0: no cap; each worker's own limit then adapts to the receiver alone).
WEBHOOK_MAX_IN_FLIGHT = env.int("WEBHOOK_MAX_IN_FLIGHT", default=0)
# ENDPOINT_FAILURE_THRESHOLD: endpoint failures in a row (timeouts, connection
# errors, 5xx, 429 or 503 with Retry-After, 401/403/404/410) after which the endpoint
# is FAILING: its deliveries wait without spending attempts while one probe at a time
# tries it. A 429 without Retry-After is the receiver's rate limit, not a failure: the
# workers learn its rate and pace to it.
ENDPOINT_FAILURE_THRESHOLD = env.int("ENDPOINT_FAILURE_THRESHOLD", default=5)
# ENDPOINT_PROBE_FIRST_INTERVAL / ENDPOINT_PROBE_MAX_INTERVAL: the wait before the
# first probe of a FAILING endpoint; it doubles after each failed probe, up to the max.
ENDPOINT_PROBE_FIRST_INTERVAL = parse_duration(env("ENDPOINT_PROBE_FIRST_INTERVAL", default="2s"))
ENDPOINT_PROBE_MAX_INTERVAL = parse_duration(env("ENDPOINT_PROBE_MAX_INTERVAL", default="60s"))

# --- Health and metrics ----------------------------------------------------------------

# METRICS_TOKEN: a bearer token (Authorization: Bearer <token>) that may read
# /metrics from any address. Empty: no token is accepted.
METRICS_TOKEN = env("METRICS_TOKEN", default="")
# METRICS_ALLOWED_NETWORKS: comma-separated networks (CIDR) that may read /metrics
# without the token; empty: none. The client address is read as everywhere else
# (config.client_address, through TRUSTED_PROXY_COUNT proxies). A bad entry stops
# every process at start-up rather than leave /metrics open or shut by surprise.
METRICS_ALLOWED_NETWORKS = [
    ip_network(network)
    for network in env.list("METRICS_ALLOWED_NETWORKS", default=["127.0.0.1/32", "::1/128"])
]
# METRICS_PORT: the port on which run_scheduler and run_worker serve their own
# metrics (0: they do not; --metrics-port overrides it, one port per process on a
# host); METRICS_ADDRESS: the address they listen on (0.0.0.0 to be scraped from
# another host).
METRICS_PORT = env.int("METRICS_PORT", default=0)
METRICS_ADDRESS = env("METRICS_ADDRESS", default="127.0.0.1")
# With DJANGO_SECURE_SSL_REDIRECT on, probes and scrapers still get their answer
# over plain HTTP: a load balancer checks each replica directly, not through TLS,
# and a redirect would mark every replica down.
SECURE_REDIRECT_EXEMPT = [r"^health/", r"^metrics$"]

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
        # python-json-logger: every `extra={...}` field becomes a key of the line's object.
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(message)s",
            "rename_fields": {"levelname": "level", "name": "logger", "exc_info": "exception"},
            "timestamp": "time",  # ISO 8601 in UTC
        },
    },
    "filters": {"redact_feed_tokens": {"()": "config.logging.RedactFeedTokens"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_JSON else "text",
            "filters": ["redact_feed_tokens"],
        },
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        # Every module of ours logs under its package's name; other libraries stay at WARNING.
        app: {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False}
        for app in (*PROJECT_APPS, "config")
    },
}
