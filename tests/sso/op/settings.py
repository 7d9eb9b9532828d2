"""Settings of the test OpenID provider. Everything it keeps is under OP_DATA_DIR (a pytest tmp dir); its cookies
have their own names because the browser also holds the portal's cookies for the same host name."""

import os
from pathlib import Path

DATA_DIR = Path(os.environ["OP_DATA_DIR"])
SITE_URL = os.environ["OP_SITE_URL"]  # e.g. http://127.0.0.1:PORT; the issuer is SITE_URL + /openid

SECRET_KEY = "test-openid-provider-only-" + os.urandom(16).hex()
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oidc_provider",
    "tests.sso.op",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.sso.op.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(DATA_DIR / "op.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
USE_TZ = True
SESSION_COOKIE_NAME = "op_sessionid"
CSRF_COOKIE_NAME = "op_csrftoken"
LOGIN_URL = "/accounts/login/"

OIDC_USERINFO = "tests.sso.op.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "tests.sso.op.claims.GroupsScopeClaims"
OIDC_SESSION_MANAGEMENT_ENABLE = False
