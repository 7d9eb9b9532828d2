"""A tiny OpenID provider for the single sign-on tests: its own Django project (django-oidc-provider), run in its
own process with its own SQLite database by tests/sso/conftest.py. Never imported by the portal."""
