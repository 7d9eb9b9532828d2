"""Identity: teams, memberships, service accounts, API tokens and the command line's sign-in."""

from __future__ import annotations

import functools
import hashlib
import secrets
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import connection, connections, models, router
from django.utils import timezone

from .choices import SCOPE_RANK, MembershipRole, MembershipSource, TokenScope

dns_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit.",
)


class Team(models.Model):
    slug = models.SlugField(max_length=40, unique=True, validators=[dns_label])
    name = models.CharField(max_length=100)
    #: Every workload of the team runs in this namespace and no other.
    namespace = models.CharField(max_length=63, unique=True, validators=[dns_label])
    description = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=MembershipRole.choices, default=MembershipRole.MEMBER)
    #: SSO memberships follow the person's groups at every sign-in (accounts/sso.py); local ones are left alone.
    source = models.CharField(max_length=5, choices=MembershipSource.choices, default=MembershipSource.LOCAL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="unique_membership")]
        ordering = ["team__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


# The portal's bearer tokens (API tokens here, checkpoint tokens in jobs) share one wire format and one rule:
# ``<kind>_<prefix>_<secret>``, where the prefix finds the row and only a SHA-256 of the whole string is stored.


def mint_token(kind: str) -> tuple[str, str]:
    """A new token of ``kind`` (its leading word, e.g. "gpp"): (the prefix that finds its row, the whole secret)."""
    prefix = secrets.token_hex(4)
    return prefix, f"{kind}_{prefix}_{secrets.token_urlsafe(32)}"


def token_prefix(raw: str, kind: str) -> str | None:
    """The row-finding prefix of ``raw`` when it is a token of ``kind``; None for anything else."""
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != kind or not parts[1]:
        return None
    return parts[1]


def token_matches(key_hash: str, raw: str) -> bool:
    """Whether ``raw`` is the secret whose hash is stored, compared in constant time."""
    return secrets.compare_digest(key_hash, hash_token(raw))


class APITokenQuerySet(models.QuerySet):
    def active(self):
        """Not expired and not revoked. A revocation in the future (a rotation's overlap) is not yet in force."""
        now = timezone.now()
        return self.filter(models.Q(revoked_at__isnull=True) | models.Q(revoked_at__gt=now), expires_at__gt=now)


class APIToken(models.Model):
    """A bearer token for pipelines. Only a SHA-256 of the secret is stored; the secret is shown once.

    The wire format is ``gpp_<prefix>_<secret>``: the prefix identifies the row (and is shown in the UI so
    people can tell tokens apart), the whole string is hashed for comparison. ``scope`` narrows what the token
    may do below what its user may do (accounts.permissions enforces it on every API request).
    """

    PREFIX = "gpp"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'nightly training pipeline'.")
    key_prefix = models.CharField(max_length=12, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    scope = models.CharField(max_length=10, choices=TokenScope.choices, default=TokenScope.MANAGE)
    #: Who issued it: the user themselves, or the lead or admin who issued a service account's token.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    #: The token this one replaced by rotation.
    rotated_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    #: When it stops working; in the future while a rotation's overlap lasts.
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = APITokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @classmethod
    def issue(
        cls,
        user,
        name: str,
        days: int | None = None,
        read_only: bool = False,
        *,
        scope: str | None = None,
        expires_at=None,
        created_by=None,
        rotated_from: APIToken | None = None,
    ) -> tuple[APIToken, str]:
        """Create a token and return it with its plaintext, which is never stored. Checks nothing: callers go
        through accounts.tokens, which applies the limits."""
        if expires_at is None:
            expires_at = timezone.now() + timedelta(days=days or settings.PORTAL_TOKEN_DEFAULT_DAYS)
        prefix, raw = mint_token(cls.PREFIX)
        token = cls.objects.create(
            user=user,
            name=name,
            key_prefix=prefix,
            key_hash=hash_token(raw),
            scope=scope or (TokenScope.READ if read_only else TokenScope.MANAGE),
            expires_at=expires_at,
            created_by=created_by or user,
            rotated_from=rotated_from,
        )
        return token, raw

    @classmethod
    def find(cls, raw: str) -> APIToken | None:
        """The active token matching ``raw``, compared in constant time; None if unknown, expired or revoked."""
        prefix = token_prefix(raw, cls.PREFIX)
        if prefix is None:
            return None
        token = _with_user_by_prefix(prefix)
        if token is None or not token.is_active or not token_matches(token.key_hash, raw):
            return None
        return token

    @property
    def read_only(self) -> bool:
        return self.scope == TokenScope.READ

    @property
    def scope_rank(self) -> int:
        return SCOPE_RANK[TokenScope(self.scope)]

    @property
    def is_active(self) -> bool:
        now = timezone.now()
        return (self.revoked_at is None or self.revoked_at > now) and self.expires_at > now

    @property
    def revoking(self) -> bool:
        """Rotated: still works until revoked_at, then stops."""
        return self.revoked_at is not None and self.revoked_at > timezone.now()


@functools.cache
def _token_read() -> tuple[str, type[models.Model], list[str], list[str]]:
    """APIToken.find's statement (the token with this prefix joined to its user, every column of both), the user
    model and the field names of the token's and the user's columns, in order. Built once from the models' fields."""
    owner = APIToken._meta.get_field("user")
    user_model = owner.related_model
    token_fields, user_fields = APIToken._meta.concrete_fields, user_model._meta.concrete_fields
    quote = connection.ops.quote_name
    columns = ", ".join([f"t.{quote(f.column)}" for f in token_fields] + [f"u.{quote(f.column)}" for f in user_fields])
    # The identifiers are the models' own; the one value, the prefix, is a parameter.
    sql = (
        f"SELECT {columns} FROM {quote(APIToken._meta.db_table)} t JOIN {quote(user_model._meta.db_table)} u "  # noqa: S608
        f"ON u.{quote(user_model._meta.pk.column)} = t.{quote(owner.column)} "
        f"WHERE t.{quote(APIToken._meta.get_field('key_prefix').column)} = %s"
    )
    return sql, user_model, [f.attname for f in token_fields], [f.attname for f in user_fields]


def _with_user_by_prefix(prefix: str) -> APIToken | None:
    """APIToken.find's read, on every bearer request: the token with this prefix (unique), with its user, as model
    instances with every field loaded (Model.from_db, as the ORM makes them), in one statement.

    Written as SQL because building the same query through the ORM (a filter on the token, the user joined with
    select_related) cost about three times the CPU of running it: 1.0-3.0 ms of a bare API request's 1.3-3.4 ms
    in bench/api_cpu.py (docs/benchmarks.md, section 0). Whether the token is active is checked by the caller
    (APIToken.is_active), so the statement has no parameters but the prefix. SQLite hands back datetimes without
    their zone (the ORM adds UTC, the zone it stores them in); they get it here the same way."""
    sql, user_model, token_names, user_names = _token_read()
    database = router.db_for_read(APIToken)
    with connections[database].cursor() as cursor:
        cursor.execute(sql, [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    if settings.USE_TZ:
        row = [
            value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value
            for value in row
        ]
    token = APIToken.from_db(database, token_names, row[: len(token_names)])
    token.user = user_model.from_db(database, user_names, row[len(token_names) :])
    return token


class ServiceAccount(models.Model):
    """A robot identity owned by a team: its leads create it and issue its tokens; no person owns it, so it
    outlives anybody leaving. It is backed by a Django user of its own (unusable password, never staff, a member
    of its team) so every job it submits has that user as its owner, like anybody else's."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="service_accounts")
    name = models.CharField(max_length=40, validators=[dns_label])
    description = models.TextField(blank=True)
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="service_account")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    disabled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_service_account_per_team")]

    def __str__(self) -> str:
        return f"{self.name} (service account of {self.team.slug})"

    @staticmethod
    def username_for(team: Team, name: str) -> str:
        return f"sa-{team.slug}-{name}"

    @property
    def is_active(self) -> bool:
        return self.disabled_at is None


def hash_device_code(raw: str) -> str:
    return hash_token(raw)


class DeviceAuthorization(models.Model):
    """The command line's sign-in (device-code style, RFC 8628): the CLI asks for a code, a person signed in to
    the browser approves it, the CLI polls and receives a token. Only the device code's hash is stored, and the
    token is made when the CLI collects it, so its secret is never stored either."""

    device_code_hash = models.CharField(max_length=64, unique=True)
    user_code = models.CharField(max_length=9, db_index=True)
    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=10, choices=TokenScope.choices, default=TokenScope.SUBMIT)
    days = models.PositiveIntegerField()
    created = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    denied_at = models.DateTimeField(null=True, blank=True)
    token = models.ForeignKey(APIToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    last_polled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"sign-in {self.user_code} ({self.name})"

    @property
    def is_pending(self) -> bool:
        return (
            self.approved_at is None
            and self.denied_at is None
            and self.token_id is None
            and self.expires_at > timezone.now()
        )


# Models kept in modules of their own, imported here so Django registers them with this app.
from .sso_models import SsoGroupMapping, SsoIdentity  # noqa: E402, F401
