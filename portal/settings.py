"""Settings for the GPU portal, all read from the environment (django-environ) in this one place.

The defaults are the embedded demo: SQLite, a file-system Celery broker, the simulated cluster, all
state under ``var/``. Production sets DATABASE_URL, CELERY_BROKER_URL, DJANGO_SECRET_KEY,
DJANGO_ALLOWED_HOSTS and PORTAL_CLUSTER_BACKEND=kubernetes (see docs/operator-guide.md).
"""

import ipaddress
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from vocab.names import GPU_CLIQUE_LABEL, GPU_OPERATOR_NAMESPACE, TIME_SLICING_CONFIG_MAP, ZONE_LABEL

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

#: Where the embedded default keeps its database, broker queue and simulated cluster state.
DATA_DIR = Path(env.str("PORTAL_DATA_DIR", default=str(BASE_DIR / "var")))

DEBUG = env.bool("DJANGO_DEBUG", default=False)
#: The embedded demo is the simulated cluster; any other PORTAL_CLUSTER_BACKEND is a real deployment, whatever
#: else is set (DEBUG included): it needs a real secret key and gets secure cookies and HSTS by default.
PORTAL_DEMO = env.str("PORTAL_CLUSTER_BACKEND", default="simulated") == "simulated"
SECRET_KEY = env.str(
    "DJANGO_SECRET_KEY",
    # Only the embedded demo falls back to this; a real deployment refuses to start without a real key.
    default="insecure-embedded-demo-key-change-me-0123456789abcdef",
)
#: Outside the demo the key must be long and not a placeholder; neither DJANGO_DEBUG nor any other setting
#: lifts this (audit finding 11).
MIN_SECRET_KEY_LENGTH = 32
#: Earlier keys during a rotation, newest first (comma-separated): Django still accepts sessions and signed values
#: made under them, and webhooks and waiting notebook tokens made under them keep their secrets (core.secret_keys).
#: Remove a key once `manage.py webhook_signing_keys --check` passes (docs/operator-guide.md, "Backup and restore").
SECRET_KEY_FALLBACKS = [key.strip() for key in env.list("DJANGO_SECRET_KEY_FALLBACKS", default=[]) if key.strip()]


def _weak(key: str) -> bool:
    return key.startswith("insecure-") or len(key.strip()) < MIN_SECRET_KEY_LENGTH


# A fallback still verifies sessions and signed values, so it must be as strong as the key: every weak one is named.
_weak_keys = (["DJANGO_SECRET_KEY"] if _weak(SECRET_KEY) else []) + [
    f"DJANGO_SECRET_KEY_FALLBACKS item {number}" for number, key in enumerate(SECRET_KEY_FALLBACKS, 1) if _weak(key)
]
if not PORTAL_DEMO and _weak_keys:
    raise ImproperlyConfigured(
        f"Set {' and '.join(_weak_keys)} to a long random value, e.g. from "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'. With a real cluster the portal does not "
        f"start with the demo key, an 'insecure-' placeholder or a key under {MIN_SECRET_KEY_LENGTH} characters "
        "(DJANGO_SECRET_KEY or any of DJANGO_SECRET_KEY_FALLBACKS)."
    )
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "core",
    "accounts",
    "portal",
    "gpus",
    "telemetry",
    "jobs",
    "planner",
]
INSTALLED_APPS.append("axes")  # sign-in lockout (accounts.backends; section "Sign-in and token limits" below)

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.middleware.RequestIdMiddleware",
]
MIDDLEWARE.append("axes.middleware.AxesMiddleware")  # turns a locked-out sign-in into the lockout page

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
                "portal.context_processors.portal",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'portal.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not :memory:, so a real Celery worker process in the integration tests sees the test data.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-portal.sqlite3")}
    # web, worker and beat share the file: wait for locks instead of failing, and use WAL so
    # readers never block the writer.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
