"""What the browser flows share: the quotas team vision starts from, and sending the job form."""

from __future__ import annotations

from decimal import Decimal

from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Quota
from tests.sim_objects import A10, H100


def give_quotas(people) -> dict[str, Quota]:
    """Team vision: H100 (4 guaranteed, limit 8, 500 GPU-hours a month) and A10 shares (2, limit 4)."""
    admin, vision = people["admin"], people["vision"]
    h100 = actions.set_quota(admin, vision, ResourceClass.objects.get(key=H100), 4, 8, Decimal(500))
    a10 = actions.set_quota(admin, vision, ResourceClass.objects.get(key=A10), 2, 4)
    return {"h100": h100, "a10": a10}


def submit_job_form(page) -> None:
    """Clicks the job form's Submit and waits for the page it leads to."""
    with page.expect_navigation():
        page.get_by_role("button", name="Submit job").click()
