"""An inference service (issue 13): a Deployment + ClusterIP Service + HorizontalPodAutoscaler, not a batch Job.

Its job row is admitted like a gang for the service's minimum: ``workers`` holds the replicas admitted with it
(``min_replicas`` at creation), each ``count`` units on a node of its own (admission reserves the minimum on
distinct nodes, as the Deployment's preferred anti-affinity spreads them; a minimum larger than the class's nodes
waits with the gang's "never fits" reason). Replicas above it are granted one by one by jobs.service_cycle.

The kind creates its objects itself (``launch``): the cycle's launch step asks it. It is followed by
jobs.service_cycle, not by the batch reconcile (``followed_elsewhere``), and it asks for the dedicated node pool
(``uses_service_pool``).
"""

from __future__ import annotations

from ..choices import JobKind
from .base import Demand, WorkloadKind


class ServiceKind(WorkloadKind):
    name = JobKind.SERVICE
    related = ("inference_service",)
    uses_service_pool = True
    followed_elsewhere = True

    def demand(self, job) -> Demand:
        """The replicas admitted with the job (its minimum), ``count`` units and the CPU and memory each."""
        return Demand(job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb, pods=max(job.workers, 1))

    def render(self, job, forms=None) -> list[dict]:
        from ..service_cycle import render_objects  # noqa: PLC0415 - service_cycle imports the kinds registry

        return render_objects(job.inference_service, job, max_replicas=None)

    def launch(self, backend, job, forms=None) -> dict | None:
        from ..service_cycle import launch_service  # noqa: PLC0415

        return launch_service(backend, job)

    def leftover_is_stale(self, job, workload_name: str) -> bool:
        return False  # a service has no batch workloads; jobs.service_cycle removes its objects
