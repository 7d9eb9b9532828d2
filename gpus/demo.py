"""The demo's fleet: a second simulated cluster (a GKE cluster, cluster/scenarios/cloud.yaml) registered beside the
demo cluster configured in settings, the way an admin registers one (gpus.fleet), and read once."""

from __future__ import annotations

from . import fleet
from .models import Cluster

DEMO_CLOUD = "cloud"


def seed_fleet() -> Cluster | None:
    """Register and sync the demo's cloud cluster unless it is there; returns it, or None when it already was."""
    if Cluster.objects.filter(name=DEMO_CLOUD).exists():
        return None
    cloud = fleet.register(
        None,
        fleet.ClusterInput(
            name=DEMO_CLOUD, display_name="GKE europe-west4", region="europe-west4", connection="simulated",
            sim_scenario="cloud", labels={"provider": "gke", "tier": "cloud"},
        ),
    )  # fmt: skip
    fleet.sync(cloud)
    return cloud
