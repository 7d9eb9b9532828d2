"""Builders of the pure scheduling core's inputs (jobs.scheduling): nodes, jobs and snapshots as admission sees
them, two classes and two teams. No database."""

from __future__ import annotations

from jobs.scheduling.snapshot import ClassView, JobView, NodeView, QuotaView, Snapshot

H100 = ClassView(1, "nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", 1.0, "H100")
MIG3 = ClassView(2, "nvidia.com/mig-3g.40gb", "NVIDIA-A100-SXM4-80GB", 3 / 7, "A100 3g.40gb")
A, B = 1, 2


def node(name, gpus=8, free=None, product=H100, team=None, schedulable=True, cpu=128_000, memory=1_000_000):
    free_units = gpus if free is None else free
    return NodeView(
        name=name,
        product_label=product.product_label,
        team=team,
        schedulable=schedulable,
        allocatable={product.resource_name: gpus},
        free={product.resource_name: free_units},
        cpu_free_m=cpu,
        memory_free_mb=memory,
        cpu_capacity_m=cpu,
        memory_capacity_mb=memory,
    )


_ids = iter(range(1, 10**9))


def job(team=A, count=1, cls=H100, priority=50, preemptible=False, submitted=0.0, **kw):
    return JobView(
        id=kw.pop("id", next(_ids)),
        team=team,
        class_id=cls.id,
        count=count,
        cpu_m=kw.pop("cpu_m", 1000),
        memory_mb=kw.pop("memory_mb", 1000),
        priority=priority,
        preemptible=preemptible,
        submitted=submitted,
        **kw,
    )


def snapshot(nodes, queued, active=(), quotas=None, now=1000.0, patience=900.0, recent=None):
    return Snapshot(
        now=now,
        nodes={n.name: n for n in nodes},
        classes={H100.id: H100, MIG3.id: MIG3},
        quotas=quotas if quotas is not None else {(A, 1): QuotaView(16, 16), (B, 1): QuotaView(16, 16)},
        queued=list(queued),
        active=list(active),
        recent_average=recent or {},
        team_names={A: "Alpha", B: "Beta"},
        patience=patience,
    )
