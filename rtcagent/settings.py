"""Settings, all from the environment (see ``.env.example``).

With nothing set, rtcagent runs on its embedded default: SQLite under ``var/``, an embedded Valkey
(``rtcagent.embedded``) and a local object folder. ``DATABASE_URL`` / ``REDIS_URL`` switch to
PostgreSQL and Redis; the code paths are the same. ``DJANGO_DEBUG=False`` refuses to start
without a secret key, allowed hosts and ``REDIS_URL``.
"""

from __future__ import annotations

import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
if not env.str("RTC_VAR_DIR", default="") and os.environ.get("PYTEST_VERSION"):
    # A test run (pytest sets PYTEST_VERSION before the settings load) keeps its keys, secret and
    # objects in a folder of its own, removed when it ends: never the checkout's var/. The servers
    # it starts inherit the folder through RTC_VAR_DIR (and remove nothing).
    import atexit
    import shutil
    import tempfile

    _test_var = tempfile.mkdtemp(prefix="rtcagent-test-var-")
    os.environ["RTC_VAR_DIR"] = _test_var
    atexit.register(shutil.rmtree, _test_var, True)
VAR_DIR = Path(env.str("RTC_VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# A static build: `manage.py collectstatic` as the Python buildpack runs it at build time, where
# config vars, the database and Redis may all be missing (Heroku's CNB builds see no config vars).
# It only reads files and writes STATIC_ROOT, so it needs none of the runtime's secrets or
# services: it builds for production (the manifest storage the web process reads) unless
# DJANGO_DEBUG says otherwise, with a throw-away key (no secret written into the build's var/)
# and a Redis URL it never uses (no embedded Valkey started). Every other command, the web and
# worker processes included, passes the guard below only with the real values set.
STATIC_BUILD = sys.argv[1:2] == ["collectstatic"]
DEBUG = env.bool("DJANGO_DEBUG", default=not STATIC_BUILD)
if STATIC_BUILD:
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "static-build.invalid")
    os.environ.setdefault("REDIS_URL", "redis://static-build.invalid:6379/0")


def _dev_secret_key() -> str:
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


if not DEBUG:
    missing = [
        name
        for name in ("DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "REDIS_URL")
        if not env.str(name, default="")
    ]
    if missing:
        raise ImproperlyConfigured(
            "DJANGO_DEBUG is off, so these must be set: " + ", ".join(missing)
        )

SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="") or _dev_secret_key()
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "daphne",
    "admin_interface",
    "colorfield",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "channels",
    "rest_framework",
    "rest_framework_simplejwt",
    "drf_spectacular",
    "apps.accounts",
    "apps.sessions",
    "apps.turns",
    "apps.rtc",
    "apps.memory",
    "apps.storage",
    "apps.attachments",
    "apps.tasks",
    "apps.live",
    "apps.gateway",
    "apps.ops",
]

