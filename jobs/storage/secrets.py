"""Team secrets and registry credentials: the portal keeps names, keys and who did what; Kubernetes keeps values.

The rule: a value goes from the request straight into a Secret in the team's namespace (``apply_secret``) and is
never written anywhere else: not to a model field, not to a log line, not to an audit record (which names the
keys), not to a response (which shows names, keys, who and when). The cluster is written first; only when it
has stored the Secret does the row change, so a refused write changes nothing and a retry is safe.

- A team secret is an Opaque Secret named as the team names it (``secret_name_problem``). Jobs use it as
  environment variables (``secretKeyRef``) or files (a read-only Secret volume).
- A registry credential is a ``kubernetes.io/dockerconfigjson`` Secret named ``portal-registry-<host>``; every
  workload of the team whose image is on that registry gets it in ``imagePullSecrets`` (``pull_secret_names``).
  For NVIDIA NGC (nvcr.io) the user name is the literal ``$oauthtoken`` and the password an NGC API key
  (NGC's "Accessing NGC Registry" / "Generating Your NGC API Key" documentation).

Other clusters of the fleet get copies (jobs.storage.presence): every change here marks the team's presence on them
pending (``presence_pending``), and work using the secrets runs only where it is in step.

Leads and admins manage them (``access.can_manage_secrets``); members see the names (``access.can_see_secrets``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from cluster import get_backend
from cluster.base import ClusterError, NotFound
from core import audit
from jobs.access import can_manage_secrets
from jobs.choices import JobAuditAction, PresenceState
from jobs.kick import kick_volume_reconcile
from jobs.models import RegistryCredential, TeamPresence, TeamSecret
from jobs.render import TEAM_LABEL
from jobs.storage.mounts import PORTAL_SECRET_PREFIX, secret_data_problems, secret_name_problem
from vocab.images import REGISTRY_HOST, normalise_registry, registry_of
from vocab.names import (
    DOCKER_HUB_AUTH_ENTRY,
    DOCKER_HUB_REGISTRY,
    DOCKERCONFIGJSON_ITEM,
    DOCKERCONFIGJSON_SECRET_TYPE,
    NGC_API_KEY_USERNAME,
    NGC_REGISTRY,
    OPAQUE_SECRET_TYPE,
)

#: Label on every Secret the portal writes: what it is ("team-secret" or "registry-credential").
SECRET_KIND_LABEL = "gpu-portal.io/secret-kind"
TEAM_SECRET_KIND = "team-secret"
REGISTRY_SECRET_KIND = "registry-credential"
MAX_TOKEN_BYTES = 8192
_USERNAME = re.compile(r"^[^\s:]{1,255}$")


class ClusterUnavailable(Exception):
    """The cluster did not store (or delete) the Secret; nothing in the portal changed. The message says why."""


def _cluster_problem(what: str, error: ClusterError) -> ClusterUnavailable:
    return ClusterUnavailable(f"The cluster did not {what}: {error}. Nothing was changed; try again shortly.")


def _require_lead(user, team: Team) -> None:
    if not can_manage_secrets(user, team):
        raise PermissionDenied(f"Only a lead of team {team.name} or an admin can manage its secrets.")


def _labels(team: Team, kind: str) -> dict[str, str]:
    return {TEAM_LABEL: team.slug, SECRET_KIND_LABEL: kind}


def presence_pending(team: Team) -> None:
    """The team's secrets or credentials changed: every other registered cluster must be brought in step again
    (jobs.storage.presence; kicked after commit, and beat's periodic pass catches up if the broker is down)."""
    TeamPresence.objects.filter(team=team).update(state=PresenceState.PENDING, wanted_at=timezone.now())
    transaction.on_commit(kick_volume_reconcile)


def _store(backend, team: Team, name: str, data: dict[str, str], secret_type: str, kind: str) -> None:
    try:
        backend.ensure_namespace(team.namespace, {TEAM_LABEL: team.slug})
        backend.apply_secret(team.namespace, name, data, secret_type, _labels(team, kind))
    except ClusterError as error:
        raise _cluster_problem(f"store the Secret {team.namespace}/{name}", error) from None


# -- team secrets ---------------------------------------------------------------------------------------------


def create_secret(user, team: Team, name: str, data: dict, description: str = "", backend=None) -> TeamSecret:
    """Store a new team secret. Raises PermissionDenied, ValidationError (field → messages, all at once) or
    ClusterUnavailable."""
    _require_lead(user, team)
    errors: dict[str, list[str]] = {}
    problem = secret_name_problem(name)
    if problem:
        errors["name"] = [problem]
    elif TeamSecret.objects.filter(team=team, name=name).exists():
        errors["name"] = [f"Team {team.name} already has a secret {name}; rotate it to change its values."]
    if len(description or "") > 200:
        errors["description"] = ["At most 200 characters."]
    data_problems = secret_data_problems(data)
    if data_problems:
        errors["data"] = data_problems
    if errors:
        raise ValidationError(errors)
    _store(backend or get_backend(), team, name, data, OPAQUE_SECRET_TYPE, TEAM_SECRET_KIND)
    with transaction.atomic():
        secret = TeamSecret.objects.create(
            team=team, name=name, keys=sorted(data), description=description or "", created_by=user
        )
        audit.record(user, JobAuditAction.SECRET_CREATE, secret, after=_secret_facts(secret), team=team)
        presence_pending(team)
    return secret


def rotate_secret(user, secret: TeamSecret, data: dict, backend=None) -> TeamSecret:
    """Replace every value (and the set of keys) of a team secret. Running pods keep what they read at start
    (environment variables) or see the new files within the kubelet's sync period (Secret volumes)."""
    _require_lead(user, secret.team)
    problems = secret_data_problems(data)
    if problems:
        raise ValidationError({"data": problems})
    _store(backend or get_backend(), secret.team, secret.name, data, OPAQUE_SECRET_TYPE, TEAM_SECRET_KIND)
    with transaction.atomic():
        before = _secret_facts(secret)
        secret.keys, secret.rotated_at, secret.rotated_by = sorted(data), timezone.now(), user
        secret.save(update_fields=["keys", "rotated_at", "rotated_by"])
        audit.record(
            user, JobAuditAction.SECRET_ROTATE, secret, before=before, after=_secret_facts(secret), team=secret.team
        )
        presence_pending(secret.team)
    return secret


def delete_secret(user, secret: TeamSecret, backend=None) -> None:
    """Delete the Kubernetes Secret and the row. Jobs that still use it fail to start, and say why."""
    _require_lead(user, secret.team)
    team = secret.team
    try:
        (backend or get_backend()).delete_secret(team.namespace, secret.name)
    except ClusterError as error:
        raise _cluster_problem(f"delete the Secret {team.namespace}/{secret.name}", error) from None
    with transaction.atomic():
        audit.record(user, JobAuditAction.SECRET_DELETE, secret, before=_secret_facts(secret), team=team)
        secret.delete()
        presence_pending(team)


def _secret_facts(secret: TeamSecret) -> dict:
    """What the audit log keeps of a secret: its name and key names, never a value."""
    return {"name": secret.name, "keys": list(secret.keys), "namespace": secret.team.namespace}


# -- registry credentials -------------------------------------------------------------------------------------


def registry_secret_name(registry: str) -> str:
    """``portal-registry-<host>``: a DNS subdomain for any registry host[:port] (':' and '[]' become '-'), cut to
    a length Kubernetes accepts, with a short hash when cut or changed so two registries never share one."""
    slug = re.sub(r"[^a-z0-9.-]+", "-", registry.lower()).strip("-.") or "registry"
    name = f"{PORTAL_SECRET_PREFIX}registry-{slug}"
    if slug != registry or len(name) > 63:
        digest = hashlib.sha256(registry.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-.')}-{digest}"
    return name


def docker_config_json(registry: str, username: str, token: str) -> str:
    """The ``.dockerconfigjson`` of one registry, as ``kubectl create secret docker-registry`` writes it; Docker
    Hub goes under its historical key, which the kubelet's keyring maps docker.io images to."""
    key = DOCKER_HUB_AUTH_ENTRY if registry == DOCKER_HUB_REGISTRY else registry
    auth = base64.b64encode(f"{username}:{token}".encode()).decode()
    return json.dumps({"auths": {key: {"username": username, "password": token, "auth": auth}}}, sort_keys=True)


def _credential_problems(username: str, token: str) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not isinstance(username, str) or not _USERNAME.fullmatch(username):
        errors["username"] = [
            "Give the user name the registry expects: 1 to 255 characters, no spaces or ':' (for nvcr.io it is "
            f"{NGC_API_KEY_USERNAME})."
        ]
    if not isinstance(token, str) or not token.strip():
        errors["token"] = ["Give the password or access token (for nvcr.io: an NGC API key)."]
    elif len(token.encode()) > MAX_TOKEN_BYTES or any(c in token for c in "\r\n\0"):
        errors["token"] = [f"A token is one line of at most {MAX_TOKEN_BYTES} bytes."]
    return errors


def create_registry_credential(
    user, team: Team, registry: str, username: str, token: str, backend=None
) -> RegistryCredential:
    """Store the team's credential for ``registry`` (as typed: ``nvcr.io``, ``https://registry.example.com``)."""
    _require_lead(user, team)
    host = normalise_registry(registry if isinstance(registry, str) else "")
    errors = _credential_problems(username, token)
    if not host or len(host) > 255 or not REGISTRY_HOST.fullmatch(host):
        errors["registry"] = [
            f"'{registry}' is not a registry host: give host[:port] as it appears at the start of image names, "
            f"e.g. {NGC_REGISTRY} or registry.example.com:5000 (docker.io for Docker Hub)."
        ]
    elif RegistryCredential.objects.filter(team=team, registry=host).exists():
        errors["registry"] = [f"Team {team.name} already has a credential for {host}; rotate it instead."]
    if errors:
        raise ValidationError(errors)
    name = registry_secret_name(host)
    _store(
        backend or get_backend(),
        team,
        name,
        {DOCKERCONFIGJSON_ITEM: docker_config_json(host, username, token)},
        DOCKERCONFIGJSON_SECRET_TYPE,
        REGISTRY_SECRET_KIND,
    )
    with transaction.atomic():
        credential = RegistryCredential.objects.create(
            team=team, registry=host, username=username, secret_name=name, created_by=user
        )
        audit.record(user, JobAuditAction.REGISTRY_CREATE, credential, after=_credential_facts(credential), team=team)
        presence_pending(team)
    return credential


def rotate_registry_credential(
    user, credential: RegistryCredential, token: str, username: str | None = None, backend=None
) -> RegistryCredential:
    """Replace the token (and, when given, the user name) of a registry credential."""
    _require_lead(user, credential.team)
    username = credential.username if username in (None, "") else username
    errors = _credential_problems(username, token)
    if errors:
        raise ValidationError(errors)
    _store(
        backend or get_backend(),
        credential.team,
        credential.secret_name,
        {DOCKERCONFIGJSON_ITEM: docker_config_json(credential.registry, username, token)},
        DOCKERCONFIGJSON_SECRET_TYPE,
        REGISTRY_SECRET_KIND,
    )
    with transaction.atomic():
        before = _credential_facts(credential)
        credential.username, credential.rotated_at, credential.rotated_by = username, timezone.now(), user
        credential.save(update_fields=["username", "rotated_at", "rotated_by"])
        audit.record(
            user,
            JobAuditAction.REGISTRY_ROTATE,
            credential,
            before=before,
            after=_credential_facts(credential),
            team=credential.team,
        )
        presence_pending(credential.team)
    return credential


def delete_registry_credential(user, credential: RegistryCredential, backend=None) -> None:
    _require_lead(user, credential.team)
    team = credential.team
    try:
        (backend or get_backend()).delete_secret(team.namespace, credential.secret_name)
    except ClusterError as error:
        raise _cluster_problem(f"delete the Secret {team.namespace}/{credential.secret_name}", error) from None
    with transaction.atomic():
        audit.record(user, JobAuditAction.REGISTRY_DELETE, credential, before=_credential_facts(credential), team=team)
        credential.delete()
        presence_pending(team)


def _credential_facts(credential: RegistryCredential) -> dict:
    return {
        "registry": credential.registry,
        "username": credential.username,
        "secret_name": credential.secret_name,
        "namespace": credential.team.namespace,
    }


def pull_secret_names(team_id: int, image: str) -> list[str]:
    """The imagePullSecrets a workload of the team with ``image`` gets: the team's credential for exactly the
    registry the image is pulled from (vocab.images.registry_of: docker.io for names without a registry)."""
    return list(
        RegistryCredential.objects.filter(team_id=team_id, registry=registry_of(image)).values_list(
            "secret_name", flat=True
        )
    )


# -- jobs that use secrets ------------------------------------------------------------------------------------


def check_secret_refs(team: Team, secret_env: list[dict], secret_files: list[dict], backend=None) -> dict:
    """Field → messages for secrets or keys a job names that the team does not have. The portal's record is
    checked first; then the cluster, so a Secret deleted behind the portal's back is caught at submission too
    (when the cluster cannot be asked, the job is queued and a missing Secret is explained when its pod waits)."""
    errors: dict[str, list[str]] = {}
    known = {s.name: set(s.keys) for s in TeamSecret.objects.filter(team=team)}
    wanted: dict[str, set[str]] = {}

    def want(field: str, secret: str, keys: list[str], what: str) -> None:
        if secret not in known:
            names = ", ".join(sorted(known)) or "none yet"
            errors.setdefault(field, []).append(
                f"{what}: team {team.name} has no secret {secret} (its secrets: {names}). A lead can create it on "
                "the team's Secrets page."
            )
            return
        for key in keys:
            if key not in known[secret]:
                errors.setdefault(field, []).append(
                    f"{what}: secret {secret} has no key {key} (its keys: {', '.join(sorted(known[secret]))})."
                )
        wanted.setdefault(secret, set()).update(keys)

    for item in secret_env:
        want("secret_env", item["secret"], [item["key"]], item["name"])
    for item in secret_files:
        want("secret_files", item["secret"], list(item.get("keys") or []), f"Files at {item['path']}")
    if errors or not wanted:
        return errors
    backend = backend or get_backend()
    for secret, keys in sorted(wanted.items()):
        field = "secret_env" if any(i["secret"] == secret for i in secret_env) else "secret_files"
        try:
            present = set(backend.get_secret(team.namespace, secret).get("data") or {})
        except NotFound:
            errors.setdefault(field, []).append(
                f"Secret {secret} is missing from namespace {team.namespace} in the cluster (deleted outside the "
                "portal?). A lead can store it again with Rotate."
            )
            continue
        except ClusterError:
            continue  # the cluster cannot be asked now; the pod's wait is explained if it is really missing
        for key in sorted(keys - present):
            errors.setdefault(field, []).append(
                f"Secret {secret} in the cluster has no key {key} any more; a lead can store it again with Rotate."
            )
    return errors
