"""Shared fixtures. In CI (CI=true) the suite must run on PostgreSQL and Redis: a run that would fall back to
SQLite or the file-system broker fails at start instead of quietly testing something else."""

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from .sim_objects import DEMO_SCENARIO

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "correct-horse-battery"
IN_CI = os.environ.get("CI", "").lower() == "true"
#: The name of this process's test database where it is a copy of the run's template (tests/db_template.py).
COPIED_DATABASE = pytest.StashKey[str | None]()

# Hypothesis: in CI the examples are the same every run (derandomize, so a failure reproduces from the log and no
# example database is kept) and the health checks that time the machine rather than the code (too_slow,
# data_too_large: a generator slowed by a busy machine) are off, as is the per-example deadline. Locally the
# defaults stand. HYPOTHESIS_PROFILE=ci picks the CI profile by hand. Tests whose @settings name their own
# suppress_health_check add to settings.default's list, so they keep the profile's.
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if IN_CI else "dev"))


def pytest_sessionstart(session):
    if not IN_CI:
        return
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        pytest.exit(f"CI=true but the database is {engine}; set DATABASE_URL to PostgreSQL.", returncode=2)
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        pytest.exit(
            f"CI=true but the broker is {settings.CELERY_BROKER_URL}; set CELERY_BROKER_URL to Redis.", returncode=2
        )


#: Tiers whose tests share one expensive session-scoped server (a kube control plane, the OpenID provider): under
#: pytest-xdist (`make test` runs `-n`, `--dist loadgroup`) each runs whole on one worker, so the server starts once
#: and no other worker keeps one running idle to its end. The browser tier is not one of them: one Chromium a worker
#: costs little, and its tests in one chain would outlast the rest of the run.
SHARED_SERVER_TIERS = ("kube", "sso")


@dataclass(frozen=True)
class ModuleSeed:
    """What a module's tests share, made once for the module (``_module_rows``): the demo ``inventory``, or the
    ``cluster`` (with the ``people``) of the cluster and clock marker arguments all its tests have."""

    fixture: str
    cluster_options: dict = field(default_factory=dict)
    clock_options: dict = field(default_factory=dict)


#: The test modules whose inventory or cluster is made once for all their tests, and how.
MODULE_SEEDS = pytest.StashKey[dict[Path, ModuleSeed]]()


# First: pytest-xdist's worker reads the xdist_group markers in its own pytest_collection_modifyitems, which would
# otherwise run before this one (the worker registers its plugin after the initial conftests).
# A module whose rows are made once (MODULE_SEEDS) runs whole on one worker too: split over four, each worker would
# make them again.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    seeds = config.stash[MODULE_SEEDS] = _module_seeds(items)
    for item in items:
        where = Path(item.path).relative_to(REPO / "tests")
        if where.parts[0] in SHARED_SERVER_TIERS:
            item.add_marker(pytest.mark.xdist_group(where.parts[0]))
        elif Path(item.path) in seeds and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(f"rows-{where.stem}"))


def _database_use(item) -> str:
    """How the test uses the database: "none", "rolled back" (pytest-django's ``db``: never committed) or "commits"."""
    names = set(getattr(item, "fixturenames", ()))
    marker = item.get_closest_marker("django_db")
    if names & {"transactional_db", "live_server"} or (marker and marker.kwargs.keys() - {"databases"}):
        return "commits"
    return "rolled back" if "db" in names else "none"


def _marker_options(item, name: str) -> dict:
    marker = item.get_closest_marker(name)
    return dict(marker.kwargs) if marker else {}


def _seed_wanted(item) -> ModuleSeed | None:
    """What a test on the database would share with its module: the ``inventory``, or the ``cluster`` with its marker
    arguments, where it takes one of them on a rolled-back database; None where it can share nothing."""
    takes = {"inventory", "cluster"} & set(getattr(item, "fixturenames", ()))
    if _database_use(item) != "rolled back" or len(takes) != 1:
        return None
    if takes == {"inventory"}:
        return ModuleSeed("inventory")
    return ModuleSeed("cluster", _marker_options(item, "cluster"), _marker_options(item, "clock"))


def _module_seeds(items) -> dict[Path, ModuleSeed]:
    """The modules whose tests on the database all want the same seed (``_seed_wanted``; tests on no database do not
    count): what that fixture makes is made once for the module (``_module_rows``) instead of once for each test."""
    wanted_by: dict[Path, list] = {}
    for item in items:
        if _database_use(item) != "none":
            wanted_by.setdefault(Path(item.path), []).append(_seed_wanted(item))
    return {
        path: wanted[0]
        for path, wanted in wanted_by.items()
        if wanted[0] is not None and all(seed == wanted[0] for seed in wanted)
    }