MIDDLEWARE = [
    "apps.ops.middleware.RequestLatencyMiddleware",  # first: times the whole stack
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # After WhiteNoise, which answers static files itself: the script sandbox's page
    # (static/rtc-agent/sandbox.html) keeps its own policy instead of the pages' one.
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "rtcagent.urls"
ASGI_APPLICATION = "rtcagent.asgi.application"

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

# --- Database -------------------------------------------------------------------------------
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions take the write lock up front, so concurrent writers queue on the
    # busy timeout instead of failing with "database is locked" on lock upgrade.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not ":memory:", so that servers started by the tests share the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
else:
    # Persistent connections: a new PostgreSQL connection per RPC (the old default, 0) cost
    # more than the query itself and kept PostgreSQL at 97 % of a core under load
    # (docs/performance.md). Each thread that touches the ORM keeps one for up to a minute.
    # Not in a test run (pytest sets PYTEST_VERSION): the test process's helper threads would
    # keep theirs open and block the teardown's DROP DATABASE.
    DATABASES["default"]["CONN_MAX_AGE"] = env.int(
        "DATABASE_CONN_MAX_AGE", default=0 if os.environ.get("PYTEST_VERSION") else 60
    )
    # A persistent connection (CONN_MAX_AGE > 0) is checked with SELECT 1 before its first use
    # in each request or RPC: after PostgreSQL restarted, a dead one is replaced instead of
    # failing that request. Without persistent connections there is nothing to check.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # ... checked on its socket first, without a round trip (rtcagent/pgbackend/base.py).
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"]["ENGINE"] = "rtcagent.pgbackend"
    # django/channels#2176: live-server tests would look for test_test_<name> otherwise.
    DATABASES["default"]["TEST"] = {"NAME": "test_" + DATABASES["default"]["NAME"]}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: queue, locks, checkpoints, offsets, channel layer --------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
if not REDIS_URL and os.environ.get("PYTEST_VERSION"):
    # A test run (pytest sets PYTEST_VERSION before it loads the settings) flushes its database
    # before every test: it gets a Valkey of its own, gone with it, never the checkout's.
    from rtcagent.embedded import start_private_valkey

    REDIS_URL = start_private_valkey()
if not REDIS_URL:
    from rtcagent.embedded import ensure_valkey

    REDIS_URL = ensure_valkey(VAR_DIR)
    EMBEDDED_VALKEY = True
else:
    EMBEDDED_VALKEY = False
# Managed Redis over TLS with a self-signed certificate (Heroku Key-Value Store gives such a
# rediss:// URL it may rotate): RTC_REDIS_SSL_CERT_REQS (none, optional, required) is added to
# the URL every client (ours, the cache, the channel layer) is built from.
_REDIS_CERT_REQS = env.str("RTC_REDIS_SSL_CERT_REQS", default="")
if _REDIS_CERT_REQS not in ("", "none", "optional", "required"):
    raise ImproperlyConfigured("RTC_REDIS_SSL_CERT_REQS must be none, optional or required")
if _REDIS_CERT_REQS and REDIS_URL.startswith("rediss://") and "ssl_cert_reqs=" not in REDIS_URL:
    REDIS_URL += ("&" if "?" in REDIS_URL else "?") + f"ssl_cert_reqs={_REDIS_CERT_REQS}"
# Every Redis pool (rtcagent.redis, the cache, the channel layer: one per process or event loop)
# holds at most this many connections and, when all are busy, makes a command wait this many
# seconds for one instead of failing (redis-py's default fails at once at 100).
RTC_REDIS_MAX_CONNECTIONS = env.int("RTC_REDIS_MAX_CONNECTIONS", default=50)
RTC_REDIS_POOL_TIMEOUT = env.float("RTC_REDIS_POOL_TIMEOUT", default=10.0)
_REDIS_POOL = {"max_connections": RTC_REDIS_MAX_CONNECTIONS, "timeout": RTC_REDIS_POOL_TIMEOUT}

CACHES = {  # shared by every process (throttles, rate limits)
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "rtc:cache",
        "OPTIONS": {"pool_class": "redis.BlockingConnectionPool", **_REDIS_POOL},
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "rtcagent.layer.RedisChannelLayer",  # blocking pools, see rtcagent.layer
        "CONFIG": {
            # redis-py 8 defaults to a 5 s socket timeout, the same as channels-redis's blocking
            # BZPOPMIN, so an idle consumer would die with "Timeout reading"; give it room.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "prefix": "rtc:layer:",
            "capacity": 1000,
        },
    }
}

# --- Auth -----------------------------------------------------------------------------------
AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

RTC_JWT_ALGORITHM = env.str("RTC_JWT_ALGORITHM", default="RS256")
if RTC_JWT_ALGORITHM not in ("RS256", "ES256", "EdDSA"):
    raise ImproperlyConfigured("RTC_JWT_ALGORITHM must be RS256, ES256 or EdDSA")
RTC_JWT_KEY_DIR = Path(env.str("RTC_JWT_KEY_DIR", default=str(VAR_DIR / "keys")))
RTC_JWT_PRIVATE_KEY = env.str("RTC_JWT_PRIVATE_KEY", default="")  # PEM; else generated in KEY_DIR
if not DEBUG and not STATIC_BUILD and not (RTC_JWT_PRIVATE_KEY or env.str("RTC_JWT_KEY_DIR",
                                                                           default="")):
    # A key generated per process (per dyno, on its own disk) would refuse every other
    # process's tokens: in production the key is configured, never generated by default.
    raise ImproperlyConfigured(
        "DJANGO_DEBUG is off, so the JWT signing key must be shared by every process: set "
        "RTC_JWT_PRIVATE_KEY (a PEM) or RTC_JWT_KEY_DIR (a folder every process mounts)"
    )
RTC_JWT_ISSUER = env.str("RTC_JWT_ISSUER", default="rtcagent")
RTC_JWT_AUDIENCE = env.str("RTC_JWT_AUDIENCE", default="rtcagent")
# Token exchange (docs/auth.md): issuers whose JWTs /oauth2/token accepts, besides the admin's.
RTC_TRUSTED_ISSUERS = env.json("RTC_TRUSTED_ISSUERS", default=[])
# Upstream login providers of /oauth2/authorize (docs/auth.md), besides those in the admin.
RTC_OAUTH_PROVIDERS = env.json("RTC_OAUTH_PROVIDERS", default=[])
RTC_EXCHANGE_MAX_MINUTES = env.int("RTC_EXCHANGE_MAX_MINUTES", default=15)
RTC_ADMIN_TOKEN_SECONDS = env.int("RTC_ADMIN_TOKEN_SECONDS", default=120)

