"""Issue (or revoke) the token a node's agent posts utilisation samples with."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from core import audit
from gpus.models import Node

from ...choices import TelemetryAuditAction
from ...models import NodeAgentToken


class Command(BaseCommand):
    help = (
        "Print a new node agent token for NODE (store it in the Secret the agent DaemonSet mounts). "
        "--revoke revokes every token of NODE instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("node", help="The node's name as Kubernetes knows it (spec.nodeName).")
        parser.add_argument("--revoke", action="store_true", help="Revoke the node's tokens instead.")
        parser.add_argument(
            "--allow-unknown", action="store_true", help="Issue even if the inventory has no such node yet."
        )

    def handle(self, node, revoke, allow_unknown, **options):
        if revoke:
            with transaction.atomic():
                tokens = list(NodeAgentToken.objects.filter(node_name=node, revoked_at__isnull=True))
                NodeAgentToken.objects.filter(pk__in=[t.pk for t in tokens]).update(revoked_at=timezone.now())
                for token in tokens:
                    audit.record(None, TelemetryAuditAction.AGENT_TOKEN_REVOKE, token)
            self.stdout.write(f"Revoked {len(tokens)} token(s) of node {node}.")
            return
        if not allow_unknown and not Node.objects.filter(name=node).exists():
            raise CommandError(
                f"No node {node!r} in the inventory (check the name, or pass --allow-unknown if it is not synced yet)."
            )
        with transaction.atomic():
            token, raw = NodeAgentToken.issue(node)
            audit.record(None, TelemetryAuditAction.AGENT_TOKEN_ISSUE, token)
        self.stdout.write(raw)