elif (pool_max := env.int("DATABASE_POOL_MAX", default=0)) > 0:
    # A pool of connections per process, shared by its threads (psycopg_pool, as Django runs it): a request takes
    # one at its first query and gives it back at its end, and a long-poll gives its back before each pause. The
    # web processes turn it on (gunicorn.conf.py: as many as the process has threads, so no thread ever waits
    # for one); a process keeps the few it uses open, not one per thread that ever served a request, and a pause
    # no longer costs a new connection. Celery's processes keep one persistent connection each (a pool's threads
    # must not cross their fork).
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django's rule with a pool: connections go back to it instead
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, pool_max),
        "max_size": pool_max,
        "max_idle": 60,  # connections beyond min_size close after a minute unused
        "timeout": 30,
    }
    if (prepare := env.int("DATABASE_PREPARE_THRESHOLD", default=5)) > 0:
        # Prepared statements on the pool's connections: one prepares a query the fifth time it runs it (psycopg's
        # default) and from then on sends only its values, so PostgreSQL neither parses nor plans the API's few hot
        # queries again. That needs the values sent apart from the query (server-side binding; Django binds them
        # into the text and prepares nothing). At 200 requests/s PostgreSQL used 0.13 cores instead of 0.32
        # (docs/benchmarks.md, section 0). Only here: the workers' few large statements gained nothing and one
        # (the job reconcile's read of every active job) took 1.3-3.2 s instead of 0.7-0.8 s bound server-side.
        # 0 turns it off, for a pooler in transaction mode that cannot keep prepared statements (PgBouncer before
        # 1.21, or without max_prepared_statements): docs/operator-guide.md.
        DATABASES["default"]["OPTIONS"].update({"server_side_binding": True, "prepare_threshold": prepare})
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = env.str("PORTAL_TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the app directories in the demo so no collectstatic step is needed.
WHITENOISE_USE_FINDERS = True

# --- Transport security: on by default outside the demo (the demo serves plain http://localhost) -------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=not PORTAL_DEMO)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=0 if PORTAL_DEMO else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", default=False)
# Behind a TLS-terminating ingress the request is https only by X-Forwarded-Proto; trust it only when the
# proxy in front sets it (ingress-nginx does), or HSTS and secure redirects never see a secure request.
if env.bool("DJANGO_TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("PORTAL_LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- REST API ------------------------------------------------------------------------------------
#: The largest request body read (bytes; Django's form limit and the API's JSON limit: a bigger API body is a 413
#: that says the limit). Default 2.5 MiB, Django's own default.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("PORTAL_MAX_BODY_BYTES", default=2_621_440)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.APITokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["accounts.permissions.IsAuthenticatedWithTokenScope"],
    "DEFAULT_FILTER_BACKENDS": [
        "core.api.strict_query.StrictQueryParams",
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    # Bounded: a page of at most 1,000 rows, JSON at most 64 levels deep and DATA_UPLOAD_MAX_MEMORY_SIZE long
    # (core/api/bounds.py); a value past a bound is a 400 (413 for the body) that names it.
    "DEFAULT_PAGINATION_CLASS": "core.api.bounds.BoundedLimitOffsetPagination",
    "DEFAULT_PARSER_CLASSES": [
        "core.api.bounds.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_RATES": {},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU portal API",
    "DESCRIPTION": (
        "What the portal's pages do, for scripts, pipelines and the `gpuportal` command line: jobs (batch, "
        "distributed, arrays), notebooks, inference services, team volumes, datasets, secrets and registry "
        "credentials, quotas, the inventory (nodes, GPUs, MIG partitions, resource classes, reconfiguration), the "
        "capacity planner, utilisation and usage, notifications, webhooks, API tokens and service accounts.\n\n"
        "Send `Authorization: Bearer <token>` (a token from the Tokens page or `gpuportal login`); in a browser "
        "your session serves too. Lists are paged (`limit`, `offset`). An error is JSON: `detail`, or one entry "
        "per field saying what to change. Each area below is a tag; this page is /api/docs/, the document "
        "/api/schema/ (YAML, or `?format=json`)."
    ),
    "VERSION": "1.0.0",
    # The areas, in the order Swagger UI lists them; every operation names one (extend_schema(tags=...) on its
    # view; tests/contract/test_schema_docs.py holds each operation to one of these).
    "TAGS": [
        {"name": "jobs", "description": "Batch and distributed jobs and job arrays: submit, follow, cancel, resubmit."},
        {"name": "notebooks", "description": "Jupyter notebooks: launch, extend, stop, start again, collect a token."},
        {"name": "services", "description": "Inference services: deploy, scale, pause, resume, roll back."},
        {"name": "storage", "description": "Team volumes, datasets, team secrets and registry credentials."},
        {"name": "teams", "description": "Quotas, and a team's stream of events."},
        {
            "name": "inventory",
            "description": "Nodes, GPUs, MIG partitions and resource classes; reconfiguring a node; smoke tests.",
        },
        {"name": "planner", "description": "Capacity planning: replay recorded demand against candidate fleets."},
        {"name": "telemetry", "description": "Utilisation, usage (GPU-hours) and the node agents' samples."},
        {"name": "notifications", "description": "Your notifications (the bell)."},
        {"name": "webhooks", "description": "Signed HTTP calls for a team's events, and their deliveries."},
        {"name": "tokens", "description": "Your API tokens, and team service accounts with their tokens."},
        {"name": "auth", "description": "Who you are, and the command line's sign-in approved in a browser."},
    ],
    "SERVE_INCLUDE_SCHEMA": False,
    # With a hundred operations, Swagger UI stays quick when it renders an operation only once it is opened.
    "SWAGGER_UI_SETTINGS": {
        "deepLinking": True,
        "docExpansion": "none",
        "defaultModelsExpandDepth": -1,
        "filter": True,
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Every operation's error answers (400/401/403/404, 413/415 with a body) with their body, Error: the schema is
    # a contract a generated client and the fuzzer (tests/contract) hold the portal to.
    # The contract's bodies are JSON (the API also reads forms, undocumented): one body type per operation, which
    # generators such as openapi-python-client need.
    "PARSER_WHITELIST": ["core.api.bounds.BoundedJSONParser"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.schema_hooks.add_error_responses",
    ],
    # Several models have a "kind" field with different choices; name each enum after its choices.
    "ENUM_NAME_OVERRIDES": {
        "ResourceKindEnum": "gpus.choices.ResourceKind",
        "JobKindEnum": "jobs.choices.JobKind",
        "JobStateEnum": "jobs.choices.JobState",
        "NodeConfigKindEnum": "gpus.choices.NodeConfigKind",
        "NodeConfigStateEnum": "gpus.choices.NodeConfigState",
        "PlanStateEnum": "planner.choices.PlanState",
        "NodeHealthEnum": "gpus.choices.NodeHealth",
        "ClusterHealthEnum": "gpus.choices.ClusterHealth",
        "ClusterConnectionEnum": "gpus.choices.ClusterConnection",
        "TemplateKindEnum": "jobs.choices.TemplateKind",
    },
}

#: Lifetime of a new API token unless the user picks another (days). Tokens always expire, at most
#: PORTAL_TOKEN_MAX_DAYS after creation.
PORTAL_TOKEN_DEFAULT_DAYS = env.int("PORTAL_TOKEN_DEFAULT_DAYS", default=90)
PORTAL_TOKEN_MAX_DAYS = env.int("PORTAL_TOKEN_MAX_DAYS", default=365)

# --- Sign-in and token limits (docs/operator-guide.md, "Sign-in and token limits") -----------------------
#: The lockout backend must stay first: it refuses a locked-out username+address before any other backend runs.
AUTHENTICATION_BACKENDS = ["accounts.backends.LockoutBackend", "django.contrib.auth.backends.ModelBackend"]
#: Wrong passwords for one username from one address before that pair is locked out, and for how long (hours).
AXES_FAILURE_LIMIT = env.int("PORTAL_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = env.float("PORTAL_LOGIN_LOCKOUT_HOURS", default=0.25)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_CALLABLE = "accounts.backends.lockout_response"
AXES_RESET_ON_SUCCESS = True
#: Which proxies in front of the portal are believed about the client's address, the one every throttle and the
#: sign-in lockout count by (core/client_address.py): a number of proxy hops (1: one nginx or ingress that appends
#: the address it received the request from to X-Forwarded-For), or the proxies' networks, comma-separated
#: (10.0.0.0/8,192.0.2.7). 0 (the default): none; the client is REMOTE_ADDR and X-Forwarded-For is ignored.
_trusted_proxies = env.str("PORTAL_TRUSTED_PROXIES", default="0").strip()
if _trusted_proxies.isdigit():
    PORTAL_TRUSTED_PROXIES: int | list[str] = int(_trusted_proxies)
else:
    PORTAL_TRUSTED_PROXIES = [network.strip() for network in _trusted_proxies.split(",") if network.strip()]
    for _network in PORTAL_TRUSTED_PROXIES:
        try:
            ipaddress.ip_network(_network, strict=False)
        except ValueError as _error:
            raise ImproperlyConfigured(
                f"PORTAL_TRUSTED_PROXIES={_trusted_proxies!r}: {_network!r} is not a network. Give the number of proxy "
                "hops in front of the portal (1 behind one nginx or ingress) or the proxies' networks, "
                "comma-separated (10.0.0.0/8,192.0.2.7)."
            ) from _error
AXES_CLIENT_IP_CALLABLE = "core.client_address.client_address"
#: Throttle counts (core.throttles) live here; with several web processes use Redis (redis://…/1).
CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://")}
#: On Redis the cache fails soft (core/cache.py): each operation waits at most PORTAL_CACHE_TIMEOUT_SECONDS to connect
#: and to read, and after a failure the process keeps its counts in its own memory for PORTAL_CACHE_RETRY_SECONDS
#: before it tries Redis again. A Redis that is down or hangs then costs a request one such wait, never an error.
PORTAL_CACHE_TIMEOUT_SECONDS = env.float("PORTAL_CACHE_TIMEOUT_SECONDS", default=0.25)
PORTAL_CACHE_RETRY_SECONDS = env.float("PORTAL_CACHE_RETRY_SECONDS", default=5.0)
# django-environ names django-redis's backend for redis:// when django-redis is installed (it is: requirements.txt),
# Django's own otherwise; either way the portal serves the URL with django-redis, failing soft.
if CACHES["default"]["BACKEND"] in ("django_redis.cache.RedisCache", "django.core.cache.backends.redis.RedisCache"):
    CACHES["default"]["BACKEND"] = "core.cache.FailSoftRedisCache"
    # django-redis's documented OPTIONS, passed on to redis-py's connection pool.
    CACHES["default"].setdefault("OPTIONS", {}).update(
        {"SOCKET_CONNECT_TIMEOUT": PORTAL_CACHE_TIMEOUT_SECONDS, "SOCKET_TIMEOUT": PORTAL_CACHE_TIMEOUT_SECONDS}
    )
#: DRF throttles: wrong tokens per address, tokens issued per user, CLI sign-in codes asked and polls per address.
PORTAL_THROTTLE_RATES = {
    "token-failure": env.str("PORTAL_THROTTLE_TOKEN_FAILURES", default="30/min"),
    "token-create": env.str("PORTAL_THROTTLE_TOKEN_CREATE", default="30/hour"),
    "device-start": env.str("PORTAL_THROTTLE_DEVICE_START", default="10/min"),
    "device-poll": env.str("PORTAL_THROTTLE_DEVICE_POLL", default="30/min"),
}
#: How long a command-line sign-in code waits for approval (seconds), and how often the CLI may poll.
PORTAL_DEVICE_CODE_SECONDS = env.int("PORTAL_DEVICE_CODE_SECONDS", default=600)
PORTAL_DEVICE_POLL_INTERVAL = env.int("PORTAL_DEVICE_POLL_INTERVAL", default=5)

# --- Single sign-on: OpenID Connect (docs/operator-guide.md, "Single sign-on") ----------------------------------
#: Off while OIDC_RP_CLIENT_ID is empty (the demo): the sign-in page shows only the password form.
OIDC_RP_CLIENT_ID = env.str("OIDC_RP_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("OIDC_RP_CLIENT_SECRET", default="")
#: The provider's /.well-known/openid-configuration; any endpoint set below overrides what it says.
OIDC_OP_DISCOVERY_URL = env.str("OIDC_OP_DISCOVERY_URL", default="")
OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("OIDC_OP_AUTHORIZATION_ENDPOINT", default="")
OIDC_OP_TOKEN_ENDPOINT = env.str("OIDC_OP_TOKEN_ENDPOINT", default="")
OIDC_OP_USER_ENDPOINT = env.str("OIDC_OP_USER_ENDPOINT", default="")
OIDC_OP_JWKS_ENDPOINT = env.str("OIDC_OP_JWKS_ENDPOINT", default="")
#: The provider's end-session endpoint: signing out of the portal after an SSO sign-in signs out there too.
OIDC_OP_LOGOUT_URL = env.str("OIDC_OP_LOGOUT_URL", default="")
OIDC_RP_SIGN_ALGO = env.str("OIDC_RP_SIGN_ALGO", default="RS256")
OIDC_RP_SCOPES = env.str("OIDC_RP_SCOPES", default="openid email profile groups")
OIDC_USE_PKCE = env.bool("OIDC_USE_PKCE", default=True)
OIDC_TIMEOUT = env.int("OIDC_TIMEOUT", default=10)
#: Kept in the session only to end the provider's session at sign-out (id_token_hint).
OIDC_STORE_ID_TOKEN = True
#: The claim holding the person's groups, matched against the admins' mapping (the "SSO groups" page).
PORTAL_SSO_GROUPS_CLAIM = env.str("PORTAL_SSO_GROUPS_CLAIM", default="groups")
#: Shown on the sign-in button: "Sign in with <name>".
PORTAL_SSO_PROVIDER_NAME = env.str("PORTAL_SSO_PROVIDER_NAME", default="SSO")
#: Who may still sign in with a portal password while SSO is on: "everyone", or "admins" (break-glass only).
PORTAL_SSO_PASSWORD_SIGN_IN = env.str("PORTAL_SSO_PASSWORD_SIGN_IN", default="everyone")
if PORTAL_SSO_PASSWORD_SIGN_IN not in ("everyone", "admins"):
    raise ImproperlyConfigured(f"PORTAL_SSO_PASSWORD_SIGN_IN={PORTAL_SSO_PASSWORD_SIGN_IN!r}: use everyone or admins")
#: At a person's first SSO sign-in, take over the account made before SSO with the same username and the same
#: (provider-verified) e-mail, instead of making a new one; never an admin's. For moving existing people to SSO.
PORTAL_SSO_LINK_LOCAL_ACCOUNTS = env.bool("PORTAL_SSO_LINK_LOCAL_ACCOUNTS", default=False)
# Appended to whatever backends are set above, password sign-in first: local accounts stay for break-glass admins.
AUTHENTICATION_BACKENDS = [*globals().get("AUTHENTICATION_BACKENDS", ["django.contrib.auth.backends.ModelBackend"])]
if OIDC_RP_CLIENT_ID:
    AUTHENTICATION_BACKENDS.append("accounts.sso.PortalOIDCBackend")

# --- Cluster backend -----------------------------------------------------------------------------
#: "simulated" (embedded demo cluster) or "kubernetes" (official client).
PORTAL_CLUSTER_BACKEND = env.str("PORTAL_CLUSTER_BACKEND", default="simulated")
PORTAL_K8S_IN_CLUSTER = env.bool("PORTAL_K8S_IN_CLUSTER", default=False)
PORTAL_KUBECONFIG = env.str("PORTAL_KUBECONFIG", default="") or None
PORTAL_KUBE_CONTEXT = env.str("PORTAL_KUBE_CONTEXT", default="") or None
#: Keep list-then-watch caches of nodes, pods and the portal's Jobs in each worker (cluster/kubernetes_cache.py), so
#: a reconcile pass reads changes instead of listing the cluster; off: every pass lists.
PORTAL_K8S_WATCH_CACHE = env.bool("PORTAL_K8S_WATCH_CACHE", default=True)
PORTAL_SIM_SCENARIO = env.str("PORTAL_SIM_SCENARIO", default=str(BASE_DIR / "cluster" / "scenarios" / "demo.yaml"))
PORTAL_SIM_STATE = env.str("PORTAL_SIM_STATE", default=str(DATA_DIR / "simcluster.json"))
#: Node label that dedicates a node to one team (value: the team slug); unlabelled nodes are shared.
PORTAL_TEAM_NODE_LABEL = env.str("PORTAL_TEAM_NODE_LABEL", default="gpu-portal.io/team")
#: How often beat reconciles the inventory from the cluster (seconds).
PORTAL_RECONCILE_INTERVAL = env.float("PORTAL_RECONCILE_INTERVAL", default=30.0)

# --- Carving GPUs: MIG layouts and time-slicing ----------------------------------------------------
#: Namespace the GPU Operator runs in; the portal writes its ConfigMaps there.
PORTAL_GPU_OPERATOR_NAMESPACE = env.str("PORTAL_GPU_OPERATOR_NAMESPACE", default=GPU_OPERATOR_NAMESPACE)
#: The mig-parted ConfigMap (key config.yaml) the portal writes; point the ClusterPolicy's
#: migManager.config.name at it.
PORTAL_MIG_CONFIG_MAP = env.str("PORTAL_MIG_CONFIG_MAP", default="gpu-portal-mig-parted-config")
#: The device-plugin ConfigMap the portal adds time-slicing entries to (devicePlugin.config.name).
PORTAL_DEVICE_PLUGIN_CONFIG_MAP = env.str("PORTAL_DEVICE_PLUGIN_CONFIG_MAP", default=TIME_SLICING_CONFIG_MAP)
#: How often beat advances node reconfigurations (seconds).
PORTAL_NODE_CONFIG_INTERVAL = env.float("PORTAL_NODE_CONFIG_INTERVAL", default=10.0)
#: How long running work may finish by itself before preemptible jobs are requeued (seconds).
PORTAL_NODE_CONFIG_DRAIN_GRACE = env.int("PORTAL_NODE_CONFIG_DRAIN_GRACE", default=300)
#: A reconfiguration fails when the node is still not drained this long after it started (seconds).
PORTAL_NODE_CONFIG_DRAIN_TIMEOUT = env.int("PORTAL_NODE_CONFIG_DRAIN_TIMEOUT", default=6 * 3600)
#: A reconfiguration fails when the GPU Operator has not finished this long after the label was set (seconds).
PORTAL_NODE_CONFIG_APPLY_TIMEOUT = env.int("PORTAL_NODE_CONFIG_APPLY_TIMEOUT", default=900)

# --- Jobs and admission ----------------------------------------------------------------------------
#: How often beat runs a job cycle (reconcile jobs with the cluster, admit, place, launch), in seconds.
#: A submission also triggers one at once.
PORTAL_JOB_CYCLE_INTERVAL = env.float("PORTAL_JOB_CYCLE_INTERVAL", default=10.0)
#: Half-life of the decayed usage that orders teams for fair share (seconds).
PORTAL_FAIR_SHARE_HALF_LIFE = env.float("PORTAL_FAIR_SHARE_HALF_LIFE", default=3600.0)
#: Fair share among a team's members (jobs.scheduling.members): a team's queued work goes member by member, the one
#: who used least for their weight first. Off: a team's jobs go oldest first.
PORTAL_MEMBER_FAIR_SHARE = env.bool("PORTAL_MEMBER_FAIR_SHARE", default=True)
#: A job that has waited this long for capacity (and could fit on an empty node) stops smaller jobs of its
#: class from passing it, so the GPUs freed by finishing jobs collect for it (seconds).
PORTAL_BACKFILL_PATIENCE = env.float("PORTAL_BACKFILL_PATIENCE", default=900.0)
#: Start-time estimates (jobs.cycle.estimates): the job cycle begins a replay of the queue forward at most this often
#: (seconds; each cycle then advances it for a share of its own time), up to this far ahead (seconds; later is "not
#: within the next N hours") in at most this many steps, with
#: running work's remaining time at these quantiles of what similar finished work ran (the range's two ends),
#: learned from the work finished in the last PORTAL_ESTIMATE_LEARN_DAYS days. 0 for the interval: no estimates.
PORTAL_ESTIMATE_EVERY = env.float("PORTAL_ESTIMATE_EVERY", default=60.0)
PORTAL_ESTIMATE_HORIZON = env.float("PORTAL_ESTIMATE_HORIZON", default=6 * 3600.0)
PORTAL_ESTIMATE_MAX_STEPS = env.int("PORTAL_ESTIMATE_MAX_STEPS", default=200)
PORTAL_ESTIMATE_QUANTILES = tuple(env.list("PORTAL_ESTIMATE_QUANTILES", cast=float, default=[0.1, 0.9]))
PORTAL_ESTIMATE_LEARN_DAYS = env.int("PORTAL_ESTIMATE_LEARN_DAYS", default=30)
#: Node labels a distributed job may ask its workers to share one value of (zone, rack, NVLink domain). Only
#: these keys are offered and accepted; an operator adds their own rack label here.
PORTAL_TOPOLOGY_KEYS = env.list("PORTAL_TOPOLOGY_KEYS", default=[ZONE_LABEL, GPU_CLIQUE_LABEL])
#: Most workers (ranks) one distributed job may ask for.
PORTAL_MAX_WORKERS = env.int("PORTAL_MAX_WORKERS", default=64)
#: Notice a preemptible job on borrowed capacity gets before it is stopped and requeued (seconds).
PORTAL_PREEMPTION_GRACE = env.int("PORTAL_PREEMPTION_GRACE", default=60)
#: The longest grace a job may declare for its checkpoint (``checkpoint.grace_seconds``, at least 30): how long a
#: preempted job that checkpoints keeps its GPUs after its signal (docs/operator-guide.md, "Preemption").
PORTAL_CHECKPOINT_GRACE_MAX = env.int("PORTAL_CHECKPOINT_GRACE_MAX", default=3600)
#: The longest minimum runtime a team's leads may set (a job younger than it is never preempted).
PORTAL_MIN_RUNTIME_MAX = env.int("PORTAL_MIN_RUNTIME_MAX", default=24 * 3600)
#: runtimeClassName put on workloads ("nvidia" where the GPU Operator installed it as non-default); empty: none.
PORTAL_RUNTIME_CLASS = env.str("PORTAL_RUNTIME_CLASS", default="")
#: The node smoke test (gpus.smoketest): NVIDIA's CUDA sample image (vectorAdd), the namespace its pod runs in (the
#: portal's own), and how long it may take, scheduling and image pull included, before it counts as failed.
PORTAL_SMOKE_TEST_IMAGE = env.str(
    "PORTAL_SMOKE_TEST_IMAGE", default="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
)
PORTAL_SMOKE_TEST_NAMESPACE = env.str("PORTAL_SMOKE_TEST_NAMESPACE", default="gpu-portal")
PORTAL_SMOKE_TEST_TIMEOUT = env.int("PORTAL_SMOKE_TEST_TIMEOUT", default=600)
#: Submission defaults and bounds.
PORTAL_JOB_MAX_RUNTIME_SECONDS = env.int("PORTAL_JOB_MAX_RUNTIME_SECONDS", default=7 * 24 * 3600)
#: Most tasks one job array may have (docs/user-guide.md, "Job arrays"); each task is a job of its own.
PORTAL_JOB_ARRAY_MAX_SIZE = env.int("PORTAL_JOB_ARRAY_MAX_SIZE", default=100)
#: The highest priority a team member (not a lead) may give a job, at submission and when changing it:
#: low, normal or high. Leads and admins may use every priority. Default high: every member may use all three.
PORTAL_MEMBER_MAX_PRIORITY = env.str("PORTAL_MEMBER_MAX_PRIORITY", default="high")

# --- Inference services (docs/operator-guide.md, "Inference services") ------------------------------------------
#: The dedicated node pool services may ask for: the label (key=value) its nodes carry and the taint
#: (key=value:Effect) that keeps batch work off them. A service on the pool gets the label as a node selector and
#: a toleration of the taint (jobs/service/render.py).
PORTAL_SERVICE_POOL_LABEL = env.str("PORTAL_SERVICE_POOL_LABEL", default="gpu-portal.io/pool=inference")
PORTAL_SERVICE_POOL_TAINT = env.str("PORTAL_SERVICE_POOL_TAINT", default="gpu-portal.io/pool=inference:NoSchedule")
#: How long a service's autoscaler must want fewer replicas than the portal granted before the grants above what
#: it wants are given back (jobs.service.follow; the HPA's own scale-down window is 300 s).
PORTAL_SERVICE_SCALE_DOWN_SECONDS = env.int("PORTAL_SERVICE_SCALE_DOWN_SECONDS", default=300)
#: A service's external URL: {name} (the service's name), {team} (its team's slug) and {namespace} filled in, e.g.
#: "https://{name}-{team}.apps.example.com". Empty: services show only their in-cluster DNS name.
PORTAL_SERVICE_URL_TEMPLATE = env.str("PORTAL_SERVICE_URL_TEMPLATE", default="")
#: The IngressClass (e.g. "nginx") of the Ingress the cycle makes per service for the URL's host and path, routing
#: to the service's Service; deleted when the service stops. Empty, or no URL template: no Ingress is made (route
#: the URLs yourself). jobs/checks.py checks both at start-up.
PORTAL_SERVICE_INGRESS_CLASS = env.str("PORTAL_SERVICE_INGRESS_CLASS", default="")

# --- Volumes (docs/operator-guide.md, "Volumes, /dev/shm and scratch") ---------------------------------------
#: Every workload's memory-backed /dev/shm, as a fraction of its memory request (pages there count against the
#: container's memory limit). A job may ask for its own size from 64 MiB up to PORTAL_SHM_MAX_FRACTION of memory.
PORTAL_SHM_FRACTION = env.float("PORTAL_SHM_FRACTION", default=0.25)
PORTAL_SHM_MAX_FRACTION = env.float("PORTAL_SHM_MAX_FRACTION", default=0.5)
#: Size limit of every workload's scratch emptyDir at /scratch (node disk; the kubelet evicts a pod that exceeds it).
PORTAL_SCRATCH_GIB = env.int("PORTAL_SCRATCH_GIB", default=100)
#: How often the team volumes are reconciled from the cluster (seconds).
PORTAL_VOLUME_RECONCILE_INTERVAL = env.float("PORTAL_VOLUME_RECONCILE_INTERVAL", default=60.0)

# --- Mail (notebook stop warnings) ---------------------------------------------------------------
#: Django's mail backend: the console in the embedded demo; set the SMTP backend and EMAIL_HOST in production.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
#: The portal's own address, for links in e-mails and the API document's server.
PORTAL_BASE_URL = env.str("PORTAL_BASE_URL", default="http://127.0.0.1:8000")
SPECTACULAR_SETTINGS["SERVERS"] = [{"url": PORTAL_BASE_URL.rstrip("/"), "description": "This portal"}]
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="gpu-portal@localhost")

# --- Notebooks (docs/operator-guide.md, "Notebooks") ----------------------------------------------
#: Images offered on the launch form (the first is the default); any other image may still be typed in.
#: Kept logs: the portal keeps the last PORTAL_LOG_MAX_BYTES of each container's log when it ends (what came
#: before is cut, and the page says how much), for PORTAL_LOG_RETENTION_DAYS days (jobs.tasks.expire_logs).
PORTAL_LOG_MAX_BYTES = env.int("PORTAL_LOG_MAX_BYTES", default=2 * 1024 * 1024)
PORTAL_LOG_RETENTION_DAYS = env.int("PORTAL_LOG_RETENTION_DAYS", default=30)
#: How long one live-log stream stays open before the client reconnects (a worker is held that long at most).
PORTAL_LOG_FOLLOW_SECONDS = env.int("PORTAL_LOG_FOLLOW_SECONDS", default=30)
#: Waiting without polling (jobs.eventstream): how often a waiting request reads the database again, the longest
#: long-poll a client may ask for, how long one event stream lasts before the client reconnects, and how often a
#: quiet stream sends a keep-alive comment (seconds). Each waiting request holds a web worker thread that long.
PORTAL_WAIT_POLL_SECONDS = env.float("PORTAL_WAIT_POLL_SECONDS", default=1.0)
PORTAL_WAIT_MAX_SECONDS = env.int("PORTAL_WAIT_MAX_SECONDS", default=60)
PORTAL_EVENT_STREAM_SECONDS = env.float("PORTAL_EVENT_STREAM_SECONDS", default=55.0)
PORTAL_EVENT_HEARTBEAT_SECONDS = env.float("PORTAL_EVENT_HEARTBEAT_SECONDS", default=15.0)
#: Event streams and long-polls one user may hold open at once (jobs.api.stream_cap); the next is answered 429.
#: Counted in the cache (CACHE_URL: shared on Redis, per process on the embedded default). 0: no cap.
PORTAL_STREAMS_PER_IDENTITY = env.int("PORTAL_STREAMS_PER_IDENTITY", default=20)
#: How often live pages (job list, job, notebook, team) refresh their changing parts, in seconds.
PORTAL_LIVE_POLL_SECONDS = env.int("PORTAL_LIVE_POLL_SECONDS", default=3)

PORTAL_NOTEBOOK_IMAGES = env.list(
    "PORTAL_NOTEBOOK_IMAGES",
    default=["quay.io/jupyter/pytorch-notebook:cuda12-2024-09-30", "quay.io/jupyter/tensorflow-notebook:cuda-latest"],
)
#: The images of the other workspace kinds (jobs.notebook.workspaces), pinned by tag: VS Code in the browser and
#: RStudio Server. Only offered with PORTAL_NOTEBOOK_ACCESS = "portal".
PORTAL_CODE_SERVER_IMAGE = env.str("PORTAL_CODE_SERVER_IMAGE", default="codercom/code-server:4.96.4")
PORTAL_RSTUDIO_IMAGE = env.str("PORTAL_RSTUDIO_IMAGE", default="rocker/rstudio:4.4.2")
#: Where a notebook is reached: {name} is its Service's name (nb-<id>-<name>), {namespace} its team's namespace,
#: {cluster} the cluster its sessions run on (for a fleet, where each cluster's ingress serves its own notebooks).
PORTAL_NOTEBOOK_URL_TEMPLATE = env.str(
    "PORTAL_NOTEBOOK_URL_TEMPLATE", default="https://{name}.{namespace}.notebooks.example.org/"
)
#: How a notebook's Jupyter server is signed into (docs/operator-guide.md, "Workspace sign-in"). "token": Jupyter asks
#: for a password, the token the portal shows its owner once. "portal": Jupyter runs without one and the ingress in
#: front of the notebooks asks the portal (/auth/workspace/) about every request; the owner opens it in one click.
#: Only "portal" when that ingress is set up: without it the notebook would be open to anyone who reaches it.
PORTAL_NOTEBOOK_ACCESS = env.str("PORTAL_NOTEBOOK_ACCESS", default="token")
#: "portal" access: how long the one-time ticket of an Open click may take to reach the notebook (seconds), and how
#: long the notebook's own cookie lasts (seconds; it also ends when the session it was issued for stops).
PORTAL_WORKSPACE_TICKET_SECONDS = env.int("PORTAL_WORKSPACE_TICKET_SECONDS", default=30)
PORTAL_WORKSPACE_COOKIE_SECONDS = env.int("PORTAL_WORKSPACE_COOKIE_SECONDS", default=8 * 3600)
#: Team policy defaults (an admin may set a NotebookPolicy per team): maximum age given at start, how far
#: "Extend" may push it, and the idle timeout (default and maximum), all in seconds.
PORTAL_NOTEBOOK_TTL_SECONDS = env.int("PORTAL_NOTEBOOK_TTL_SECONDS", default=8 * 3600)
PORTAL_NOTEBOOK_MAX_TTL_SECONDS = env.int("PORTAL_NOTEBOOK_MAX_TTL_SECONDS", default=24 * 3600)
PORTAL_NOTEBOOK_IDLE_TIMEOUT_SECONDS = env.int("PORTAL_NOTEBOOK_IDLE_TIMEOUT_SECONDS", default=3600)
PORTAL_NOTEBOOK_MAX_IDLE_TIMEOUT_SECONDS = env.int("PORTAL_NOTEBOOK_MAX_IDLE_TIMEOUT_SECONDS", default=4 * 3600)
#: How long before a stop (either limit) the owner is warned, and how much one "Extend" adds (seconds).
PORTAL_NOTEBOOK_WARNING_SECONDS = env.int("PORTAL_NOTEBOOK_WARNING_SECONDS", default=15 * 60)
PORTAL_NOTEBOOK_EXTEND_SECONDS = env.int("PORTAL_NOTEBOOK_EXTEND_SECONDS", default=2 * 3600)
#: How often beat runs the culler (seconds); a notebook outlives its maximum age by at most this.
PORTAL_NOTEBOOK_CULL_INTERVAL = env.float("PORTAL_NOTEBOOK_CULL_INTERVAL", default=60.0)
#: Home volume: size offered by default (GiB) and StorageClass (empty: the cluster's default class).
PORTAL_NOTEBOOK_VOLUME_GIB = env.int("PORTAL_NOTEBOOK_VOLUME_GIB", default=20)
PORTAL_NOTEBOOK_STORAGE_CLASS = env.str("PORTAL_NOTEBOOK_STORAGE_CLASS", default="")
#: User id the server runs as (the Jupyter Docker Stacks' jovyan is 1000).
PORTAL_NOTEBOOK_UID = env.int("PORTAL_NOTEBOOK_UID", default=1000)

# Team webhooks (core.webhooks; docs/user-guide.md, "Webhooks").
#: Attempts per delivery, and the backoff: base × 2^(attempt-1) seconds between them, capped at the maximum.
PORTAL_WEBHOOK_MAX_ATTEMPTS = env.int("PORTAL_WEBHOOK_MAX_ATTEMPTS", default=8)
PORTAL_WEBHOOK_RETRY_BASE_SECONDS = env.float("PORTAL_WEBHOOK_RETRY_BASE_SECONDS", default=10.0)
PORTAL_WEBHOOK_RETRY_MAX_SECONDS = env.float("PORTAL_WEBHOOK_RETRY_MAX_SECONDS", default=3600.0)
#: How long one POST may take to connect, and then to wait for the receiver's answer (seconds).
PORTAL_WEBHOOK_CONNECT_TIMEOUT_SECONDS = env.float("PORTAL_WEBHOOK_CONNECT_TIMEOUT_SECONDS", default=3.0)
PORTAL_WEBHOOK_TIMEOUT_SECONDS = env.float("PORTAL_WEBHOOK_TIMEOUT_SECONDS", default=10.0)
#: How long one delivery task goes on sending to one webhook (seconds): it starts no attempt after this, and
#: queues itself again behind the other webhooks' tasks.
PORTAL_WEBHOOK_PASS_SECONDS = env.float("PORTAL_WEBHOOK_PASS_SECONDS", default=30.0)
#: How long one sender holds a webhook (longer than a task may run).
PORTAL_WEBHOOK_LEASE_SECONDS = env.int("PORTAL_WEBHOOK_LEASE_SECONDS", default=240)
#: Webhook receivers must be at public addresses (core.egress): these networks are allowed besides (CIDRs,
#: comma-separated, e.g. "10.20.0.0/16,fd00:1::/64"), plain http included. Every other private, loopback,
#: link-local, shared (100.64/10) or reserved address stays refused, checked when a URL is saved and before each POST.
PORTAL_WEBHOOK_ALLOW_NETWORKS = [
    str(ipaddress.ip_network(network, strict=False))
    for network in env.list("PORTAL_WEBHOOK_ALLOW_NETWORKS", default=[])
]
#: Allow every address, and plain http to those that are not public: for development and tests only.
PORTAL_WEBHOOK_ALLOW_LOCAL = env.bool("PORTAL_WEBHOOK_ALLOW_LOCAL", default=False)
#: The most webhooks one team may have, and the most deliveries one webhook may have waiting (pending or retrying):
#: an event past that is not queued but recorded in the webhook's delivery log as not sent, with the reason.
PORTAL_WEBHOOK_MAX_PER_TEAM = env.int("PORTAL_WEBHOOK_MAX_PER_TEAM", default=20)
PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES = env.int("PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES", default=100)
#: Finished deliveries are kept this many days in the delivery log (the beat sweep deletes older ones).
PORTAL_WEBHOOK_LOG_DAYS = env.int("PORTAL_WEBHOOK_LOG_DAYS", default=30)

# --- Celery --------------------------------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _queue_dir = DATA_DIR / "broker"
    # kombu warns "No hostname was supplied" for every connection to the file-system transport, which has none.
    LOGGING["loggers"]["kombu.connection"] = {"level": "ERROR"}
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir / "queue"),
        "data_folder_out": str(_queue_dir / "queue"),
        "processed_folder": str(_queue_dir / "processed"),
        "control_folder": str(_queue_dir / "control"),
        "store_processed": False,
    }
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_SOFT_TIME_LIMIT = 120
CELERY_TASK_TIME_LIMIT = 180
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Queues by the work they carry (docs/operator-guide.md, "Processes"). The control loop (the job cycle and what it
# reads and acts on) has a queue and a worker of its own, so nothing else can make a cycle wait: not team webhooks
# (receivers the portal does not control) and not the background work (planner runs, log expiry, telemetry
# rollups). A task routed nowhere goes to the background queue, never to the control loop's.
PORTAL_CONTROL_QUEUE = "control"
PORTAL_BACKGROUND_QUEUE = "background"
#: The queue webhook deliveries go to (its own worker: `-Q webhooks`).
PORTAL_WEBHOOK_QUEUE = env.str("PORTAL_WEBHOOK_QUEUE", default="") or "webhooks"
CELERY_TASK_DEFAULT_QUEUE = PORTAL_BACKGROUND_QUEUE
CELERY_TASK_ROUTES = {
    **{
        name: {"queue": PORTAL_CONTROL_QUEUE}
        for name in (
            "jobs.tasks.run_cycle",
            "jobs.tasks.cycle_cluster",
            "jobs.tasks.reconcile_volumes",
            "jobs.tasks.sync_presence",
            "jobs.tasks.cull_notebooks",
            "jobs.tasks.detect_idle",
            "gpus.tasks.reconcile_inventory",
            "gpus.tasks.advance_node_config_operations",
            "telemetry.tasks.scrape_dcgm",
        )
    },
    # core.tasks, under the names they had in accounts.tasks.
    "accounts.tasks.deliver_webhook": {"queue": PORTAL_WEBHOOK_QUEUE},
    "accounts.tasks.sweep_webhooks": {"queue": PORTAL_WEBHOOK_QUEUE},
}
# Utilisation telemetry (gpus.telemetry; docs/operator-guide.md, "Utilisation").
#: Raw samples are kept this many days; 5-minute and hourly rollups PORTAL_TELEMETRY_ROLLUP_DAYS.
PORTAL_TELEMETRY_RAW_DAYS = env.int("PORTAL_TELEMETRY_RAW_DAYS", default=7)
PORTAL_TELEMETRY_ROLLUP_DAYS = env.int("PORTAL_TELEMETRY_ROLLUP_DAYS", default=365)
#: A period is rolled up once it ended this many seconds ago (late samples still count).
PORTAL_TELEMETRY_ROLLUP_LAG = env.int("PORTAL_TELEMETRY_ROLLUP_LAG", default=120)
#: An agent's clock may differ from the portal's by this much (seconds) before its batches are refused.
PORTAL_TELEMETRY_MAX_SKEW = env.int("PORTAL_TELEMETRY_MAX_SKEW", default=300)
#: Samples older than this (seconds) are refused: an agent's buffer never legitimately holds them.
PORTAL_TELEMETRY_MAX_AGE = env.int("PORTAL_TELEMETRY_MAX_AGE", default=24 * 3600)
PORTAL_TELEMETRY_MAX_BATCH = env.int("PORTAL_TELEMETRY_MAX_BATCH", default=2000)
#: dcgm-exporter scraping: how often, and where the exporter pods are (or explicit URLs, comma-separated).
PORTAL_DCGM_SCRAPE_INTERVAL = env.float("PORTAL_DCGM_SCRAPE_INTERVAL", default=30.0)
PORTAL_DCGM_NAMESPACE = env.str("PORTAL_DCGM_NAMESPACE", default=GPU_OPERATOR_NAMESPACE)
PORTAL_DCGM_SELECTOR = env.str("PORTAL_DCGM_SELECTOR", default="app=nvidia-dcgm-exporter")
PORTAL_DCGM_PORT = env.int("PORTAL_DCGM_PORT", default=9400)
PORTAL_DCGM_URLS = env.list("PORTAL_DCGM_URLS", default=[])
#: "Allocated but idle": a running job whose GPUs all stayed under the threshold (%) for the window (seconds).
PORTAL_IDLE_THRESHOLD_PCT = env.float("PORTAL_IDLE_THRESHOLD_PCT", default=10.0)
PORTAL_IDLE_WINDOW_SECONDS = env.int("PORTAL_IDLE_WINDOW_SECONDS", default=30 * 60)
#: Grams of CO2-equivalent per kWh of the electricity the GPUs draw, for the usage reports' emissions column
#: (jobs.usage); unset: no emissions are shown.
PORTAL_CARBON_G_PER_KWH = env.float("PORTAL_CARBON_G_PER_KWH", default=None)

CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "reconcile-inventory": {
        "task": "gpus.tasks.reconcile_inventory",
        "schedule": PORTAL_RECONCILE_INTERVAL,
        "options": {"expires": PORTAL_RECONCILE_INTERVAL},
    },
    "node-config": {
        "task": "gpus.tasks.advance_node_config_operations",
        "schedule": PORTAL_NODE_CONFIG_INTERVAL,
        "options": {"expires": PORTAL_NODE_CONFIG_INTERVAL},
    },
    "job-cycle": {
        "task": "jobs.tasks.run_cycle",
        "schedule": PORTAL_JOB_CYCLE_INTERVAL,
        "options": {"expires": PORTAL_JOB_CYCLE_INTERVAL},
    },
    "scrape-dcgm": {
        "task": "telemetry.tasks.scrape_dcgm",
        "schedule": PORTAL_DCGM_SCRAPE_INTERVAL,
        "options": {"expires": PORTAL_DCGM_SCRAPE_INTERVAL},
    },
    "reconcile-volumes": {
        "task": "jobs.tasks.reconcile_volumes",
        "schedule": PORTAL_VOLUME_RECONCILE_INTERVAL,
        "options": {"expires": PORTAL_VOLUME_RECONCILE_INTERVAL},
    },
    "cull-notebooks": {
        "task": "jobs.tasks.cull_notebooks",
        "schedule": PORTAL_NOTEBOOK_CULL_INTERVAL,
        "options": {"expires": PORTAL_NOTEBOOK_CULL_INTERVAL},
    },
    "telemetry-maintenance": {
        "task": "telemetry.tasks.maintain_telemetry",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    "detect-idle": {
        "task": "jobs.tasks.detect_idle",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    "sweep-webhooks": {
        # core.tasks.sweep_webhooks, under the name it had in accounts.tasks (queued messages still find it)
        "task": "accounts.tasks.sweep_webhooks",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    "expire-logs": {
        "task": "jobs.tasks.expire_logs",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
    "planner-stale-runs": {
        "task": "planner.tasks.fail_stale_runs",
        "schedule": 300.0,
        "options": {"expires": 300.0},
    },
}

# Prometheus metrics (portal.metrics; docs/operator-guide.md, "Metrics and alerts").
#: A bearer token Prometheus sends to /metrics (and to the worker's metrics port); empty: token access is off.
PORTAL_METRICS_TOKEN = env.str("PORTAL_METRICS_TOKEN", default="")
#: Whether a request from the loopback address without a proxy header may read /metrics without the token.
PORTAL_METRICS_ALLOW_LOCAL = env.bool("PORTAL_METRICS_ALLOW_LOCAL", default=True)
#: Port on which a Celery worker serves its own metrics (0: none). Its cycle, reconcile and task-failure
#: metrics are only visible there when the worker does not share PROMETHEUS_MULTIPROC_DIR with the web process.
PORTAL_WORKER_METRICS_PORT = env.int("PORTAL_WORKER_METRICS_PORT", default=0)