SIMPLE_JWT = {
    "ACCESS_TOKEN_LIFETIME": timedelta(minutes=env.int("RTC_JWT_ACCESS_MINUTES", default=15)),
    "REFRESH_TOKEN_LIFETIME": timedelta(days=env.int("RTC_JWT_REFRESH_DAYS", default=14)),
    "ALGORITHM": RTC_JWT_ALGORITHM,
    "AUDIENCE": RTC_JWT_AUDIENCE,
    "ISSUER": RTC_JWT_ISSUER,
    "LEEWAY": timedelta(seconds=env.int("RTC_JWT_LEEWAY_SECONDS", default=30)),
    "USER_ID_FIELD": "id",
    "USER_ID_CLAIM": "sub",
    "AUTH_TOKEN_CLASSES": ("apps.accounts.tokens.AccessToken",),
    "TOKEN_OBTAIN_SERIALIZER": "apps.accounts.serializers.TokenObtainPairSerializer",
    "TOKEN_REFRESH_SERIALIZER": "apps.accounts.serializers.TokenRefreshSerializer",
    "UPDATE_LAST_LOGIN": True,
}

# Proxies in front of the web process that append to X-Forwarded-For (Heroku's router: 1). The
# throttles key a client by the address the last of them saw; 0 ignores the header (REMOTE_ADDR),
# since the client writes every entry left of the proxies' own and could pick its identity.
RTC_NUM_PROXIES = env.int("RTC_NUM_PROXIES", default=0)
if RTC_NUM_PROXIES < 0:
    raise ImproperlyConfigured("RTC_NUM_PROXIES must be 0 or more")

# The ASGI server of the web process (``python -m rtcagent.serve``): uvicorn, or Daphne as before.
RTC_WEB_SERVER = env.str("RTC_WEB_SERVER", default="uvicorn").strip().lower()
if RTC_WEB_SERVER not in ("uvicorn", "daphne"):
    raise ImproperlyConfigured("RTC_WEB_SERVER must be uvicorn or daphne")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.authentication.RevocableJWTAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # oauth: /oauth2/token and /oauth2/revoke per named client, else per address
    "DEFAULT_THROTTLE_RATES": {
        "auth": "30/min",
        "oauth": env.str("RTC_OAUTH_RATE", default="600/min"),
    },
    "NUM_PROXIES": RTC_NUM_PROXIES,
    "DEFAULT_PARSER_CLASSES": [
        "rtcagent.parsers.JSONParser",  # orjson + the depth and NUL check: 400, never a 500
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "EXCEPTION_HANDLER": "rtcagent.api_errors.exception_handler",  # JSON errors on every view
}
SPECTACULAR_SETTINGS = {
    "TITLE": "rtcagent HTTP API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

# --- Origins --------------------------------------------------------------------------------
RTC_ALLOWED_ORIGINS = env.list(
    "RTC_ALLOWED_ORIGINS",
    default=["http://localhost:8000", "http://127.0.0.1:8000"],
)
# "*" lets any page embed the widget (the WebSocket check accepts it); CORS and CSRF want it spelled
# their own way.
CORS_ALLOW_ALL_ORIGINS = "*" in RTC_ALLOWED_ORIGINS
CORS_ALLOWED_ORIGINS = [o for o in RTC_ALLOWED_ORIGINS if o != "*"]
CSRF_TRUSTED_ORIGINS = CORS_ALLOWED_ORIGINS
# /s3/ from those pages (docs/storage.md): a presigned PUT/GET with fetch or XHR, or an AWS SDK
# with temporary credentials, which signs x-amz-* headers and reads ETag (multipart uploads need
# it). "*" also admits x-amz-meta-* (requests are never credentialed: no cookies cross origins),
# and a wildcard never covers Authorization, so it stays listed.
CORS_ALLOW_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
CORS_ALLOW_HEADERS = (
    "accept", "authorization", "content-type", "user-agent", "x-csrftoken", "x-requested-with",
    "cache-control", "content-disposition", "content-encoding", "content-md5", "range",
    "if-match", "if-none-match", "if-modified-since", "if-unmodified-since",
    "x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "x-amz-user-agent",
    "amz-sdk-invocation-id", "amz-sdk-request", "x-amz-trailer", "x-amz-decoded-content-length",
    "x-amz-checksum-crc32", "x-amz-checksum-crc32c", "x-amz-checksum-crc64nvme",
    "x-amz-checksum-sha1", "x-amz-checksum-sha256", "x-amz-checksum-algorithm",
    "x-amz-checksum-mode", "x-amz-sdk-checksum-algorithm", "x-amz-copy-source",
    "x-amz-metadata-directive", "x-amz-expected-bucket-owner", "*",
)
CORS_EXPOSE_HEADERS = (
    "ETag", "Content-Length", "Content-Range", "Accept-Ranges", "Last-Modified",
    "x-amz-request-id", "x-amz-id-2", "x-amz-checksum-crc32", "x-amz-checksum-crc32c",
    "x-amz-checksum-sha1", "x-amz-checksum-sha256", "x-amz-bucket-region", "*",
)

# --- Object store ---------------------------------------------------------------------------
AWS_STORAGE_BUCKET_NAME = env.str("AWS_STORAGE_BUCKET_NAME", default="")
if AWS_STORAGE_BUCKET_NAME:
    _default_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": AWS_STORAGE_BUCKET_NAME,
            "endpoint_url": env.str("AWS_S3_ENDPOINT_URL", default=None),
            "region_name": env.str("AWS_S3_REGION_NAME", default="us-east-1"),
            "access_key": env.str("AWS_ACCESS_KEY_ID", default=None),
            "secret_key": env.str("AWS_SECRET_ACCESS_KEY", default=None),
            "file_overwrite": False,
            "default_acl": None,
        },
    }
