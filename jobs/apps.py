from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs and notebooks"

    def ready(self):
        # Fill the seams the floors below leave for jobs (they never import this app).
        from core import audit, webhooks  # noqa: PLC0415 - these import models: loaded once the registry is ready
        from gpus import pages as inventory_pages  # noqa: PLC0415
        from gpus import seams as inventory_seams  # noqa: PLC0415
        from jobs import (  # noqa: F401, PLC0415 - checks registers itself
            access,
            attribution,
            checks,
            inventory,
            kinds,  # noqa: PLC0415
            node_holders,
            webhook_events,
        )
        from jobs.batch.kind import BatchKind  # noqa: PLC0415
        from jobs.choices import JobAuditAction  # noqa: PLC0415
        from jobs.distributed.kind import DistributedKind  # noqa: PLC0415
        from jobs.notebook.kind import NotebookKind  # noqa: PLC0415
        from jobs.service.kind import ServiceKind  # noqa: PLC0415
        from telemetry import seams  # noqa: PLC0415

        for kind in (BatchKind(), NotebookKind(), DistributedKind(), ServiceKind()):
            kinds.register(kind)
        audit.register_verbs(JobAuditAction)
        webhooks.register_events(webhook_events.EVENTS)
        seams.register(owners=attribution.owners_on, visible=access.job_visible)
        inventory_seams.register(
            claims=inventory.claims,
            describe_pods=inventory.describe_pods,
            classify_pods=inventory.classify_pods,
            work_on_nodes=inventory.work_on_nodes,
        )
        inventory_pages.extend_node_detail(node_holders.node_detail_holders)
