"""A notebook session: a Jupyter server in a batch/v1 Job, behind a Service, on the notebook's home volume.

The volume and the Service outlive the session (they are ensured, not created, and kept when it stops), so
"Start again" finds the same home directory and URL. A session's limits start counting the moment its job starts
running (``on_start``), in the same transaction: a notebook that reads Running can be extended at once.
"""

from __future__ import annotations

from jobs.choices import JobKind
from jobs.kinds.base import WorkloadKind
from jobs.notebook.sessions import start_clocks
from jobs.render import render_job, render_notebook_service, render_notebook_volume
from jobs.storage.secrets import pull_secret_names


class NotebookKind(WorkloadKind):
    name = JobKind.NOTEBOOK
    related = ("notebook__team", "notebook__owner")

    def render(self, job, forms=None) -> list[dict]:
        return [
            render_notebook_volume(job.notebook),
            render_notebook_service(job.notebook),
            render_job(job, pull_secret_names(job.team_id, job.image)),
        ]

    def on_start(self, jobs) -> None:
        start_clocks({job.pk: job.started_at for job in jobs})
