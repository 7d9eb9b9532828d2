from django.conf import settings
from django.core.management.base import BaseCommand

from cluster import get_backend
from gpus.reconcile import sync_inventory
from portal.demo import seed_people


class Command(BaseCommand):
    help = "Create the demo teams and users, read the cluster once, and print the sign-in credentials."

    def handle(self, *args, **options):
        creds = seed_people(settings.DATA_DIR / "demo-credentials.txt")
        result = sync_inventory(get_backend())
        self.stdout.write(
            f"Inventory: {result.nodes_seen} nodes, {result.gpus} GPUs, {result.mig_partitions} MIG partitions, "
            f"{result.resource_classes} resource classes."
        )
        self.stdout.write(self.style.SUCCESS("Demo sign-in (also in var/demo-credentials.txt):"))
        for c in creds:
            role = "admin" if c.is_admin else "member"
            self.stdout.write(f"  {c.username:<6} / {c.password}   ({role})")
