"""Settings shared by every environment.

Every value is read from the environment through the one ``env`` below. PostgreSQL and Redis are
required everywhere, as in production: ``DATABASE_URL`` / ``REDIS_URL``, or the data directory's
own servers (:mod:`config.services`) while they run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from config import services

BASE_DIR = Path(__file__).resolve().parent.parent.parent
env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="insecure-local-only-key-change-me-0123456789abcdef")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "rest_framework",
    "drf_spectacular_sidecar",  # Redoc's files for the dashboard's API reference
    "accounts",
    "catalog",
    "billing",
    "inference",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # GET/HEAD of the dashboard and the management API read from the replica when one is
    # configured (infra/db_router.py; not used at all without one).
    "infra.db_router.ReplicaReadsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # A NUL or invalid Unicode in a query value: 400 naming it, before any view (docs/security.md).
    "infra.querystring.QueryValueMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

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

DATA_DIR = services.data_dir()

# PostgreSQL and Redis, the only database and cache infrai runs on: DATABASE_URL / REDIS_URL,
# else the data directory's own servers while they run (config.services: `make run`,
# `make test` and manage.py start them).
_own = services.own_urls(DATA_DIR)
DATABASE_URL = env("DATABASE_URL", default=_own.get("DATABASE_URL", ""))
REDIS_URL = env("REDIS_URL", default=_own.get("REDIS_URL", ""))
if not DATABASE_URL or not REDIS_URL:
    raise ImproperlyConfigured(
        "No PostgreSQL or Redis: set DATABASE_URL and REDIS_URL"
        + (
            "."
            if services.production()
            else ", or run this under infrai's own servers (`make run`, or "
            "`.venv/bin/python -m config.services run -- COMMAND`)."
        )
    )
DATABASES = {"default": env.db_url_config(DATABASE_URL)}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL (postgres://…)")
DATABASES["default"]["CONN_MAX_AGE"] = 0
# The pool checks a connection before handing it out (one empty round trip): a reset of the
# database's backends then costs the calls in flight at that instant, not one failed request
# per dead pooled connection for minutes after.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
    "min_size": 1,
    "max_size": 16,
    "timeout": 10,
    # A failing connection attempt is retried with backoff (1 s, 2 s, 4 s …) for this long, then
    # given up so the next request starts afresh: after an outage the pool reconnects within
    # about a second instead of sitting out a backoff grown during it (psycopg_pool's default is
    # 300 s).
    "reconnect_timeout": 2,
}
# A connection pooler between infrai and PostgreSQL: "" (none) or "transaction" — PgBouncer (or
# any pooler) in transaction mode, where consecutive transactions of one client connection may
# run on different server connections, so no statement may stay prepared on one: asyncpg's
# statement cache is off (infra/adb.py) and psycopg never prepares server-side. Everything else
# the platform does works in transaction mode (no session state, no LISTEN, advisory locks only
# transaction-level). docs/deploy.md "Behind PgBouncer".
INFRAI_DB_POOLER = env.str("INFRAI_DB_POOLER", default="")
if INFRAI_DB_POOLER not in ("", "transaction"):
    raise ImproperlyConfigured("INFRAI_DB_POOLER must be empty or 'transaction'")
if INFRAI_DB_POOLER == "transaction":
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = None
# Reads from a streaming replica (infra/db_router.py, docs/deploy.md "Reads from a replica"):
# with DATABASE_REPLICA_URL set, GET/HEAD requests of the apps in INFRAI_REPLICA_READ_APPS (the
# dashboard with its CSV exports, the management API) read from it; every write, /v1's money
# path (asyncpg on DATABASE_URL), Celery, webhooks and the admin stay on the primary, and so do
# the reads that say who the caller is and what they may do (sessions, users, memberships,
# admin keys). It is not used while it does not answer or is more than INFRAI_REPLICA_MAX_LAG_S
# behind, measured at most every INFRAI_REPLICA_CHECK_S per process. A client that wrote reads
# the primary for INFRAI_READ_YOUR_WRITES_S (keep it above INFRAI_REPLICA_MAX_LAG_S plus
# INFRAI_REPLICA_CHECK_S).
DATABASE_REPLICA_URL = env("DATABASE_REPLICA_URL", default="")
INFRAI_REPLICA_MAX_LAG_S = env.float("INFRAI_REPLICA_MAX_LAG_S", default=5.0)
INFRAI_REPLICA_CHECK_S = env.float("INFRAI_REPLICA_CHECK_S", default=1.0)
INFRAI_READ_YOUR_WRITES_S = env.float("INFRAI_READ_YOUR_WRITES_S", default=10.0)
INFRAI_REPLICA_READ_APPS = ["dashboard", "management"]
if DATABASE_REPLICA_URL:
    _replica = env.db_url_config(DATABASE_REPLICA_URL)
    if _replica["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_REPLICA_URL must point at PostgreSQL (postgres://…)")
    _replica.update(CONN_MAX_AGE=0, CONN_HEALTH_CHECKS=True)
    # A replica that stops answering costs the read that finds it 2 s at most (then that GET is
    # answered from the primary, and so are the next ones until it answers again).
    _replica.setdefault("OPTIONS", {})["pool"] = {
        **DATABASES["default"]["OPTIONS"]["pool"],
        "timeout": 2,
    }
    _replica["OPTIONS"].update(
        {k: v for k, v in DATABASES["default"]["OPTIONS"].items() if k == "prepare_threshold"}
    )
    # Under pytest-django the replica alias is the test database itself (no second copy).
    _replica["TEST"] = {"MIRROR": "default"}
    DATABASES["replica"] = _replica
DATABASE_ROUTERS = ["infra.db_router.ReplicaRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"

# Prefix of every key infrai keeps in Redis (and of its channel-layer groups).
INFRAI_CACHE_PREFIX = env("INFRAI_CACHE_PREFIX", default="infrai")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": INFRAI_CACHE_PREFIX,
    }
}
# The hot path's Redis (infra.fastcache: API-key cache, rate-limit counters, vendor health, the
# catalog version, live-page watchers, stored Responses' events): REDIS_URL's server unless set.
# A single server (redis://, rediss://, unix://) or a Redis Cluster named by its seed nodes:
# redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS). Django's
# cache, the channel layer and Celery's broker stay on REDIS_URL, one server: they do not speak
# Cluster (docs/deploy.md "Redis Cluster").
INFRAI_HOT_REDIS_URL = env("INFRAI_HOT_REDIS_URL", default="") or REDIS_URL
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": INFRAI_CACHE_PREFIX},
    }
}

CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TIMEZONE = "UTC"

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
STATIC_ROOT = DATA_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").exists() else []

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="infrai <no-reply@infrai.local>")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# --- infrai ---------------------------------------------------------------------------------
# Pepper for API-key hashes (HMAC-SHA256). Rotating it invalidates every key.
INFRAI_KEY_PEPPER = env("INFRAI_KEY_PEPPER", default=SECRET_KEY)
# How long a key lookup is cached (seconds). Revocation deletes the entry at once.
INFRAI_KEY_CACHE_TTL_S = env.int("INFRAI_KEY_CACHE_TTL_S", default=60)
# Largest request body accepted on /v1 (bytes); larger bodies get 413.
INFRAI_MAX_BODY_BYTES = env.int("INFRAI_MAX_BODY_BYTES", default=4 * 1024 * 1024)
INFRAI_MAX_UPLOAD_BYTES = env.int("INFRAI_MAX_UPLOAD_BYTES", default=25 * 1024 * 1024)
# The public base URL printed by `make run` and shown in the dashboard.
INFRAI_PUBLIC_BASE_URL = env("INFRAI_PUBLIC_BASE_URL", default="http://127.0.0.1:8000/v1")
# The platform's own GPU backend (an OpenAI-compatible server).
INFRAI_GPU_BACKEND_URL = env("INFRAI_GPU_BACKEND_URL", default="http://127.0.0.1:8001/v1")
# Base URLs of vendors whose address is the deployment's own (a catalog vendor's
# base_url_setting; empty: the vendor row's base_url): an Azure OpenAI resource
# (https://<resource>.openai.azure.com) and self-hosted vLLM / SGLang servers (…/v1).
AZURE_OPENAI_BASE_URL = env("AZURE_OPENAI_BASE_URL", default="")
INFRAI_VLLM_URL = env("INFRAI_VLLM_URL", default="")
INFRAI_SGLANG_URL = env("INFRAI_SGLANG_URL", default="")
INFRAI_MODEL_CACHE_DIR = Path(env("INFRAI_MODEL_CACHE_DIR", default=str(DATA_DIR / "models")))

STRIPE_SECRET_KEY = env("STRIPE_SECRET_KEY", default="")
STRIPE_WEBHOOK_SECRET = env("STRIPE_WEBHOOK_SECRET", default="")
STRIPE_API_BASE = env("STRIPE_API_BASE", default="")

# --- billing (docs/billing.md) ---
# Bounds of one Checkout top-up and of the auto-recharge amount, in whole USD.
INFRAI_TOPUP_MIN_USD = env.int("INFRAI_TOPUP_MIN_USD", default=5)
INFRAI_TOPUP_MAX_USD = env.int("INFRAI_TOPUP_MAX_USD", default=1000)

# --- the /v1 request path -----------------------------------------------------------------
INFRAI_VENDOR_CONNECT_TIMEOUT_S = env.float("INFRAI_VENDOR_CONNECT_TIMEOUT_S", default=5.0)
# Longest silence accepted from a vendor (before the answer, or between two streamed chunks).
INFRAI_VENDOR_READ_TIMEOUT_S = env.float("INFRAI_VENDOR_READ_TIMEOUT_S", default=120.0)
# Image URLs the gateway fetches for vendors that take only bytes (inference/vendors/fetch.py)
# reach public addresses only; True lets them reach loopback and private ones too.
INFRAI_FETCH_PRIVATE_URLS = env.bool("INFRAI_FETCH_PRIVATE_URLS", default=False)
# The output cap assumed for a chat request without max_tokens to a model whose catalog entry
# states no output limit (the hold then covers this many tokens per choice).
INFRAI_DEFAULT_MAX_TOKENS = env.int("INFRAI_DEFAULT_MAX_TOKENS", default=4096)
# How long a hold lives before the sweeper may release it. The process relaying a call renews
# its hold every third of this, so only holds of dead processes expire.
INFRAI_HOLD_TTL_S = env.int("INFRAI_HOLD_TTL_S", default=900)
# The longest a stream may run; it then ends with an error event, billed for what it delivered
# (plus at most one vendor read timeout of silence before the check).
INFRAI_MAX_STREAM_S = env.float("INFRAI_MAX_STREAM_S", default=1800.0)
# How many days a stored Responses API response (store: true, the default) is kept for
# previous_response_id, GET and input_items; a beat task deletes older ones. Organizations
# that keep no prompts (log_prompts off) store none at all (zero retention).
INFRAI_RESPONSES_RETENTION_DAYS = env.int("INFRAI_RESPONSES_RETENTION_DAYS", default=30)
# The request log at scale (docs/deploy.md "The request log at scale"): it is partitioned by
# month; beat (inference.partitions.maintain) keeps this many months of partitions ahead of the
# current one and drops a month once it is past every organization's retention. An
# organization's calls are kept INFRAI_REQUEST_LOG_RETENTION_DAYS (Organization
# .request_log_retention_days overrides), their prompts (log_prompts) only
# INFRAI_PROMPT_RETENTION_DAYS (Organization.prompt_retention_days); older rows of kept
# partitions are deleted / cleared at most INFRAI_REQUEST_LOG_RETENTION_BATCH rows a statement,
# INFRAI_REQUEST_LOG_RETENTION_BATCHES statements a run. Usage pages read the daily rollups
# (inference_usage_daily_live) unless INFRAI_USAGE_FROM_ROLLUPS is False (then the log, as before);
# beat moves the rollups' queue into them every INFRAI_USAGE_DRAIN_S seconds, at most
# INFRAI_USAGE_DRAIN_BATCH queued rows a statement (inference.rollups).
INFRAI_REQUEST_LOG_RETENTION_DAYS = env.int("INFRAI_REQUEST_LOG_RETENTION_DAYS", default=400)
INFRAI_PROMPT_RETENTION_DAYS = env.int("INFRAI_PROMPT_RETENTION_DAYS", default=30)
INFRAI_REQUEST_LOG_MONTHS_AHEAD = env.int("INFRAI_REQUEST_LOG_MONTHS_AHEAD", default=2)
INFRAI_REQUEST_LOG_RETENTION_BATCH = env.int("INFRAI_REQUEST_LOG_RETENTION_BATCH", default=5000)
INFRAI_REQUEST_LOG_RETENTION_BATCHES = env.int("INFRAI_REQUEST_LOG_RETENTION_BATCHES", default=20)
INFRAI_USAGE_FROM_ROLLUPS = env.bool("INFRAI_USAGE_FROM_ROLLUPS", default=True)
INFRAI_USAGE_DRAIN_S = env.float("INFRAI_USAGE_DRAIN_S", default=5.0)
INFRAI_USAGE_DRAIN_BATCH = env.int("INFRAI_USAGE_DRAIN_BATCH", default=20000)
# On SIGTERM (python -m config.server): how long calls in flight may finish before they are
# ended with an error event and billed for what they delivered.
INFRAI_DRAIN_S = env.float("INFRAI_DRAIN_S", default=20.0)
# Slow clients (config/timeouts.py, docs/security.md): a connection whose request line and
# headers are not complete this many seconds after it opened (or after the first byte of its
# next request) is closed; nginx's client_header_timeout where nginx is in front.
INFRAI_HEADER_TIMEOUT_S = env.float("INFRAI_HEADER_TIMEOUT_S", default=10.0)
# A request body must advance in every window of this many seconds, by at least
# INFRAI_BODY_MIN_RATE_BPS bytes a second on average; else the connection is closed and the app
# sees a disconnect. Responses (streams) are never timed by these.
INFRAI_BODY_TIMEOUT_S = env.float("INFRAI_BODY_TIMEOUT_S", default=30.0)
INFRAI_BODY_MIN_RATE_BPS = env.float("INFRAI_BODY_MIN_RATE_BPS", default=500.0)
# PostgreSQL connections per web process for the /v1 hot path's own statements (hold, log and
# settle: infra/adb.py), beside Django's pool for everything else. A call holds one for about
# a millisecond per statement, so 8 carry a process's ~1,000 calls/s with room to spare; more
# backends than cores only add lock and scheduling contention inside PostgreSQL (16 cost more
# PostgreSQL CPU per call than 4 or 8 in bench/compare.py) and use up max_connections.
INFRAI_ASYNC_DB_POOL_SIZE = env.int("INFRAI_ASYNC_DB_POOL_SIZE", default=8)
# A settlement that cannot reach PostgreSQL is retried on fresh connections for this long; then
# it goes to this process's journal (billing/journal.py), replayed until PostgreSQL takes it,
# and a non-streamed answer is refused with a retryable 503 instead of being given away.
INFRAI_SETTLE_RETRY_S = env.float("INFRAI_SETTLE_RETRY_S", default=2.0)
INFRAI_JOURNAL_DIR = Path(env("INFRAI_JOURNAL_DIR", default=str(DATA_DIR / "journal")))
# How often a stream's hold records what it has delivered (its checkpoint): what a process
# killed mid-stream is still billed for (inference.settlement.renew_due).
INFRAI_CHECKPOINT_S = env.float("INFRAI_CHECKPOINT_S", default=5.0)

# --- catalog and routing ----------------------------------------------------------------------
# How often a process checks the shared catalog version, and rebuilds its snapshot at the latest.
INFRAI_CATALOG_CHECK_S = env.float("INFRAI_CATALOG_CHECK_S", default=1.0)
INFRAI_CATALOG_MAX_AGE_S = env.float("INFRAI_CATALOG_MAX_AGE_S", default=60.0)
# Circuit breaker: consecutive failures that open a vendor's circuit, and the cool-down.
INFRAI_CIRCUIT_FAILURE_THRESHOLD = env.int("INFRAI_CIRCUIT_FAILURE_THRESHOLD", default=5)
INFRAI_CIRCUIT_COOLDOWN_S = env.int("INFRAI_CIRCUIT_COOLDOWN_S", default=30)
# How long a process reuses the vendor health it read (its own failures refresh it at once).
INFRAI_HEALTH_MEMO_S = env.float("INFRAI_HEALTH_MEMO_S", default=0.5)
# Lifetime of the image URLs infrai serves for vendors that only return base64.
INFRAI_IMAGE_URL_TTL_S = env.int("INFRAI_IMAGE_URL_TTL_S", default=3600)
# Where vendor API keys are read: each vendor row names the environment variable that holds its
# key (Vendor.credentials_env, e.g. OPENAI_API_KEY), so the names are catalog data, not settings.
# "SECRETS" in the setting's name makes Django's error pages mask it.
INFRAI_VENDOR_SECRETS: Mapping[str, str] = os.environ

# --- hostile input (docs/security.md) ---
# Longest audio a transcription may hold (seconds); longer is a 400 before anything is held.
INFRAI_MAX_AUDIO_SECONDS = env.int("INFRAI_MAX_AUDIO_SECONDS", default=7200)
# The deployment rules as `manage.py check --deploy` system checks (config/checks.py).
import config.checks  # noqa: E402, F401

# Login throttling (django-axes) on the dashboard's and the admin's login forms: after
# AXES_FAILURE_LIMIT wrong passwords for one user name from one address, that pair is locked
# out (HTTP 429) for AXES_COOLOFF_TIME; a successful login resets the count. Attempts are rows
# in the database (shared by every web process; staff see them in the admin).
INSTALLED_APPS += ["axes"]
MIDDLEWARE += ["axes.middleware.AxesMiddleware"]  # last, as axes requires
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Also locks a user name out after 10 wrong passwords from all addresses together
# (accounts/throttle.py).
AXES_HANDLER = "accounts.throttle.LoginAttemptHandler"
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Both login forms post the e-mail address as "username" (axes would look for USERNAME_FIELD).
AXES_USERNAME_FORM_FIELD = "username"
# uvicorn sets REMOTE_ADDR from X-Forwarded-For only for trusted proxies (FORWARDED_ALLOW_IPS).
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]
AXES_VERBOSE = False
# Two-factor authentication (TOTP, django-otp; accounts/twofactor.py, docs/security.md): a user
# with an authenticator gives a code after the password (dashboard and admin logins alike).
INSTALLED_APPS += ["django_otp", "django_otp.plugins.otp_totp", "django_otp.plugins.otp_static"]
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "django_otp.middleware.OTPMiddleware",
)
# The admin refuses a session of a staff user with an authenticator that never gave a code.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django_otp.middleware.OTPMiddleware") + 1,
    "accounts.twofactor_admin.AdminSecondFactorMiddleware",
)
OTP_TOTP_ISSUER = "infrai"

# --- self-serve customers (docs/billing.md, docs/dashboard.md) ---
# Credit a new organization gets once its owner's e-mail is verified (once per organization and
# per address; 0 turns it off). A ledger entry of kind starter_credit.
INFRAI_STARTER_CREDIT_USD = env.str("INFRAI_STARTER_CREDIT_USD", default="0.50")
# Called with (organization=, owner=) inside organization_create's transaction: opens the wallet.
INFRAI_ORGANIZATION_OPENED_HOOK = "billing.services.starter.organization_opened"
# What GET /v1/openapi.json adds to the inference endpoints' document ({"paths", "components"}):
# a function's dotted path, or an app's YAML file as "package:file" (inference/endpoints/
# openapi.py); a setting so inference imports no app above.
INFRAI_OPENAPI_PARTS = ["management.schema.openapi_part"]
# Static files served by the app itself (WhiteNoise, right after SecurityMiddleware), compressed
# from STATIC_ROOT (`manage.py collectstatic`) and, failing that, from the apps' static folders.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
    "whitenoise.middleware.WhiteNoiseMiddleware",
)
WHITENOISE_USE_FINDERS = True  # also serves files not yet collected (no 404 before collectstatic)
with contextlib.suppress(OSError):  # WhiteNoise warns at every start when STATIC_ROOT is missing
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
INSTALLED_APPS += ["management"]  # the management API (/v1/organization/…, admin keys)

# --- the vector store (docs/vector_store.md) ---
INSTALLED_APPS += ["vectors"]
# Bytes of /v1/files an organization may keep stored (an upload beyond it: 400
# storage_quota_exceeded); 10 GB costs $1 a day at the list price.
INFRAI_FILES_QUOTA_BYTES = env.int("INFRAI_FILES_QUOTA_BYTES", default=10 * 1000**3)
# Engine of new collections: "embedded" (exact numpy search, vectors in this database; no
# server) or "pgvector" (PostgreSQL with the pgvector extension, HNSW).
INFRAI_VECTOR_ENGINE = env("INFRAI_VECTOR_ENGINE", default="embedded")
# The pgvector engine's database URL (empty: the platform's own PostgreSQL).
INFRAI_VECTOR_PG_URL = env("INFRAI_VECTOR_PG_URL", default="")
# pgvector's HNSW search breadth (hnsw.ef_search; at least 2 × top_k): recall vs speed,
# measured in docs/performance.md.
INFRAI_VECTOR_HNSW_EF_SEARCH = env.int("INFRAI_VECTOR_HNSW_EF_SEARCH", default=100)
INFRAI_OPENAPI_PARTS += ["vectors:openapi.yaml"]  # its /v1 operations

# --- the Batch API (docs/api.md "Batches") ---
INSTALLED_APPS += ["batches"]
# Lines one input file of POST /v1/batches may hold (OpenAI's limit).
INFRAI_BATCH_MAX_LINES = env.int("INFRAI_BATCH_MAX_LINES", default=50_000)
# Lines of one batch a worker runs at once.
INFRAI_BATCH_CONCURRENCY = env.int("INFRAI_BATCH_CONCURRENCY", default=4)
INFRAI_OPENAPI_PARTS += ["batches:openapi.yaml"]  # its /v1 operations

# --- operations (docs/deploy.md) ---
# Metrics, traces and call logs (infra/observability). /metrics answers only this Bearer token
# (404 when empty). Multiprocess metrics need PROMETHEUS_MULTIPROC_DIR in the environment of
# every process (prometheus-client reads it at import): scripts/cluster.sh and deploy/systemd.
INSTALLED_APPS += ["infra.observability"]
INFRAI_METRICS_TOKEN = env("INFRAI_METRICS_TOKEN", default="")
# Traces are exported over OTLP/HTTP only when this is set (the exporter reads the other OTEL_*).
OTEL_EXPORTER_OTLP_ENDPOINT = env("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
OTEL_SERVICE_NAME = env("OTEL_SERVICE_NAME", default="infrai")
# One line per call on the "infrai.calls" logger: "text" (make run) or "json" (production).
INFRAI_LOG_FORMAT = env("INFRAI_LOG_FORMAT", default="text")
LOGGING["formatters"] = {
    "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    "json": {"()": "infra.observability.logs.JsonFormatter"},
}
LOGGING["handlers"] = {
    "console": {"class": "logging.StreamHandler", "formatter": INFRAI_LOG_FORMAT}
}
