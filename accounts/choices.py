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
    JOB_SUBMIT = "job.submit", "Job submitted"
    JOB_CANCEL = "job.cancel", "Job cancelled"
    JOB_RESUBMIT = "job.resubmit", "Job resubmitted"
    JOB_PREEMPT = "job.preempt", "Job preempted"
    NOTEBOOK_LAUNCH = "notebook.launch", "Notebook launched"
    NOTEBOOK_START = "notebook.start", "Notebook started again"
    NOTEBOOK_EXTEND = "notebook.extend", "Notebook extended"
    NOTEBOOK_WARN = "notebook.warn", "Notebook stop warning sent"
    NOTEBOOK_STOP = "notebook.stop", "Notebook stopped"
    NOTEBOOK_POLICY = "notebook.policy", "Notebook policy set"
    QUOTA_SET = "quota.set", "Quota set"
    QUOTA_DELETE = "quota.delete", "Quota removed"
    AGENT_TOKEN_ISSUE = "agent_token.issue", "Node agent token issued"
    AGENT_TOKEN_REVOKE = "agent_token.revoke", "Node agent token revoked"
    NODE_CONFIG_REQUEST = "node.config.request", "Node reconfiguration requested"
    NODE_CONFIG_REVERT = "node.config.revert", "Node reconfiguration reverted"
    NODE_CONFIG_APPLY = "node.config.apply", "Node configuration written to the cluster"
    NODE_CONFIG_DRAIN = "node.config.drain", "Node drained for reconfiguration"
    NODE_CONFIG_DONE = "node.config.done", "Node reconfiguration finished"
    NODE_CONFIG_FAIL = "node.config.fail", "Node reconfiguration failed"
    LOGIN = "login", "Logged in"
    LOGOUT = "logout", "Logged out"
