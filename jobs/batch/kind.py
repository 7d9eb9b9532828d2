"""A batch job: one batch/v1 Job with one pod, run to completion."""

from __future__ import annotations

from jobs.choices import JobKind
from jobs.kinds.base import WorkloadKind
from jobs.render import render_job
from jobs.storage.secrets import pull_secret_names


class BatchKind(WorkloadKind):
    name = JobKind.BATCH

    def render(self, job, forms=None) -> list[dict]:
        return [render_job(job, pull_secret_names(job.team_id, job.image))]