def _empty_tables_by_delete(config) -> None:
    """On PostgreSQL a test with a transactional database (live_server, transaction=True) ends with Django's flush,
    one TRUNCATE of every table: about 2 s on this machine's disk whatever the tables hold (each truncated table,
    index and TOAST table gets new files and the old ones are unlinked), against ~50 ms for a DELETE of each table,
    which leaves the same empty tables and sequences. The foreign keys Django makes on PostgreSQL are deferrable, so
    the DELETEs run in any order within the flush's transaction; as the TRUNCATE did, the flush first waits for any
    writer still at work (a live server's thread) and keeps new ones out until it commits. A flush that restarts
    sequences or cascades to tables outside its list (reset_sequences, available_apps) keeps the TRUNCATE."""
    if not config.pluginmanager.hasplugin("django"):
        return
    from django.conf import settings as django_settings

    if "postgresql" not in django_settings.DATABASES["default"]["ENGINE"]:
        return
    from django.db import connection

    operations = type(connection.ops)
    truncate = operations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        names = [self.quote_name(table) for table in tables]
        return [
            "SET CONSTRAINTS ALL DEFERRED;",
            f"LOCK TABLE {', '.join(names)} IN EXCLUSIVE MODE;",
            *(f"DELETE FROM {name};" for name in names),
        ]

    operations.sql_flush = sql_flush


def pytest_configure(config):
    _empty_tables_by_delete(config)
    if not hasattr(config, "workerinput"):  # the run's own process (xdist's controller): its workers inherit this
        from .openapi import SHARED_DIR

        os.environ[SHARED_DIR] = tempfile.mkdtemp(prefix="gpu-portal-tests-")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        from .db_template import drop_template
        from .openapi import SHARED_DIR

        if config.pluginmanager.hasplugin("django") and "postgresql" in _database_engine():
            drop_template()
        if shared := os.environ.pop(SHARED_DIR, None):
            shutil.rmtree(shared, ignore_errors=True)


def _database_engine() -> str:
    from django.conf import settings as django_settings

    return django_settings.DATABASES["default"]["ENGINE"]


def _copies_template(request) -> bool:
    """Whether this process's test database is a copy of the run's template (tests/db_template.py)."""
    return hasattr(request.config, "workerinput") and "postgresql" in _database_engine()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings, request):
    """Under pytest-xdist on PostgreSQL each process's test database is a copy of one migrated once a run
    (tests/db_template.py), not migrated again in each process."""
    if _copies_template(request):
        from .db_template import copy_template_for_this_process

        request.config.stash[COPIED_DATABASE] = copy_template_for_this_process()


@pytest.fixture(scope="session")
def django_db_keepdb(django_db_modify_db_settings, request):
    """Django's test set-up uses a copied database as it finds it and leaves it for django_db_setup to drop; else
    pytest-django's rule (--reuse-db)."""
    return bool(request.config.stash.get(COPIED_DATABASE, None)) or request.config.getvalue("reuse_db")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker, request):
    """pytest-django's test database; on PostgreSQL its commits do not wait for the disk (synchronous_commit off:
    ~2.5 ms less per commit here, and the live-server, browser and integration tests commit tens of thousands of
    times). Set on the database, so the servers and workers the tests start get it too. A crash could lose the
    last commits of a database that is dropped at the end anyway; what other connections see is unchanged."""
    from django.db import connection, connections

    if connection.vendor == "postgresql":
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            name = connection.ops.quote_name(connection.settings_dict["NAME"])
            cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit TO off")
            cursor.execute("SET synchronous_commit TO off")
    yield
    if copied := request.config.stash.get(COPIED_DATABASE, None):
        from .db_template import drop_database

        connections.close_all()
        drop_database(copied)


@pytest.fixture
def restores_schema():
    """After a test that migrated the database back and forth (tests/migration_steps.py): every app at its newest
    migration again, as the rest of the suite needs."""
    yield
    from .migration_steps import migrate_to_latest

    migrate_to_latest()


@dataclass(frozen=True)
class ModuleRows:
    """What ``_module_rows`` made for a module: its simulated cluster's state file, and the people where it made the
    cluster."""

    seed: ModuleSeed
    state: Path
    people: dict | None


