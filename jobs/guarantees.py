"""Quota guarantees against what the cluster can hold (issue 18).

A guarantee promises a team units of a class it can always get. The promises of all teams together can only be
kept while their sum fits the class's schedulable capacity (ResourceClass.allocatable: healthy devices on Ready,
uncordoned nodes that can run work). These helpers say per class how much is guaranteed against that capacity,
whether a change would promise more than it (the quota forms and the quotas API then ask for an explicit
confirmation), and how much of a team's unused guarantee can really start now (the team page never promises
more than that).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Sum

from gpus.models import ResourceClass
from jobs.models import Quota
from jobs.usage import held_units

#: The page form's checkbox and the API's body field that accept an over-subscribed guarantee.
CONFIRM_FIELD = "confirm_oversubscription"


@dataclass
class ClassGuarantee:
    """One class: the sum of every team's guarantee against its schedulable capacity."""

    resource_class: ResourceClass
    guaranteed: int

    @property
    def schedulable(self) -> int:
        return self.resource_class.allocatable

    @property
    def over(self) -> bool:
        return self.guaranteed > self.schedulable

    @property
    def excess(self) -> int:
        return max(0, self.guaranteed - self.schedulable)

    @property
    def text(self) -> str:
        return f"{self.guaranteed} guaranteed / {self.schedulable} schedulable"


def class_guarantees(classes=None) -> dict[int, ClassGuarantee]:
    """Resource class id → the sum of guarantees over all teams, for the classes with a quota (or ``classes``)."""
    quotas = Quota.objects.all()
    if classes is not None:
        quotas = quotas.filter(resource_class__in=classes)
    sums = dict(quotas.values_list("resource_class").annotate(total=Sum("guaranteed")).order_by())
    rcs = ResourceClass.objects.filter(pk__in=sums)
    return {rc.pk: ClassGuarantee(rc, sums[rc.pk] or 0) for rc in rcs}


def oversubscription(team, resource_class: ResourceClass, guaranteed: int) -> str:
    """What it means to give ``team`` a guarantee of ``guaranteed`` units of the class, if that takes the sum of
    all guarantees above the class's schedulable capacity ("" when it fits, or when the change does not raise
    the sum: lowering an over-subscribed guarantee needs no confirmation)."""
    quotas = Quota.objects.filter(resource_class=resource_class)
    others = quotas.exclude(team=team).aggregate(total=Sum("guaranteed"))["total"] or 0
    current = quotas.filter(team=team).values_list("guaranteed", flat=True).first() or 0
    total, capacity = others + guaranteed, resource_class.allocatable
    if total <= capacity or guaranteed <= current:
        return ""
    return (
        f"Guarantees would total {total} {resource_class.display_name} against {capacity} schedulable: if every "
        "team claims its guarantee at once, some will wait (guarantees cannot all be honoured at once). "
        f"A guarantee of {max(0, capacity - others)} or less for team {team.name} fits."
    )


def startable_on_guarantee(usages, now: datetime | None = None) -> None:
    """Set ``reachable`` on each jobs.views.QuotaUsage: the most units its team could start now, which is the
    class's schedulable capacity less what the team holds and what other teams hold within their own
    guarantees (that work is never preempted for it), each team's holding as jobs.usage.held_units counts it. The
    page caps "N more can start on the guarantee" by it."""
    usages = list(usages)
    if not usages:
        return
    classes = {u.quota.resource_class_id for u in usages}
    held = held_units(class_ids=classes, now=now)
    within: dict[tuple[int, int], int] = {}
    for team_id, class_id, guaranteed in Quota.objects.filter(resource_class__in=classes).values_list(
        "team_id", "resource_class_id", "guaranteed"
    ):
        within[(team_id, class_id)] = min(held.get((team_id, class_id), 0), guaranteed)
    for usage in usages:
        class_id, team_id = usage.quota.resource_class_id, usage.quota.team_id
        others = sum(n for (t, c), n in within.items() if c == class_id and t != team_id)
        usage.reachable = max(0, usage.quota.resource_class.allocatable - usage.used - others)