else:
    _default_storage = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(VAR_DIR / "objects")},
    }
# The project's own object store (apps.storage): the /s3/ endpoint, credentials, presigned URLs and
# attachments all go through it. The same bucket as Django's default storage above; switching from
# the local folder to S3 (MinIO, AWS S3, Aliyun OSS) is only these variables.
RTC_OBJECT_STORE = {
    "BACKEND": "s3" if AWS_STORAGE_BUCKET_NAME else "local",
    "BUCKET": AWS_STORAGE_BUCKET_NAME,
    "ENDPOINT_URL": env.str("AWS_S3_ENDPOINT_URL", default=None),
    "REGION": env.str("AWS_S3_REGION_NAME", default="us-east-1"),
    "ACCESS_KEY_ID": env.str("AWS_ACCESS_KEY_ID", default=None),
    "SECRET_ACCESS_KEY": env.str("AWS_SECRET_ACCESS_KEY", default=None),
    "ADDRESSING_STYLE": env.str("AWS_S3_ADDRESSING_STYLE", default="auto"),
    "ROOT": str(VAR_DIR / "objects"),
}
# What clients see: the bucket name in /s3/<bucket>/..., and the server's public base URL (for the
# endpoint_url of credentials and for presigned URLs; derived from the request when empty).
RTC_S3_BUCKET = env.str("RTC_S3_BUCKET", default="rtc-agent")
RTC_PUBLIC_URL = env.str("RTC_PUBLIC_URL", default="").rstrip("/")
STORAGES = {
    "default": _default_storage,
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = DEBUG  # serve from the app folders without collectstatic in development
WHITENOISE_AUTOREFRESH = DEBUG

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Admin theme ----------------------------------------------------------------------------
X_FRAME_OPTIONS = "SAMEORIGIN"
SILENCED_SYSTEM_CHECKS = ["security.W019"]  # django-admin-interface needs SAMEORIGIN frames

# --- Content-Security-Policy (django-csp) ---------------------------------------------------
# Every page (demo, admin, API) gets one policy. Scripts: our own files (the widget's ES modules
# under STATIC_URL) and inline scripts carrying this response's nonce (templates write
# nonce="{{ request.csp_nonce }}"); never 'unsafe-inline' or 'unsafe-eval'. The widget's script
# tool evaluates model-written code, so it runs in static/rtc-agent/sandbox.html, a sandboxed
# opaque-origin frame with its own policy (frame-src 'self'); a srcdoc frame would inherit
# this one. Styles allow 'unsafe-inline' because django-admin-interface writes its theme as an
# inline <style> built from database values (no nonce hook, no stable hash), and the admin's and
# the widget's markup use style attributes, which nonces cannot cover; CSS runs no script, and
# img-src/font-src/connect-src keep it from sending anything off-site. WebSockets: 'self'
# matches ws:/wss: on the page's own host (CSP Level 3), where the widget of these pages
# connects. frame-ancestors 'self' matches X_FRAME_OPTIONS (the admin's related-object modal);
# RTC_ALLOWED_ORIGINS is about pages that load the widget's script, which framing does not
# involve.
from csp.constants import NONCE, NONE, SELF  # noqa: E402

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, "'unsafe-inline'"],
        "img-src": [SELF, "data:", "blob:"],
        "font-src": [SELF, "data:"],
        "connect-src": [SELF],
        "frame-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [SELF],
    },
}