@pytest.fixture(scope="module")
def _module_rows(request, tmp_path_factory):
    """In a module of ``MODULE_SEEDS``: its inventory, or its cluster and the people, made once in a transaction
    around the module's tests (tests/module_data.py), so each test starts from them and its changes are rolled back;
    each test's simulated cluster runs on a copy of the module's state file, each gets its own instances of the
    people. None in any other module."""
    seed = request.config.stash.get(MODULE_SEEDS, {}).get(request.node.path)
    if seed is None:
        yield None
        return
    from django.test import override_settings

    from cluster.sim import SimulatedCluster
    from gpus.reconcile import sync_inventory

    from .clock import SimClock
    from .factories import DEMO_QUOTAS, simulated_cluster
    from .module_data import seeded_once

    request.getfixturevalue("django_db_setup")
    state = tmp_path_factory.mktemp("module-rows") / "sim.json"

    def make() -> ModuleRows:
        if seed.fixture == "inventory":
            sync_inventory(SimulatedCluster(state, scenario=DEMO_SCENARIO))
            return ModuleRows(seed, state, None)
        people = make_people()
        options = {"quotas": DEMO_QUOTAS} | seed.cluster_options
        with override_settings(**CLUSTER_SETTINGS):
            simulated_cluster(state, SimClock(**seed.clock_options), admin=people["admin"], **options)
        return ModuleRows(seed, state, people)

    with seeded_once(request.getfixturevalue("django_db_blocker"), make) as made:
        yield made


def _state_copy(rows: ModuleRows | None, path: Path) -> Path:
    """``path``, holding a copy of the module's simulated cluster state where ``_module_rows`` made one."""
    if rows is not None:
        shutil.copyfile(rows.state, path)
    return path


@pytest.fixture
def sim_cluster(tmp_path, _module_rows):
    """A fresh simulated demo cluster with its state in a temporary file (a copy of the module's inventory, where
    ``_module_rows`` made one)."""
    from cluster.sim import SimulatedCluster

    return SimulatedCluster(_state_copy(_module_rows, tmp_path / "simcluster.json"), scenario=DEMO_SCENARIO)


@pytest.fixture
def clock(request):
    """The simulated cluster's hand-moved clock (tests/clock.py): a minute ahead of the wall clock, or at the hour
    (UTC) of ``@pytest.mark.clock(hour=9)`` the next day. The cluster tests (tests/unit/cluster) have their own, in
    epoch seconds: they run without Django and the portal's datetimes."""
    from .clock import SimClock

    marker = request.node.get_closest_marker("clock")
    return SimClock(**(marker.kwargs if marker else {}))


#: The cycle's timings the ``cluster`` fixture pins.
CLUSTER_SETTINGS = {
    "PORTAL_PREEMPTION_GRACE": 30,
    "PORTAL_SERVICE_SCALE_DOWN_SECONDS": 300,
    "PORTAL_SERVICE_POOL_LABEL": "gpu-portal.io/pool=inference",
}


@pytest.fixture
def cluster(db, tmp_path, clock, people, settings, request, _module_rows):
    """The demo cluster on the simulated ``clock``, reconciled into the inventory (tests/factories.py's
    simulated_cluster); teams vision and nlp have an H100 quota of 8 guaranteed and 16 at most. A module or test
    marked ``@pytest.mark.cluster(scenario=..., quotas=..., claims=...)`` gets those nodes, quotas or volume claims
    instead. The cycle's timings are pinned: a preempted job gets 30 s of grace, and a service's grants above what
    its autoscaler wants go back after 300 s; services go to the pool labelled gpu-portal.io/pool=inference. Made
    once for the whole module where its tests allow it (``_module_rows``)."""
    from cluster.sim import SimulatedCluster

    from .factories import DEMO_QUOTAS, simulated_cluster

    for name, value in CLUSTER_SETTINGS.items():
        setattr(settings, name, value)
    if _module_rows is not None:
        scenario = _module_rows.seed.cluster_options.get("scenario", DEMO_SCENARIO)
        return SimulatedCluster(_state_copy(_module_rows, tmp_path / "sim.json"), scenario=scenario, clock=clock)
    marker = request.node.get_closest_marker("cluster")
    options = {"quotas": DEMO_QUOTAS} | (marker.kwargs if marker else {})
    return simulated_cluster(tmp_path / "sim.json", clock, admin=people["admin"], **options)


@pytest.fixture
def inventory(db, sim_cluster, _module_rows):
    """The demo cluster reconciled into the inventory tables; returns the cluster. Reconciled once for the whole
    module where its tests allow it (``_module_rows``)."""
    from gpus.reconcile import sync_inventory

    if _module_rows is None:
        sync_inventory(sim_cluster)
    return sim_cluster


