"""One-click sessions: the portal is the authorisation endpoint the ingress in front of the notebooks asks about every
request (NGINX ``auth_request``, ingress-nginx ``auth-url``, Traefik ForwardAuth, Envoy ext_authz), with
settings.PORTAL_NOTEBOOK_ACCESS = "portal" (docs/operator-guide.md, "Workspace sign-in").

The rule: a request reaches a notebook's Jupyter server only with that notebook's own cookie, signed by the portal,
naming the notebook, its owner and the session (the Job) it was issued for, and younger than
PORTAL_WORKSPACE_COOKIE_SECONDS; it stops working when the session stops or another starts, or when the owner leaves
or is deactivated. The portal's own session cookie never goes to a notebook's address (another host).

The cookie is got in one click: the owner's Open on the notebook's page makes a one-time ticket (its hash stored,
valid PORTAL_WORKSPACE_TICKET_SECONDS) and sends the browser to the notebook's address with the ticket in the query;
the ingress asks this endpoint, which uses the ticket up and answers with the cookie, and the ingress hands the
cookie to the browser with its answer (as oauth2-proxy and JupyterHub do across hosts).

Every request let through is recorded on the notebook (``last_request_at``, at most one write a minute): RStudio's
idle signal for the culler (jobs.notebook.workspaces).

Answers: 204 let it through; 401 no valid cookie or ticket for this notebook; 403 a signed cookie or ticket that no
longer grants (its session stopped, its holder is not the owner), or an address that is no notebook's.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from django.conf import settings
from django.core import signing
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.utils import timezone

from core import audit
from jobs.choices import JobAuditAction, JobState
from jobs.models import Notebook, WorkspaceTicket

#: The query parameter the ticket travels in, and the notebook's cookie: one name for all (a proxy that copies the
#: cookie can list it), kept apart by host and path and by the notebook it names.
TICKET_PARAM = "portal-ticket"
COOKIE_NAME = "portal-workspace"
SIGNING_SALT = "jobs.notebook.workspace"
#: The resource name's notebook id (jobs.models.Notebook.resource_name: nb-<id>-<name>).
RESOURCE_NAME_RE = re.compile(r"nb-(\d+)-")


@dataclass(frozen=True)
class Answer:
    """What the endpoint tells the ingress: a status, and a cookie to hand the browser with it (the exchange)."""

    status: int
    cookie: tuple[str, str] | None = None
    #: The cookie's path (the notebook's base path) and whether it goes over HTTPS only.
    path: str = "/"
    secure: bool = False


def portal_access() -> bool:
    return settings.PORTAL_NOTEBOOK_ACCESS == "portal"


def base_path(notebook: Notebook) -> str:
    """The path of the notebook's address ("/" for an address of its own host): Jupyter's base_url and the cookie's
    path."""
    path = urlsplit(notebook.url).path or "/"
    return path if path.endswith("/") else f"{path}/"


def _address(url: str) -> str:
    """``host[:port]/path`` of a URL: the scheme is left out, since TLS often ends at the ingress."""
    parts = urlsplit(url)
    return f"{parts.netloc.lower()}{parts.path or '/'}"


@lru_cache(maxsize=4)
def _address_pattern(template: str) -> re.Pattern:
    """A regex of PORTAL_NOTEBOOK_URL_TEMPLATE's ``host/path`` that finds ``{name}`` in an address."""
    pieces = re.split(r"(\{name\}|\{namespace\}|\{cluster\})", _address(template))
    wildcards = {"{name}": r"(?P<name>[a-z0-9-]+)", "{namespace}": r"[a-z0-9-]+", "{cluster}": r"[a-z0-9.-]+"}
    seen_name = False
    pattern = ""
    for piece in pieces:
        if piece == "{name}" and seen_name:
            pattern += r"(?P=name)"
        else:
            pattern += wildcards.get(piece) or re.escape(piece)
        seen_name = seen_name or piece == "{name}"
    return re.compile(pattern, re.IGNORECASE)


def find_notebook(address: str) -> Notebook | None:
    """The notebook whose address ``address`` (``host[:port]/path?query``) is at or under; None when none is."""
    match = _address_pattern(settings.PORTAL_NOTEBOOK_URL_TEMPLATE).match(address)
    found = match and RESOURCE_NAME_RE.match(match.group("name"))
    if not found:
        return None
    notebook = (
        Notebook.objects.select_related("team", "cluster", "owner", "session").filter(pk=int(found.group(1))).first()
    )
    if notebook is None:
        return None
    own = _address(notebook.url).lower()
    path = address.split("?", 1)[0].lower()
    return notebook if (path.startswith(own) or f"{path}/" == own) and not _steps_out(path) else None


def _steps_out(path: str) -> bool:
    """Whether a path could name another place once a proxy normalises it (``..``, ``.``, an encoded slash or a
    backslash): the proxy routes by the normalised path, so the portal refuses what it cannot judge the same way."""
    decoded = unquote(path)
    return "%2f" in path or "%5c" in path or "\\" in decoded or any(part in (".", "..") for part in decoded.split("/"))