# --- Production hardening -------------------------------------------------------------------
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- rtcagent knobs (read through rtcagent.conf.rtc_setting) -------------------------------
RTCAGENT = {
    "PING_INTERVAL": env.float("RTC_PING_INTERVAL", default=25.0),
    "PONG_TIMEOUT": env.float("RTC_PONG_TIMEOUT", default=10.0),
    "MAX_FRAME_BYTES": env.int("RTC_MAX_FRAME_BYTES", default=4 * 1024 * 1024),
    "MAX_RESULT_BYTES": env.int("RTC_MAX_RESULT_BYTES", default=2 * 1024 * 1024),
    "MAX_JSON_DEPTH": env.int("RTC_MAX_JSON_DEPTH", default=64),
    "SLOW_CLIENT_BYTES": env.int("RTC_SLOW_CLIENT_BYTES", default=8 * 1024 * 1024),
    "CONNECT_TIMEOUT": env.float("RTC_CONNECT_TIMEOUT", default=10.0),
    "EXPIRED_CLOSE_DELAY": env.float("RTC_EXPIRED_CLOSE_DELAY", default=25.0),
    "REORDER_WAIT": env.float("RTC_REORDER_WAIT", default=1.0),
    "GAP_GRACE": env.float("RTC_GAP_GRACE", default=2.0),
    "TOPIC_RETENTION_HOURS": env.float("RTC_TOPIC_RETENTION_HOURS", default=72.0),
    "DEADLINE_SECONDS": env.float("RTC_DEADLINE_SECONDS", default=300.0),
    "ASK_DEADLINE_SECONDS": env.float("RTC_ASK_DEADLINE_SECONDS", default=1800.0),
    "WORKER_LEASE_MS": env.int("RTC_WORKER_LEASE_MS", default=30_000),
    "WORKER_TURNS": env.int("RTC_WORKER_TURNS", default=4),
    "ORPHAN_AFTER": env.float("RTC_ORPHAN_AFTER", default=10.0),
    "RESULT_WAIT": env.float("RTC_RESULT_WAIT", default=1.0),
    "EARLY_RESULTS": env.bool("RTC_EARLY_RESULTS", default=True),
    "MAX_QUEUED_TURNS_PER_USER": env.int("RTC_MAX_QUEUED_TURNS_PER_USER", default=20),
    "MAX_TURNS_PER_HOUR": env.int("RTC_MAX_TURNS_PER_HOUR", default=600),
    "SHOW_RAW_ERRORS": env.bool("RTC_SHOW_RAW_ERRORS", default=False),
    "S3_CREDENTIAL_TTL": env.int("RTC_S3_CREDENTIAL_TTL", default=12 * 3600),
    "S3_REQUESTS_PER_MINUTE": env.int("RTC_S3_REQUESTS_PER_MINUTE", default=300),
    "S3_USER_QUOTA_BYTES": env.int("RTC_S3_USER_QUOTA_BYTES", default=1024**3),
    "S3_MAX_OBJECT_BYTES": env.int("RTC_S3_MAX_OBJECT_BYTES", default=100 * 1024**2),
    "UNSENT_UPLOAD_TTL_HOURS": env.float("RTC_UNSENT_UPLOAD_TTL_HOURS", default=24.0),
    "ATTACH_MAX_FILES": env.int("RTC_ATTACH_MAX_FILES", default=10),
    "ATTACH_POOL_WORKERS": env.int("RTC_ATTACH_POOL_WORKERS", default=2),
    "ATTACH_JOB_TIMEOUT": env.float("RTC_ATTACH_JOB_TIMEOUT", default=30.0),
}

# --- Model (any OpenAI-compatible endpoint; see apps/turns/llm.py) ------------------------
OPENAI_API_KEY = env.str("OPENAI_API_KEY", default="")
OPENAI_BASE_URL = env.str("OPENAI_BASE_URL", default="")
RTC_MODEL = env.str("RTC_MODEL", default="")
RTC_LLM_TIMEOUT = env.float("RTC_LLM_TIMEOUT", default=60.0)
RTC_LLM_MAX_ATTEMPTS = env.int("RTC_LLM_MAX_ATTEMPTS", default=3)

# --- Metrics (/metrics, docs/operations.md): empty = no /metrics (404) ------------------
RTC_METRICS_TOKEN = env.str("RTC_METRICS_TOKEN", default="")
