"""A batch job: one batch/v1 Job with one pod, run to completion."""

from __future__ import annotations

from ..choices import JobKind
from ..render import render_job
from ..secrets import pull_secret_names
from .base import WorkloadKind


class BatchKind(WorkloadKind):
    name = JobKind.BATCH

    def render(self, job, forms=None) -> list[dict]:
        return [render_job(job, pull_secret_names(job.team_id, job.image))]