@pytest.fixture
def people(db, _module_rows):
    """Two teams, a member of each, a lead, an admin, and an outsider with no team (the module's, read afresh for
    each test, where ``_module_rows`` made them)."""
    if _module_rows is None or _module_rows.people is None:
        return make_people()
    made = _module_rows.people
    pks: dict[type, list] = {}
    for row in made.values():
        pks.setdefault(type(row), []).append(row.pk)
    fresh = {model: model.objects.in_bulk(ids) for model, ids in pks.items()}  # one query a model
    return {name: fresh[type(row)][row.pk] for name, row in made.items()}


def make_people() -> dict:
    """The rows of the ``people`` fixture (tests/module_data.py makes them once for a module)."""
    from accounts.choices import MembershipRole

    from .factories import MembershipFactory, TeamFactory, UserFactory

    vision = TeamFactory(slug="vision", name="Computer Vision", namespace="team-vision")
    nlp = TeamFactory(slug="nlp", name="Language Models", namespace="team-nlp")
    alice = UserFactory(username="alice")
    bob = UserFactory(username="bob")
    admin = UserFactory(username="admin", is_staff=True, is_superuser=True)
    outsider = UserFactory(username="outsider")
    MembershipFactory(user=alice, team=vision, role=MembershipRole.LEAD)
    MembershipFactory(user=bob, team=nlp)
    return {"vision": vision, "nlp": nlp, "alice": alice, "bob": bob, "admin": admin, "outsider": outsider}


@pytest.fixture(scope="session")
def openapi_schema():
    """The OpenAPI schema, generated once a session and checked as `manage.py spectacular --validate --fail-on-warn`
    does (tests/openapi.py); tests read it and leave it unchanged."""
    from .openapi import openapi_schema

    return openapi_schema()


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture(autouse=True)
def _fast_password_hashing(request):
    """Cheap hashing for test users (tests of the cluster layer run without pytest-django and skip this)."""
    if request.config.pluginmanager.hasplugin("django"):
        request.getfixturevalue("settings").PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def refusing_port():
    """A local TCP port where every connection is refused, for as long as the test runs: bound by a socket that never
    listens, so no other process (a test server of another worker) can take it meanwhile, as it could a port merely
    found free and closed again."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture(autouse=True)
def _fresh_rate_limit_counts(request):
    """Rate-limit counts (core.throttles) live in Django's cache: every test starts with none."""
    if request.config.pluginmanager.hasplugin("django"):
        from django.core.cache import cache

        cache.clear()


@pytest.fixture(autouse=True)
def _fresh_estimates(request):
    """The start-time estimates' replay in progress is the process's (jobs.cycle.estimates.REFRESHER, advanced by each
    job cycle): every test starts with none, and what one left frozen for the garbage collector is let go."""
    if not request.config.pluginmanager.hasplugin("django"):
        yield
        return
    import gc

    from jobs.cycle import estimates

    kept, estimates.REFRESHER = estimates.REFRESHER, estimates.Refresher()
    yield
    estimates.REFRESHER = kept
    gc.unfreeze()


@pytest.fixture(autouse=True)
def _fresh_recent_events(request):
    """The timeline events a process has read for its streams (jobs.eventstream.RECENT): every test starts with
    none read, as its database does."""
    if request.config.pluginmanager.hasplugin("django"):
        from jobs import eventstream

        eventstream.RECENT.forget()


#: Where the example names tests give webhooks resolve (core.egress): one public address, never connected to.
EXAMPLE_ADDRESS = "93.184.215.14"
EXAMPLE_DOMAINS = ("example.org", "example.com", "example.net", "slack.com")


@pytest.fixture(autouse=True)
def _example_names_resolve(request, monkeypatch):
    """Webhook URLs are checked against what their host resolves to, and tests have no DNS: the reserved example
    domains (RFC 2606) and hooks.slack.com resolve to one public address; every other name the real way."""
    if not request.config.pluginmanager.hasplugin("django"):
        return
    from core import egress

    real = egress.resolve

    def resolve(host: str, port: int):
        name = host.lower().rstrip(".")
        if any(name == domain or name.endswith(f".{domain}") for domain in EXAMPLE_DOMAINS):
            return [egress.ipaddress.ip_address(EXAMPLE_ADDRESS)]
        return real(host, port)

    monkeypatch.setattr(egress, "resolve", resolve)
