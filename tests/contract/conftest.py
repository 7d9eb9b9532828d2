"""The API as a contract, against a live portal (pytest-django's live_server: real HTTP to the real app) on the
simulated demo cluster, with one bearer token per role and one object of each kind owned by the vision team.

Roles (issue 16's list): anonymous, ``no_team`` (signed in, in no team), ``member`` (carol, vision), ``other_member``
(bob, nlp), ``lead`` (alice, vision), ``admin``, ``agent`` (a node agent's gpa_ token). A new role (the service
account, two of them: read and manage scope) is one entry in ``ROLE_TOKENS`` below plus its rules in
test_authorization_matrix.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
import requests
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import service_accounts
from accounts.choices import MembershipRole
from accounts.models import APIToken, Membership
from cluster import get_backend
from core.notify import notify
from gpus.models import GPU, MigPartition, Node, ResourceClass
from gpus.nodeconfig import request_operation
from gpus.nodeconfig_plan import ConfigRefused, plan_time_slicing
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.cycle.run import run_cycle
from jobs.models import Quota, TeamVolume
from jobs.storage.volumes import reconcile_volumes
from planner.choices import PlanState
from planner.models import PlanRun
from telemetry.models import NodeAgentToken
from tests.factories import API_SERVICE_BODY, UserFactory

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
#: Tokens are moved to ids no fuzzed path reaches by chance (DELETE /tokens/1/ would sign a role out mid-run).
TOKEN_ID_BASE = 10**9


def _issue(user, name: str) -> str:
    token, raw = APIToken.issue(user, name)
    APIToken.objects.filter(pk=token.pk).update(id=TOKEN_ID_BASE + token.pk)
    return raw


def _robot_token(scope: str) -> Callable:
    """A token of a vision service account with ``scope``: the robot is a member of vision, no person."""

    def make(people) -> str:
        robot = service_accounts.create(people["alice"], people["vision"], f"matrix-{scope}")
        token, raw = APIToken.issue(robot.user, "contract", scope=scope)
        APIToken.objects.filter(pk=token.pk).update(id=TOKEN_ID_BASE + token.pk)
        return raw

    return make


def _agent_token(people) -> str:
    node = Node.objects.order_by("name").first()
    return NodeAgentToken.issue(node.name, people["admin"])[1]


#: role -> how its bearer token is made (None: anonymous). The service-account role plugs in here.
ROLE_TOKENS: dict[str, Callable | None] = {
    "anonymous": None,
    "no_team": lambda people: _issue(people["outsider"], "contract"),
    "member": lambda people: _issue(people["carol"], "contract"),
    "other_member": lambda people: _issue(people["bob"], "contract"),
    "lead": lambda people: _issue(people["alice"], "contract"),
    "admin": lambda people: _issue(people["admin"], "contract"),
    "agent": _agent_token,
    "robot_read": _robot_token("read"),
    "robot_manage": _robot_token("manage"),
}


@dataclass
class LivePortal:
    url: str
    tokens: dict[str, str | None]
    objects: dict[str, int | str] = field(default_factory=dict)
    session: requests.Session = field(default_factory=requests.Session)

    def headers(self, role: str) -> dict[str, str]:
        token = self.tokens[role]
        return {"Authorization": f"Bearer {token}"} if token else {}


def _created(client: APIClient, path: str, body: dict) -> int:
    response = client.post(path, body, format="json")
    assert response.status_code in (200, 201), (path, response.content[:500])
    return response.json()["id"]


def seed_objects(people) -> dict[str, int | str]:
    """One object of each kind in the vision team, made through the API by its member carol (admin for the
    admin-only kinds): the ids the matrix and the fuzzer's detail operations aim at."""
    client = APIClient()
    client.force_authenticate(people["carol"])
    job = {"team": "vision", "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "60"]}
    objects: dict[str, int | str] = {
        "jobs": _created(client, "/api/v1/jobs/", {**job, "resource_class": H100, "count": 1}),
        "job-arrays": _created(client, "/api/v1/job-arrays/", {**job, "resource_class": H100, "size": 2}),
        "notebooks": _created(
            client, "/api/v1/notebooks/", {"team": "vision", "name": "scratch", "resource_class": H100}
        ),
        "services": _created(
            client,
            "/api/v1/services/",
            API_SERVICE_BODY,
        ),
        "tokens": _created(client, "/api/v1/tokens/", {"name": "pipeline"}),
    }
    client.force_authenticate(people["alice"])
    objects["secrets"] = _created(
        client, "/api/v1/secrets/", {"team": "vision", "name": "wandb", "data": {"token": "s3cr3t-value"}}
    )
    objects["registry-credentials"] = _created(
        client,
        "/api/v1/registry-credentials/",
        {"team": "vision", "registry": "nvcr.io", "username": "$oauthtoken", "token": "nvapi-secret"},
    )
    objects["webhooks"] = _created(
        client,
        "/api/v1/webhooks/",
        {"team": "vision", "name": "ci", "url": "https://hooks.example.org/portal/abcdef123", "events": ["job.*"]},
    )
    ping = client.post(f"/api/v1/webhooks/{objects['webhooks']}/ping/")
    assert ping.status_code == 202, ping.content[:300]
    objects["delivery_id"] = ping.json()["id"]
    template = {"name": "train", "from_job": objects["jobs"]}
    saved = client.post("/api/v1/teams/vision/templates/", template, format="json")
    assert saved.status_code == 201, saved.content[:300]
    objects["templates"] = saved.json()["name"]
    objects["service-accounts"] = _created(client, "/api/v1/service-accounts/", {"team": "vision", "name": "ci"})
    objects["token_id"] = _created(
        client, f"/api/v1/service-accounts/{objects['service-accounts']}/tokens/", {"name": "ci", "scope": "submit"}
    )
    client.force_authenticate(people["admin"])
    objects["datasets"] = _created(
        client,
        "/api/v1/datasets/",
        {
            "name": "coco",
            "source": "nfs",
            "server": "nfs.example.internal",
            "path": "/exports/coco",
            "capacity_gib": 20,
            "teams": ["vision"],
        },  # fmt: skip
    )
    objects["quotas"] = Quota.objects.get(team=people["vision"]).pk
    objects["gpus"] = GPU.objects.order_by("pk").first().pk
    objects["mig-partitions"] = MigPartition.objects.order_by("pk").first().pk
    objects["resource-classes"] = ResourceClass.objects.get(key=H100).pk
    objects["teams"] = "vision"
    objects["nodes"] = Node.objects.order_by("name").first().name
    objects["clusters"] = "default"
    for _ in range(2):  # the job is admitted, then has a pod (its log operations answer)
        run_cycle(get_backend())
    reconcile_volumes(get_backend())  # the dataset's claim in vision's namespace becomes a team volume
    volume = TeamVolume.objects.filter(team=people["vision"]).order_by("pk").first()
    if volume is not None:
        objects["volumes"] = volume.pk
    for node in Node.objects.filter(team__isnull=True).order_by("name"):
        try:  # the first node the portal may time-slice (a managed node pool's sharing is the provider's)
            plan = plan_time_slicing(node, replicas=2, rename=False)
        except ConfigRefused:
            continue
        objects["node-config-operations"] = request_operation(people["admin"], node, plan).pk
        break
    objects["notifications"] = notify(people["carol"], "job", "Job train started").pk
    # A finished plan run (no worker here): its detail, cancel (409: it has ended) and CSV answer past authorization.
    now = timezone.now()
    objects["planner"] = PlanRun.objects.create(
        created_by=people["admin"], window_start=now - timedelta(days=7), window_end=now, state=PlanState.SUCCEEDED,
        results={"window": {"start": 0, "end": 1, "jobs": 0}, "scenarios": [], "fidelity": {}, "seconds": 0.0},
    ).pk  # fmt: skip
    return objects


@pytest.fixture
def live_portal(live_server, people, settings, tmp_path) -> LivePortal:
    """The live portal on a fresh simulated cluster, its inventory reconciled, vision holding a quota and one
    object of each kind, and a token per role."""
    # Streams and long polls end fast: each cell and fuzzed request waits a moment, not the production minute.
    settings.PORTAL_LOG_FOLLOW_SECONDS = 0.3
    settings.PORTAL_EVENT_STREAM_SECONDS = 0.3
    settings.PORTAL_WAIT_MAX_SECONDS = 1
    settings.PORTAL_WAIT_POLL_SECONDS = 0.1
    settings.PORTAL_CLUSTER_BACKEND = "simulated"
    settings.PORTAL_SIM_STATE = str(tmp_path / "sim.json")
    get_backend.cache_clear()
    sync_inventory(get_backend())
    carol = UserFactory(username="carol")
    Membership.objects.create(user=carol, team=people["vision"], role=MembershipRole.MEMBER)
    people = {**people, "carol": carol}
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 8, 16)
    objects = seed_objects(people)
    tokens = {role: (make(people) if make else None) for role, make in ROLE_TOKENS.items()}
    yield LivePortal(url=live_server.url, tokens=tokens, objects=objects)
    get_backend.cache_clear()
