"""One function writes the audit log, so every state-changing path records the same fields.

Each app owns its audit verbs: it declares them as a ``TextChoices`` in its own choices module and registers
them here from its ``AppConfig.ready`` (``register_verbs``). The log stores the verb's value; recording a verb
nobody registered is a programming error and raises, so a typo never reaches the log.

Each record names the cluster of the fleet its action concerns, by name (this floor imports no clusters): the
caller's ``cluster``, else the object's own ``audit_cluster`` (a model that lives in a cluster defines it: a node, a
job once placed, a node's reconfiguration, the cluster itself), else none.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from .choices import AdminAuditAction
from .middleware import current_request_id
from .models import AuditEvent

_verbs: dict[str, str] = {}


def register_verbs(choices: type[models.TextChoices]) -> None:
    """Make an app's verbs recordable; a value registered twice with another label is refused."""
    for value, label in choices.choices:
        if _verbs.get(value, label) != label:
            raise ValueError(f"Audit verb {value!r} is already registered as {_verbs[value]!r}.")
        _verbs[value] = str(label)


def verb_label(value: str) -> str:
    """What a verb means, for people; an unknown (retired) verb is shown as it was stored."""
    return _verbs.get(value, value)


def registered_verbs() -> dict[str, str]:
    return dict(_verbs)


register_verbs(AdminAuditAction)


def record(
    actor,
    action: str,
    obj: models.Model | None = None,
    *,
    object_type: str | None = None,
    object_id: str | None = None,
    object_repr: str | None = None,
    before: Any = None,
    after: Any = None,
    team=None,
    cluster: str | None = None,
) -> AuditEvent:
    """Append an audit event. ``actor`` is a user or None for the system (reconciler, beat). ``cluster``: the name of
    the cluster the action concerns, when the object does not say it itself (``audit_cluster``)."""
    if action not in _verbs:
        raise ValueError(f"Audit verb {action!r} is not registered; declare it in its app's choices and register it.")
    authenticated = actor is not None and getattr(actor, "is_authenticated", False)
    return AuditEvent.objects.create(
        actor=actor if authenticated else None,
        actor_name=actor.get_username() if authenticated else "system",
        action=action,
        object_type=object_type or (obj._meta.label if obj is not None else ""),
        object_id=str(object_id if object_id is not None else (obj.pk if obj is not None else "")),
        object_repr=(object_repr or (str(obj) if obj is not None else ""))[:200],
        before=before,
        after=after,
        request_id=current_request_id(),
        team=team,
        cluster=cluster if cluster is not None else (getattr(obj, "audit_cluster", "") or ""),
    )


def snapshot(obj: models.Model, fields: list[str]) -> dict[str, Any]:
    """The JSON-safe values of ``fields`` on ``obj``, for before/after."""
    out = {}
    for name in fields:
        value = getattr(obj, name)
        out[name] = value if isinstance(value, str | int | float | bool | type(None) | list | dict) else str(value)
    return out
