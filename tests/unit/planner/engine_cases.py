"""Small clusters and histories for the planner engine's tests, built by hand so the right answer is known."""

from __future__ import annotations

from jobs.scheduling.snapshot import ClassView, NodeView, QuotaView
from planner import model
from vocab.names import GPU_RESOURCE, mig_resource_name

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
A10 = "NVIDIA-A10"
T0 = 1_767_225_600.0  # 2026-01-01
HOUR = 3600.0


def node(name: str, label: str, resources: dict[str, int], cpu_m: int = 64_000, memory_mb: int = 512_000, **kw):
    return NodeView(name, label, None, True, dict(resources), dict(resources), cpu_m, memory_mb, cpu_m, memory_mb, **kw)


def cluster(nodes: list[tuple[NodeView, str, int, bool]], classes: list[ClassView], quotas: dict, teams=None):
    """``nodes``: (view, GFD product, GPUs, MIG-capable)."""
    return model.Cluster(
        nodes={v.name: v for v, *_ in nodes},
        shapes={v.name: model.NodeShape(v.name, product, gpus, capable) for v, product, gpus, capable in nodes},
        classes={c.id: c for c in classes},
        quotas=dict(quotas),
        team_names=teams or {1: "vision", 2: "nlp"},
    )


def h100_cluster(count: int = 2, quotas=None) -> model.Cluster:
    """``count`` H100 nodes of 8 GPUs; class 1; teams 1 and 2 guaranteed 8, limit 16 by default."""
    cls = ClassView(1, GPU_RESOURCE, H100, 1.0, "H100 80GB HBM3")
    nodes = [(node(f"h{i}", H100, {GPU_RESOURCE: 8}), H100, 8, True) for i in range(count)]
    return cluster(nodes, [cls], quotas or {(1, 1): QuotaView(8, 16), (2, 1): QuotaView(8, 16)})


def a100_mig_cluster() -> model.Cluster:
    """Two A100s carved all-3g.40gb (16 × 3g.40gb each): class 1 is 3g.40gb, class 2 is 1g.10gb (offered by no
    node), class 3 the whole A100 (no node either)."""
    mig_3g, mig_1g = mig_resource_name("3g.40gb"), mig_resource_name("1g.10gb")
    classes = [
        ClassView(1, mig_3g, A100, 3 / 7, "A100 SXM4 80GB · MIG 3g.40gb"),
        ClassView(2, mig_1g, A100, 1 / 7, "A100 SXM4 80GB · MIG 1g.10gb"),
        ClassView(3, GPU_RESOURCE, A100, 1.0, "A100 SXM4 80GB"),
    ]
    nodes = [(node(f"a{i}", A100, {mig_3g: 16}), A100, 8, True) for i in range(2)]
    quotas = {(1, c.id): QuotaView(32, 32) for c in classes}
    return cluster(nodes, classes, quotas)


def a10_cluster(replicas: int = 4) -> model.Cluster:
    """One node of 4 A10s time-sliced ×``replicas`` (class 1, 1/replicas of a GPU each)."""
    label = A10 + "-SHARED"
    cls = ClassView(1, GPU_RESOURCE, label, 1 / replicas, f"A10 · 1/{replicas} time-sliced")
    nodes = [(node("t0", label, {GPU_RESOURCE: 4 * replicas}), A10, 4, False)]
    return cluster(nodes, [cls], {(1, 1): QuotaView(64, 64)})


def job(job_id: int, submitted: float, run_s: float, count: int = 1, team: int = 1, class_id: int = 1, **kw):
    return model.PastJob(job_id, team, class_id, count, submitted, run_s, **kw)


def history(jobs: list[model.PastJob], hours: float = 24.0, group_caps: dict | None = None) -> model.History:
    return model.History(T0, T0 + hours * HOUR, jobs, group_caps=group_caps or {})
