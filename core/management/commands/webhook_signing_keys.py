"""Which secret key each webhook signs with, for a rotation of DJANGO_SECRET_KEY (docs/operator-guide.md, "Backup
and restore"): the webhooks still on a fallback key, whose teams' leads must rotate their secrets before that key
is removed, and any on a key already removed, whose receivers reject every delivery until then. ``--check`` exits
with an error while any webhook is not on the current key, for a script that removes the fallbacks."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core import secret_keys
from core.models import Webhook

GONE = "a key no longer configured"
ADVICE = {
    GONE: "their receivers reject every delivery until a lead of the team rotates the webhook's secret",
    "fallback": "ask a lead of each team to rotate the webhook's secret (and update the receiver) before you remove "
    "this key",
}


def _plural(count: int) -> str:
    return f"{count} webhook{'' if count == 1 else 's'}"


class Command(BaseCommand):
    help = "List webhooks by the secret key their signing secret derives from (for a DJANGO_SECRET_KEY rotation)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--check", action="store_true", help="Fail while any webhook signs with a key other than the current one."
        )

    def handle(self, *args, check: bool = False, **options):
        names: dict[str, str] = {}
        for name, key in secret_keys.configured():
            names.setdefault(secret_keys.key_id(key), name)  # a fallback equal to the current key is the current one
        current = secret_keys.current_key_id()
        groups: dict[str, list[Webhook]] = {name: [] for name in names.values()}
        for webhook in Webhook.objects.select_related("team").order_by("team__slug", "name", "id"):
            name = names.get(webhook.secret_key_id or current, GONE)
            groups.setdefault(name, []).append(webhook)
        for name, webhooks in groups.items():
            self.stdout.write(f"{_plural(len(webhooks))} on {name}")
            if name == names[current] or not webhooks:
                continue
            self.stdout.write(f"  {ADVICE[GONE if name == GONE else 'fallback']}:")
            for webhook in webhooks:
                self.stdout.write(f"  {webhook.team.slug} / {webhook.name} (id {webhook.pk})")
        behind = sum(len(webhooks) for name, webhooks in groups.items() if name != names[current])
        if check and behind:
            verb = "signs" if behind == 1 else "sign"
            raise CommandError(
                f"{_plural(behind)} still {verb} with a key other than DJANGO_SECRET_KEY; their teams' leads must "
                "rotate their secrets (listed above) before the old keys are removed from DJANGO_SECRET_KEY_FALLBACKS."
            )