def requested_address(headers, path_uri: str = "") -> str | None:
    """The address the ingress is asking about, from the headers it sets: ``X-Original-URL`` (ingress-nginx), else
    ``X-Forwarded-Host`` with ``X-Original-URI`` (NGINX auth_request, deploy/proxy/workspace.conf.template),
    ``X-Forwarded-Uri`` (Traefik ForwardAuth) or, from Envoy's ext_authz, the original path and query it appends to
    the endpoint's (``path_uri``)."""
    if url := headers.get("X-Original-URL"):
        parts = urlsplit(url)
        return f"{parts.netloc}{parts.path or '/'}" + (f"?{parts.query}" if parts.query else "")
    host = headers.get("X-Forwarded-Host", "").split(",")[0].strip()
    uri = headers.get("X-Original-URI") or headers.get("X-Forwarded-Uri") or path_uri
    if not host or not uri or not uri.startswith("/"):
        return None
    return f"{host}{uri}"


def _grants(notebook: Notebook, user_id: int, job_id: int) -> bool:
    """Whether a cookie or ticket for ``user_id`` and session ``job_id`` still opens ``notebook``: that session is the
    notebook's current one and runs, and the holder is its owner, still an active account."""
    return (
        notebook.is_active
        and notebook.session_id == job_id
        and notebook.session is not None
        and notebook.session.state == JobState.RUNNING
        and notebook.owner_id == user_id
        and notebook.owner.is_active
    )


def _digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


def open_url(user, notebook: Notebook) -> str:
    """The owner's Open: a one-time ticket for the running session, audited, and the notebook's address carrying it.
    Raises PermissionDenied for anyone but the owner, ValidationError while no session runs."""
    if notebook.owner_id != user.pk:
        raise PermissionDenied(
            f"Only {notebook.owner.get_username()}, who owns notebook {notebook.name}, can open it: a notebook holds "
            "its owner's files and credentials. Launch a notebook of your own from the Notebooks page."
        )
    if not notebook.is_active or notebook.session is None or notebook.session.state != JobState.RUNNING:
        raise ValidationError(
            f"Notebook {notebook.name} is not running ({notebook.status}); it can be opened once its session runs."
        )
    ticket = secrets.token_urlsafe(32)
    now = timezone.now()
    WorkspaceTicket.objects.filter(expires_at__lt=now).delete()  # spent and stale ones: nothing reads them again
    WorkspaceTicket.objects.create(
        digest=_digest(ticket),
        notebook=notebook,
        job_id=notebook.session_id,
        user=user,
        expires_at=now + timedelta(seconds=settings.PORTAL_WORKSPACE_TICKET_SECONDS),
    )
    audit.record(
        user, JobAuditAction.NOTEBOOK_OPEN, notebook, team=notebook.team,
        after={"session": notebook.session_id, "url": notebook.url},
    )  # fmt: skip
    return f"{notebook.url}?{urlencode({TICKET_PARAM: ticket})}"


def _exchange(notebook: Notebook, ticket: str) -> WorkspaceTicket | None:
    """Use the ticket up: one conditional UPDATE, so of two exchanges at once only one gets it."""
    now = timezone.now()
    used = WorkspaceTicket.objects.filter(
        digest=_digest(ticket), notebook=notebook, used_at__isnull=True, expires_at__gt=now
    ).update(used_at=now)
    return WorkspaceTicket.objects.get(digest=_digest(ticket)) if used == 1 else None


#: How often a notebook's latest request is written: the culler judges idleness in minutes.
SEEN_EVERY = timedelta(minutes=1)


def _seen(notebook: Notebook) -> None:
    """Record a request let through, unless one was recorded less than SEEN_EVERY ago (one conditional UPDATE, so
    a burst of requests writes once)."""
    now = timezone.now()
    if notebook.last_request_at is not None and notebook.last_request_at > now - SEEN_EVERY:
        return
    Notebook.objects.filter(pk=notebook.pk).filter(
        Q(last_request_at__isnull=True) | Q(last_request_at__lte=now - SEEN_EVERY)
    ).update(last_request_at=now)


def authorise(headers, cookies, path_uri: str = "") -> Answer:
    """The endpoint's rule (the module docstring) for one request the ingress asks about."""
    address = requested_address(headers, path_uri)
    notebook = find_notebook(address) if address else None
    if notebook is None:
        return Answer(403)
    stale = False
    if value := cookies.get(COOKIE_NAME):
        try:
            claims = signing.loads(value, salt=SIGNING_SALT, max_age=settings.PORTAL_WORKSPACE_COOKIE_SECONDS)
        except signing.BadSignature:
            claims = None  # tampered, expired or another key's: as if there were none (a ticket may still come)
        if isinstance(claims, dict) and claims.get("n") == notebook.pk:
            if _grants(notebook, claims.get("u"), claims.get("j")):
                _seen(notebook)
                return Answer(204)
            stale = True
    ticket = parse_qs(urlsplit(f"//{address}").query).get(TICKET_PARAM, [""])[0]
    if not ticket:
        return Answer(403 if stale else 401)
    used = _exchange(notebook, ticket)
    if used is None:
        return Answer(401)
    if not _grants(notebook, used.user_id, used.job_id):
        return Answer(403)
    _seen(notebook)
    value = signing.dumps({"n": notebook.pk, "u": used.user_id, "j": used.job_id}, salt=SIGNING_SALT)
    return Answer(204, cookie=(COOKIE_NAME, value), path=base_path(notebook), secure=notebook.url.startswith("https:"))
