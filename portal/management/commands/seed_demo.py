import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from accounts.demo import seed_people
from cluster import get_backend
from gpus import fleet
from gpus.demo import seed_fleet
from gpus.models import Cluster, settings_cluster_pk
from jobs.cycle.run import run_cycle
from jobs.demo import seed_quotas_and_jobs, seed_secrets, seed_volumes
from planner.demo_history import DAYS, seed_history


class Command(BaseCommand):
    help = "Create the demo teams and users, read the cluster once, and print the sign-in credentials."

    def handle(self, *args, **options):
        creds = seed_people(settings.DATA_DIR / "demo-credentials.txt")
        backend = get_backend()
        result = fleet.sync(Cluster.objects.get(pk=settings_cluster_pk()))
        if result is None:
            raise CommandError("The demo cluster could not be read; see the log above.")
        self.stdout.write(
            f"Inventory: {result.nodes_seen} nodes, {result.gpus} GPUs, {result.mig_partitions} MIG partitions, "
            f"{result.resource_classes} resource classes."
        )
        for other in seed_fleet():
            self.stdout.write(f"Fleet: cluster {other.name} ({other}) registered beside the demo cluster.")
        quotas, jobs = seed_quotas_and_jobs()
        jobs += seed_volumes(backend)
        jobs += seed_secrets(backend)
        # After the live jobs (their seeding looks for a portal without jobs), before the first cycle.
        began = time.perf_counter()
        past = seed_history()
        if past:
            self.stdout.write(
                f"Demo history: {past} finished jobs over the last {DAYS} days for the planner "
                f"({time.perf_counter() - began:.1f} s)."
            )
        cycle = run_cycle(backend)
        self.stdout.write(
            f"Demo quotas added: {quotas}; demo jobs submitted: {jobs}; first job cycle admitted {cycle.admitted}."
        )
        self.stdout.write(self.style.SUCCESS("Demo sign-in (also in var/demo-credentials.txt):"))
        for c in creds:
            self.stdout.write(f"  {c.username:<6} / {c.password}   ({c.standing})")
