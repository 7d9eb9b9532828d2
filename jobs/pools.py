"""The dedicated node pool (``PORTAL_SERVICE_POOL_LABEL``): which nodes belong to it and whether it is in use.
Kinds whose ``uses_service_pool`` is set go to it when it has nodes; every other kind's work is kept off it."""

from __future__ import annotations

from django.conf import settings

from gpus.models import Node
from vocab import names


def pool_label() -> tuple[str, str] | None:
    key, _, value = str(settings.PORTAL_SERVICE_POOL_LABEL or "").partition("=")
    return (key, value) if key else None


def on_pool(labels: dict | None) -> bool:
    """Whether a node with ``labels`` belongs to the dedicated service pool."""
    pool = pool_label()
    return bool(pool and (labels or {}).get(pool[0]) == pool[1])


def pool_in_use() -> bool:
    """Services go to the pool when the setting names one and some node carries its label."""
    pool = pool_label()
    return bool(pool and Node.objects.present().filter(**{f"labels__{pool[0]}": pool[1]}).exists())


def pool_toleration() -> dict[str, str]:
    """The toleration of the dedicated pool's taint (PORTAL_SERVICE_POOL_TAINT, ``key[=value][:effect]``, the effect
    NoSchedule when left out): what the pods of the kinds that use the pool carry beside their GPU tolerations."""
    taint, _, effect = str(settings.PORTAL_SERVICE_POOL_TAINT).partition(":")
    key, _, value = taint.partition("=")
    return {"key": key, "operator": "Equal", "value": value, "effect": effect or names.NO_SCHEDULE}
