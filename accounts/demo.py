"""The embedded demo's people: teams, users and memberships, created idempotently."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from .choices import MembershipRole
from .models import Membership, Team

DEMO_TEAMS = [
    ("vision", "Computer Vision", "team-vision"),
    ("nlp", "Language Models", "team-nlp"),
    ("platform", "ML Platform", "team-platform"),
]
#: username, is_admin, [(team, role)]
DEMO_USERS = [
    ("admin", True, [("platform", MembershipRole.LEAD)]),
    ("alice", False, [("vision", MembershipRole.LEAD)]),
    ("bob", False, [("nlp", MembershipRole.MEMBER), ("vision", MembershipRole.MEMBER)]),
]


@dataclass
class DemoCredentials:
    username: str
    password: str
    is_admin: bool
    #: (team name, role) for each of the user's teams, in DEMO_USERS' order.
    teams: list[tuple[str, str]]

    @property
    def standing(self) -> str:
        """What the user is, as the sign-in list prints it: "admin; lead of ML Platform", "lead of Computer
        Vision", "member of Language Models and Computer Vision"."""
        by_role: dict[str, list[str]] = {}
        for team, role in self.teams:
            by_role.setdefault(role, []).append(team)
        parts = ["admin"] if self.is_admin else []
        for role in (MembershipRole.LEAD, MembershipRole.MEMBER):
            if names := by_role.get(role):
                listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
                parts.append(f"{role.label.lower()} of {listed}")
        return "; ".join(parts)


def seed_people(credentials_file: Path) -> list[DemoCredentials]:
    """Create the demo teams and users. Passwords are random on the first run, kept in ``credentials_file``
    (mode 0600) and reused afterwards so the printed credentials stay valid across restarts."""
    saved: dict[str, str] = {}
    if credentials_file.exists():
        for line in credentials_file.read_text().splitlines():
            user, _, password = line.partition(" ")
            if user and password:
                saved[user] = password
    User = get_user_model()
    out = []
    with transaction.atomic():
        teams = {}
        for slug, name, namespace in DEMO_TEAMS:
            teams[slug], _ = Team.objects.get_or_create(slug=slug, defaults={"name": name, "namespace": namespace})
        for username, is_admin, memberships in DEMO_USERS:
            password = saved.get(username) or secrets.token_urlsafe(9)
            user, created = User.objects.get_or_create(username=username, defaults={"email": f"{username}@example.org"})
            if created or not user.check_password(password):
                user.set_password(password)
            user.is_staff = user.is_superuser = is_admin
            user.save()
            for slug, role in memberships:
                Membership.objects.update_or_create(user=user, team=teams[slug], defaults={"role": role})
            out.append(
                DemoCredentials(username, password, is_admin, [(teams[slug].name, role) for slug, role in memberships])
            )
    credentials_file.parent.mkdir(parents=True, exist_ok=True)
    credentials_file.write_text("".join(f"{c.username} {c.password}\n" for c in out))
    credentials_file.chmod(0o600)
    return out
