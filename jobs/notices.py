"""Acting on someone else's work: the reason it takes and who is told.

The rule (issue 18): a team lead or an admin who cancels a member's job, stops a member's notebook or stops a
member's service says why. ``reason_problem`` refuses the action without one (the owner acting on their own
work may leave it out). The reason goes into the timeline line and the audit record (the caller writes both),
and ``tell_owner`` tells the owner: the bell, an e-mail, and the team's webhooks. Other floors' actions on
someone's work (a node drain that stops jobs) call ``tell_owner`` too, so the owner hears of them the same way.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import send_mail

from core.notify import notify

log = logging.getLogger(__name__)

#: The longest reason kept (the API and the forms refuse longer ones).
REASON_MAX_LENGTH = 500


def acts_on_others_work(actor, owner_id: int | None) -> bool:
    """True when ``actor`` (a person) acts on work that ``owner_id`` owns and is not theirs."""
    return actor is not None and owner_id is not None and actor.pk != owner_id


def reason_problem(actor, owner_id: int | None, reason: str, what: str) -> str:
    """The sentence refusing the action, or "" when it may go on: acting on someone else's ``what`` ("job",
    "notebook", "service") needs a reason; the owner's own work does not."""
    reason = (reason or "").strip()
    if len(reason) > REASON_MAX_LENGTH:
        return f"Keep the reason to {REASON_MAX_LENGTH} characters (it has {len(reason)})."
    if not reason and acts_on_others_work(actor, owner_id):
        return f"Say why you are stopping someone else's {what}: the owner is told your reason."
    return ""


def by_whom(actor, reason: str) -> str:
    """'by alice: the node is being serviced' (or 'by alice' without a reason; 'by the portal' without anyone)."""
    who = actor.get_username() if actor is not None else "the portal"
    reason = (reason or "").strip()
    return f"by {who}: {reason}" if reason else f"by {who}"


def tell_owner(owner, actor, reason: str, what: str, *, url: str = "", then: str = "") -> None:
    """Tell ``owner`` that ``actor`` did ``what`` to their work ("cancelled your job #12 train", "stopped your
    notebook lab"), and why: a bell notification and an e-mail (failures logged, never fatal); ``then``: what the
    owner should do now, when it is not obvious. Nothing when the owner acted themselves. Call it after the action
    committed (the webhooks are the transition's own)."""
    if owner is None or not acts_on_others_work(actor, owner.pk):
        return
    who = actor.get_username() if actor is not None else "The portal"
    title = f"{who} {what}"
    body = f"Reason: {reason.strip()}" if (reason or "").strip() else "No reason was given."
    if then:
        body += f"\n\n{then}"
    notify(owner, "work.stopped", title, body, url)
    if owner.email:
        link = f"\n\n{settings.PORTAL_BASE_URL.rstrip('/')}{url}" if url else ""
        try:
            send_mail(title, body + link, None, [owner.email])
        except Exception:  # SMTP down must not undo or fail the action
            log.warning("could not e-mail %s that %s", owner.email, title, exc_info=True)
