from django.db import models


class MembershipRole(models.TextChoices):
    MEMBER = "member", "Member"
    LEAD = "lead", "Lead"


class TokenScope(models.TextChoices):
    """What an API token may do, narrowest first. The identity's own role still bounds every scope."""

    READ = "read", "Read only"
    SUBMIT = "submit", "Submit own work"
    MANAGE = "manage", "Manage everything"


#: Scopes in order of power: a token may only make tokens of its own rank or below.
SCOPE_RANK = {TokenScope.READ: 0, TokenScope.SUBMIT: 1, TokenScope.MANAGE: 2}


class AuditAction(models.TextChoices):
    """The verbs of identity (tokens, service accounts, sign-in, teams and members). Each app declares its own
    verbs in its own choices module and registers them from its AppConfig.ready (core.audit.register_verbs), so a
    new verb never needs a migration."""

    TOKEN_ISSUE = "token.issue", "API token issued"
    TOKEN_REVOKE = "token.revoke", "API token revoked"
    TOKEN_ROTATE = "token.rotate", "API token rotated"
    DEVICE_APPROVE = "token.device_approve", "Command-line sign-in approved"
    DEVICE_DENY = "token.device_deny", "Command-line sign-in denied"
    SERVICE_ACCOUNT_CREATE = "service_account.create", "Service account created"
    SERVICE_ACCOUNT_DISABLE = "service_account.disable", "Service account disabled"
    LOGIN = "login", "Logged in"
    LOGOUT = "logout", "Logged out"
    TEAM_CREATE = "team.create", "Team created"
    TEAM_UPDATE = "team.update", "Team name or description changed"
    MEMBER_ADD = "team.member_add", "Member added to a team"
    MEMBER_ROLE = "team.member_role", "Member's role in a team changed"
    MEMBER_REMOVE = "team.member_remove", "Member removed from a team"


class WebhookAuditAction(models.TextChoices):
    WEBHOOK_CREATE = "webhook.create", "Webhook created"
    WEBHOOK_UPDATE = "webhook.update", "Webhook changed"
    WEBHOOK_DELETE = "webhook.delete", "Webhook deleted"
    WEBHOOK_ROTATE = "webhook.rotate", "Webhook secret rotated"
    WEBHOOK_PING = "webhook.ping", "Webhook pinged"
    WEBHOOK_REDELIVER = "webhook.redeliver", "Webhook delivery resent"


class MembershipSource(models.TextChoices):
    """Who added a membership: a person in the portal (kept until a person removes it) or the single sign-on group
    mapping (re-checked at every SSO sign-in, removed when the person's groups no longer grant it)."""

    LOCAL = "local", "Local"
    SSO = "sso", "SSO group"


class SsoAuditAction(models.TextChoices):
    """Verbs of single sign-on (accounts/sso.py) and its group mapping page (accounts/sso_views.py)."""

    MAPPING_CREATE = "sso.mapping.create", "SSO group mapping added"
    MAPPING_DELETE = "sso.mapping.delete", "SSO group mapping deleted"
    USER_CREATE = "sso.user.create", "Account created by single sign-on"
    USER_LINK = "sso.user.link", "Local account linked to single sign-on"
    LOGIN = "sso.login", "Signed in with single sign-on"
    MEMBERSHIP_GRANT = "sso.membership.grant", "Team membership granted by an SSO group"
    MEMBERSHIP_ROLE = "sso.membership.role", "Team role changed by an SSO group"
    MEMBERSHIP_REVOKE = "sso.membership.revoke", "Team membership removed: no SSO group grants it any more"
    ADMIN_CHANGE = "sso.admin", "Portal admin changed by an SSO group"
