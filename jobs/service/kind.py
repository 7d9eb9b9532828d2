"""An inference service (issue 13): a Deployment + ClusterIP Service + HorizontalPodAutoscaler, not a batch Job.

Its job row is admitted like a gang for the service's minimum: ``workers`` holds the replicas admitted with it
(``min_replicas`` at creation), each ``count`` units on a node of its own (admission reserves the minimum on
distinct nodes, as the Deployment's preferred anti-affinity spreads them; a minimum larger than the class's nodes
waits with the gang's "never fits" reason). Replicas above it are granted one by one by jobs.service.follow.

The kind creates its objects itself (``launch``): the cycle's launch step asks it. It is followed by
jobs.service.follow, not by the batch reconcile (``followed_elsewhere``), and it asks for the dedicated node pool
(``uses_service_pool``).
"""

from __future__ import annotations

from jobs.choices import JobKind
from jobs.kinds.base import Demand, ElasticViews, WorkloadKind
from jobs.service import follow, launch


class ServiceKind(WorkloadKind):
    name = JobKind.SERVICE
    related = ("inference_service",)
    uses_service_pool = True
    followed_elsewhere = True
    pod_noun = "replica"

    def workload_text(self, job) -> str:
        name = job.inference_service.name if hasattr(job, "inference_service") else job.workload_name
        return f"Deployment {name} (with its Service and autoscaler)"

    def demand(self, job) -> Demand:
        """The replicas admitted with the job (its minimum), ``count`` units and the CPU and memory each; never
        served by the class's alternatives (the scheduler, not the portal, places a Deployment's replicas)."""
        return Demand(
            job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb, pods=max(job.workers, 1),
            alternatives=False,
        )  # fmt: skip

    def render(self, job, forms=None) -> list[dict]:
        template = launch.render_gpu_claim_template(job.inference_service, job)
        objects = launch.render_objects(job.inference_service, job, max_replicas=None)
        return [template, *objects] if template else objects

    def launch(self, backend, job, forms=None) -> dict | None:
        return launch.launch_service(backend, job)

    def leftover_is_stale(self, job, workload_name: str) -> bool:
        return False  # a service has no batch workloads; jobs.service.follow removes its objects

    def follow(self, backend, result, now=None, cluster=None, home_id=None) -> None:
        follow.reconcile_services(backend, result, now, cluster.pk if cluster is not None else None, home_id)

    def elastic_views(self, now, classes: dict, pool: bool) -> ElasticViews:
        """The granted extra replicas of every admitted service, and one wanted replica of each whose autoscaler
        wants more."""
        return follow.replica_views(now, classes, pool)

    def take_elastic(self, decisions, now) -> None:
        follow.take_decisions(decisions, now)
