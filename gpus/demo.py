"""The demo's fleet: two more simulated clusters registered beside the demo cluster configured in settings, the way
an admin registers one (gpus.fleet), and read once: a GKE cluster (cluster/scenarios/cloud.yaml) whose GPUs the
device plugin offers, and an on-premise lab whose GPUs NVIDIA's DRA driver offers through ResourceSlices
(cluster/scenarios/dra.yaml: whole H100s, and A100s with dynamic MIG)."""

from __future__ import annotations

from . import fleet
from .models import Cluster

DEMO_CLOUD = "cloud"
DEMO_DRA = "lab"

DEMO_CLUSTERS = (
    fleet.ClusterInput(
        name=DEMO_CLOUD, display_name="GKE europe-west4", region="europe-west4", connection="simulated",
        sim_scenario="cloud", labels={"provider": "gke", "tier": "cloud"},
    ),
    fleet.ClusterInput(
        name=DEMO_DRA, display_name="DRA lab", region="on-premise", connection="simulated", sim_scenario="dra",
        labels={"tier": "lab", "gpu-requests": "dra"},
    ),
)  # fmt: skip


def seed_fleet() -> list[Cluster]:
    """Register and sync the demo's other clusters that are not there yet; returns those it registered."""
    made = []
    for wanted in DEMO_CLUSTERS:
        if Cluster.objects.filter(name=wanted.name).exists():
            continue
        cluster = fleet.register(None, wanted)
        fleet.sync(cluster)
        made.append(cluster)
    return made
