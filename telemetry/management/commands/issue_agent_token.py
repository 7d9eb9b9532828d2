"""Issue (or revoke) the token a node's agent posts utilisation samples with."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from core import audit
from gpus.models import Cluster, Node, settings_cluster_pk

from ...choices import TelemetryAuditAction
from ...models import NodeAgentToken


class Command(BaseCommand):
    help = (
        "Print a new node agent token for NODE of a cluster (store it in the Secret the agent DaemonSet of that "
        "cluster mounts). --revoke revokes every token of NODE instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("node", help="The node's name as Kubernetes knows it (spec.nodeName).")
        parser.add_argument(
            "--cluster",
            default="",
            help="The registered cluster the node is in (default: the cluster configured in settings). The token "
            "writes samples for that cluster's node only.",
        )
        parser.add_argument("--revoke", action="store_true", help="Revoke the node's tokens instead.")
        parser.add_argument(
            "--allow-unknown", action="store_true", help="Issue even if the inventory has no such node yet."
        )

    def handle(self, node, cluster, revoke, allow_unknown, **options):
        if cluster:
            found = Cluster.objects.filter(name=cluster).first()
            if found is None:
                names = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
                raise CommandError(f"No cluster {cluster!r}; the fleet has: {names}.")
        else:
            found = Cluster.objects.get(pk=settings_cluster_pk())
        if revoke:
            with transaction.atomic():
                tokens = list(NodeAgentToken.objects.filter(cluster=found, node_name=node, revoked_at__isnull=True))
                NodeAgentToken.objects.filter(pk__in=[t.pk for t in tokens]).update(revoked_at=timezone.now())
                for token in tokens:
                    audit.record(None, TelemetryAuditAction.AGENT_TOKEN_REVOKE, token)
            self.stdout.write(f"Revoked {len(tokens)} token(s) of node {node} of cluster {found.name}.")
            return
        if not allow_unknown and not Node.objects.filter(cluster=found, name=node).exists():
            raise CommandError(
                f"No node {node!r} in cluster {found.name!r} in the inventory (check the name and --cluster, or pass "
                "--allow-unknown if it is not synced yet)."
            )
        with transaction.atomic():
            token, raw = NodeAgentToken.issue(node, cluster_id=found.pk)
            audit.record(None, TelemetryAuditAction.AGENT_TOKEN_ISSUE, token, after={"cluster": found.name})
        self.stdout.write(raw)
