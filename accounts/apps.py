from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Identity: teams, memberships and roles, service accounts, API tokens, sign-in (local and SSO).

    The label stays ``portal``: these models lived in the ``portal`` package until the re-floor, and the label
    is what names their tables (``portal_team`` …), their migration history and their content types. Keeping it
    moves the code without touching a row of any database already in service.
    """

    name = "accounts"
    label = "portal"
    verbose_name = "Accounts: teams, tokens and sign-in"

    def ready(self):
        from core import audit  # noqa: PLC0415

        from . import schema  # noqa: F401, PLC0415 - schema registers the bearer-token scheme
        from .choices import AuditAction, SsoAuditAction, WebhookAuditAction  # noqa: PLC0415

        audit.register_verbs(AuditAction)
        audit.register_verbs(WebhookAuditAction)
        audit.register_verbs(SsoAuditAction)
