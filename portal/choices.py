from django.db import models


class MembershipRole(models.TextChoices):
    MEMBER = "member", "Member"
    LEAD = "lead", "Lead"


class AuditAction(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    DELETE = "delete", "Deleted"
    TOKEN_ISSUE = "token.issue", "API token issued"
    TOKEN_REVOKE = "token.revoke", "API token revoked"
    NODE_GONE = "node.gone", "Node gone from cluster"
    NODE_BACK = "node.back", "Node back in cluster"
    LOGIN = "login", "Logged in"
    LOGOUT = "logout", "Logged out"
