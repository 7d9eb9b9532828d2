"""A 2 × 2 gang against the real kube-apiserver v1.20 and kube-scheduler: the backend reads the server version
and picks one Job per rank (v1.20 has no Indexed Jobs: it drops completionMode, which a server-side dry run
shows), the API server accepts every rank and the headless Service as rendered, the scheduler binds each rank
to the node admission chose for it, and cancelling removes every rank and the Service."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.utils import timezone
from kubernetes import client

from accounts.models import Team
from cluster.base import forms_for
from cluster.kubernetes import KubernetesBackend
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import kinds, lifecycle
from jobs.choices import JobKind, JobState
from jobs.cycle.result import CycleResult
from jobs.cycle.run import launch, reconcile_jobs
from jobs.distributed.render import RANK_LABEL, gang_base, render_gang
from jobs.models import Job

from .support import wait_for

pytestmark = pytest.mark.django_db


def test_a_gang_runs_as_one_job_per_rank_on_v1_20_each_rank_on_its_node(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str, people
) -> None:
    product = f"NVIDIA-H100-GANG-{test_id}"
    nodes = [make_gpu_node(suffix, gpus=4, product=product)["metadata"]["name"] for suffix in ("g0", "g1")]
    sync_inventory(kube_backend)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    assert kube_backend.server_version().startswith("v1.20.")
    forms = forms_for(kube_backend.server_version())
    assert forms.indexed_jobs is False

    job = lifecycle.submit(
        people["alice"], "Submitted.", team=team, owner=people["alice"], resource_class=rc, kind=JobKind.DISTRIBUTED,
        name="ddp", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["torchrun", "train.py"], count=2, workers=2,
        cpu_millicores=2000, memory_mb=8192, max_runtime_seconds=600,
    )  # fmt: skip
    chosen = [nodes[1], nodes[0]]  # rank 0 on the second node: each rank goes where it was placed, not in order
    Job.objects.filter(pk=job.pk).update(
        state=JobState.ADMITTED, node_name=chosen[0], node_names=chosen, attempts=1, admitted_at=timezone.now()
    )
    job.refresh_from_db()
    assert [m["kind"] for m in kinds.for_job(job).render(job, forms)] == ["Service", "Job", "Job"]

    launch(kube_backend, CycleResult())
    job.refresh_from_db()
    assert job.workload_created_at is not None  # the API server took the Service and both ranks as rendered
    base = gang_base(job)
    service = kube_backend.core.read_namespaced_service(base, kube_namespace)
    assert service.spec.cluster_ip == "None" and service.spec.publish_not_ready_addresses is True
    assert service.spec.selector == {"gpu-portal.io/job-id": str(job.pk)}

    def placed() -> dict[int, str] | None:
        ranks = {
            int(pod["metadata"]["labels"][RANK_LABEL]): pod["spec"].get("nodeName")
            for pod in kube_backend.list_pods(kube_namespace)
            if pod["metadata"]["labels"].get("gpu-portal.io/job-id") == str(job.pk)
        }
        return ranks if len(ranks) == 2 and all(ranks.values()) else None

    assert wait_for("every rank to be bound", placed) == {0: chosen[0], 1: chosen[1]}
    pods = [p for p in kube_backend.list_pods(kube_namespace) if p["metadata"]["labels"].get(RANK_LABEL)]
    assert {(p["spec"]["hostname"], p["spec"]["subdomain"]) for p in pods} == {(f"{base}-0", base), (f"{base}-1", base)}

    # The Indexed shape is not for this server: a dry run shows v1.20 drops completionMode (the Job would be an
    # ordinary one of two identical, unnumbered pods).
    indexed = render_gang(job, indexed=True)[1]
    indexed["metadata"]["name"] = f"{base}-indexed"
    dry = kube_backend.batch.create_namespaced_job(kube_namespace, indexed, dry_run="All")
    assert dry.spec.completion_mode is None and dry.spec.completions == 2

    assert lifecycle.cancel(job, timezone.now(), "Cancelled by alice.", actor=people["alice"])
    reconcile_jobs(kube_backend, CycleResult())
    wait_for(
        "every rank's workload to go",
        lambda: not [w for w in kube_backend.list_workloads(kube_namespace) if w["metadata"]["name"].startswith(base)],
    )
    with pytest.raises(client.ApiException) as gone:
        kube_backend.core.read_namespaced_service(base, kube_namespace)
    assert gone.value.status == 404
