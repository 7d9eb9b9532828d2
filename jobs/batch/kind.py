"""A batch job: one batch/v1 Job with one pod, run to completion."""

from __future__ import annotations

from jobs.choices import JobKind
from jobs.kinds.base import WorkloadKind
from jobs.render import claims_gpus, render_gpu_claim_template, render_job
from jobs.storage.secrets import pull_secret_names


class BatchKind(WorkloadKind):
    name = JobKind.BATCH

    def render(self, job, forms=None) -> list[dict]:
        """The Job, after the claim template its pod claims its GPUs from on a DRA class (jobs.dra_claims)."""
        template = [render_gpu_claim_template(job, job.workload_name)] if claims_gpus(job) else []
        return [*template, render_job(job, pull_secret_names(job.team_id, job.image))]
