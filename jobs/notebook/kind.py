"""A notebook session: a Jupyter, code-server or RStudio server (jobs.notebook.workspaces) in a batch/v1 Job,
behind a Service, on the notebook's home volume.

The volume and the Service outlive the session (they are ensured, not created, and kept when it stops), so
"Start again" finds the same home directory and URL, on the same cluster: the first session's cluster becomes the
notebook's. A session's limits start counting the moment its job starts
running (``on_start``), in the same transaction: a notebook that reads Running can be extended at once.
"""

from __future__ import annotations

from gpus.models import settings_cluster_pk
from jobs.choices import JobKind
from jobs.kinds.base import WorkloadKind
from jobs.models import Notebook
from jobs.notebook.sessions import start_clocks
from jobs.notebook.workspace import base_path, portal_access
from jobs.notebook.workspaces import workspace_of
from jobs.render import (
    NOTEBOOK_HOME,
    claims_gpus,
    render_gpu_claim_template,
    render_job,
    render_notebook_service,
    render_notebook_volume,
)
from jobs.storage.secrets import pull_secret_names


class NotebookKind(WorkloadKind):
    name = JobKind.NOTEBOOK
    related = ("notebook__team", "notebook__owner")

    def render(self, job, forms=None) -> list[dict]:
        template = [render_gpu_claim_template(job, job.workload_name)] if claims_gpus(job) else []
        workload = render_job(job, pull_secret_names(job.team_id, job.image))
        _serve_at_address(job.notebook, workload["spec"]["template"]["spec"]["containers"][0])
        return [render_notebook_volume(job.notebook), render_notebook_service(job.notebook), *template, workload]

    def launch(self, backend, job, forms=None) -> dict | None:
        """Create the session's objects on the cluster admission chose; the first session's cluster becomes the
        notebook's (its home volume is made there, so every later session runs there: jobs.notebook.sessions)."""
        created = super().launch(backend, job, forms)
        Notebook.objects.filter(pk=job.notebook_id, cluster__isnull=True).update(
            cluster_id=job.cluster_id or settings_cluster_pk()
        )
        return created

    def on_start(self, jobs) -> None:
        start_clocks({job.pk: job.started_at for job in jobs})


def _serve_at_address(notebook: Notebook, container: dict) -> None:
    """The notebook's server serves under its address's path ("/" for an address of its own host). Jupyter takes it
    as base_url and, with "portal" access, asks for no password: the ingress lets through only what the portal
    authorises (jobs.notebook.workspace). code-server and RStudio (only with "portal" access) replace Jupyter's
    command, port and probe with their own, and keep its home, user and every restriction. Nothing else may reach
    the Service then: docs/operator-guide.md, "Workspace sign-in", says how to hold it to the ingress."""
    base = base_path(notebook)
    workspace = workspace_of(notebook.workspace)
    started = workspace.command(base)
    if started is None:
        args = [
            f"--ServerApp.base_url={base}" if arg.startswith("--ServerApp.base_url=") else arg
            for arg in container["args"]
        ]
        if portal_access():
            args = [arg for arg in args if not arg.startswith("--PasswordIdentityProvider.")]
            args.append("--PasswordIdentityProvider.password_required=False")
        container["args"] = args
        container["readinessProbe"]["httpGet"]["path"] = f"{base}{workspace.ready_path}"
        return
    container["command"], container["args"] = started
    container["ports"] = [{"name": "http", "containerPort": workspace.port, "protocol": "TCP"}]
    # Its settings and extensions live in the home volume, as Jupyter's do.
    container["env"] = [item for item in container["env"] if item.get("name") != "HOME"]
    container["env"].append({"name": "HOME", "value": NOTEBOOK_HOME})
    # Both answer at "/" whatever their address: a proxy in front strips the path (RStudio's www-root-path only
    # tells it the prefix for its redirects).
    container["readinessProbe"]["httpGet"] = {"path": f"/{workspace.ready_path}", "port": workspace.port}
