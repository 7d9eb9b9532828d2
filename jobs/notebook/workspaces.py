"""The workspace kinds a notebook runs, and each one's facts in one place: its image, the port it serves on, how it
is started, where it answers readiness and what tells the culler it is in use.

- ``jupyter`` (the default): Jupyter Docker Stacks' ``start-notebook.py`` on 8888 (jobs.render), readiness on
  ``<base>api``; its idle signal is kernel activity from Jupyter's ``/api/kernels`` (Kubeflow's culler rule).
- ``code-server`` (VS Code in the browser, github.com/coder/code-server): ``code-server --bind-addr host:port
  --auth none <folder>``; it serves ``/healthz`` without signing in, a JSON object ``{"status": "alive" | "expired",
  "lastHeartbeat": <milliseconds since the epoch>}``. Its heartbeat beats on every request except ``/healthz``
  itself and, every minute, while a browser is connected, so health checks never look like use. code-server is
  base-path agnostic (its pages use relative addresses): under a path the ingress must strip the prefix.
- ``rstudio`` (RStudio Server in rocker's images, github.com/rocker-org/rocker-versioned2): ``rserver`` on 8787.
  rocker's own start-up (s6 as root, then ``DISABLE_AUTH=true`` to skip the login) needs root; the portal runs
  ``rserver`` itself as the notebook's non-root user instead, single-user with ``--auth-none=1`` (as
  jupyter-rsession-proxy does), its data and database on the session's scratch disk, ``--www-root-path`` the
  address's path. RStudio has no idle endpoint; its signal is the latest request the portal's sign-in endpoint
  let through (``Notebook.last_request_at``, jobs.notebook.workspace).

code-server and RStudio are offered only with ``PORTAL_NOTEBOOK_ACCESS = "portal"``: the portal keeps only
Jupyter's salted hash of a session's token, which neither server can check (code-server wants its password in
clear in ``PASSWORD`` or as its own argon2 ``HASHED_PASSWORD``; RStudio's login is PAM, which needs root), and the
token is never put into a manifest. With "portal" access the ingress lets through only what the portal authorises.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from django.conf import settings

from jobs.choices import WorkspaceKind
from jobs.render import NOTEBOOK_HOME, NOTEBOOK_PORT, SCRATCH_PATH

#: How the culler judges use besides GPU utilisation (jobs.notebook.sessions._judge).
KERNELS = "kernels"
HEARTBEAT = "heartbeat"
REQUESTS = "requests"


@dataclass(frozen=True)
class Workspace:
    kind: str
    port: int
    #: The readiness probe's path under the server's base path ("" for the base itself).
    ready_path: str
    idle_signal: str
    #: Whether the server can guard itself with the session's token (else "portal" access is required).
    token_login: bool

    @property
    def label(self) -> str:
        return WorkspaceKind(self.kind).label

    def default_image(self) -> str:
        if self.kind == WorkspaceKind.CODE_SERVER:
            return settings.PORTAL_CODE_SERVER_IMAGE
        if self.kind == WorkspaceKind.RSTUDIO:
            return settings.PORTAL_RSTUDIO_IMAGE
        return settings.PORTAL_NOTEBOOK_IMAGES[0]

    def images(self) -> list[str]:
        """The images offered for this kind on the launch form (any image may still be typed)."""
        return list(settings.PORTAL_NOTEBOOK_IMAGES) if self.kind == WorkspaceKind.JUPYTER else [self.default_image()]

    def command(self, base: str) -> tuple[list[str], list[str]] | None:
        """(command, args) of the server under base path ``base``; None for Jupyter (jobs.render starts it)."""
        if self.kind == WorkspaceKind.CODE_SERVER:
            return ["code-server"], [
                f"--bind-addr=0.0.0.0:{self.port}",
                "--auth=none",
                "--disable-telemetry",
                "--disable-update-check",
                NOTEBOOK_HOME,
            ]
        if self.kind == WorkspaceKind.RSTUDIO:
            # rserver reads its database settings from a file; the one it would use by default is root's. Its state
            # goes on the session's scratch disk.
            state = f"{SCRATCH_PATH}/rstudio-server"
            database = f"{state}/database.conf"
            rserver = [
                "/usr/lib/rstudio-server/bin/rserver",
                "--server-daemonize=0",
                "--www-address=0.0.0.0",
                f"--www-port={self.port}",
                f"--www-root-path={base}",
                "--auth-none=1",
                f"--server-data-dir={state}/run",
                f"--database-config-file={database}",
            ]
            # Single-user: rserver runs as, and serves, the user it was started as (the pod's non-root user).
            script = (
                f"mkdir -p {state}/run {state}/db && "
                f"printf 'provider=sqlite\\ndirectory={state}/db\\n' > {database} && "
                f'exec {shlex.join(rserver)} --server-user="$(id -un)"'
            )
            return ["/bin/sh", "-c"], [script]
        return None


WORKSPACES: dict[str, Workspace] = {
    WorkspaceKind.JUPYTER: Workspace(WorkspaceKind.JUPYTER, NOTEBOOK_PORT, "api", KERNELS, token_login=True),
    WorkspaceKind.CODE_SERVER: Workspace(WorkspaceKind.CODE_SERVER, 8080, "healthz", HEARTBEAT, token_login=False),
    WorkspaceKind.RSTUDIO: Workspace(WorkspaceKind.RSTUDIO, 8787, "", REQUESTS, token_login=False),
}


def workspace_of(kind: str) -> Workspace:
    return WORKSPACES[kind or WorkspaceKind.JUPYTER]


def workspace_problems(kind: str, portal_access: bool) -> list[str]:
    """Why ``kind`` cannot be launched now (empty when it can): an unknown kind lists the choices."""
    if kind not in WORKSPACES:
        return [f"Unknown workspace {kind!r}: choose one of {', '.join(WORKSPACES)}."]
    if not WORKSPACES[kind].token_login and not portal_access:
        return [
            f"{WorkspaceKind(kind).label} needs the portal's one-click sign-in (PORTAL_NOTEBOOK_ACCESS=portal), which "
            "this portal does not use: it cannot check the session's token itself. Choose jupyter, or ask an admin."
        ]
    return []
