"""Issue 31, item 9: a backup of the database, restored into a fresh one and served with the same DJANGO_SECRET_KEY,
is the same portal: the same API tokens (a person's, a service account's, a lead's) authenticate and see the same
job, and a webhook delivery the restored portal sends verifies with the secret the receiver was given before.

The backup is what docs/operator-guide.md ("Backup and restore") tells operators to take. On PostgreSQL (CI):
``pg_dump --format=custom`` of the test database, ``createdb`` of a new database, ``pg_restore`` into it, all the
real client programs; on the embedded SQLite default, the sqlite3 online backup of the database file. Then a real
gunicorn serves the copy, and the sender (core.webhooks.send_due, what the delivery task runs) runs in a process of
its own on the copy, POSTing to a receiver in this test.

The same copy served under another key shows what the guide warns of: the tokens still work (only their SHA-256 is
stored, no key in it) but every receiver rejects the signatures, unless the old key is in
DJANGO_SECRET_KEY_FALLBACKS.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from accounts import service_accounts, tokens, webhook_ops
from accounts.choices import TokenScope
from gpus.models import ResourceClass
from jobs import actions
from tests.conftest import IN_CI
from tests.factories import member, submit_job
from tests.sim_objects import H100

from .conftest import REPO
from .processes import start_gunicorn, stop
from .test_webhooks_delivery import Receiver, documented_verify

pytestmark = pytest.mark.integration

ANOTHER_KEY = "a-different-secret-key-for-the-restore-test-" + "z" * 20

#: Run on the restored database in a process of its own: optionally queue a ping (as the page's button does),
#: then send the webhook's due deliveries, as the delivery task does; prints whether ``RAW_TOKEN`` authenticates.
SEND = """
import json, os, django
django.setup()
from django.db import transaction
from accounts.models import APIToken
from core import webhooks
from core.models import Webhook
webhook = Webhook.objects.get(pk=int(os.environ["WEBHOOK_ID"]))
if os.environ.get("PING"):
    with transaction.atomic():
        webhooks.ping(webhook, None)
webhooks.send_due(webhook.pk)
print(json.dumps({"token_valid": APIToken.find(os.environ["RAW_TOKEN"]) is not None}))
"""


def _required(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        reason = f"{program} is not installed (Debian's postgresql-client package)"
        if IN_CI:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def _postgres_restore(tmp_path: Path):
    """pg_dump the test database, createdb a fresh one, pg_restore the dump into it; returns its URL and a cleanup."""
    db = settings.DATABASES["default"]
    host, port, user = db.get("HOST") or "127.0.0.1", str(db.get("PORT") or 5432), db.get("USER") or "postgres"
    env = {**os.environ, "PGPASSWORD": db.get("PASSWORD") or ""}
    connection = ["--host", host, "--port", port, "--username", user]
    dump = tmp_path / "portal.dump"
    # The restored copy is named after the test database (gpu_portal_backup_restored_… for test_gpu_portal_backup).
    name = f"{db['NAME'].removeprefix('test_')}_restored_{uuid.uuid4().hex[:8]}"

    def run(*command: str) -> None:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{' '.join(command[:2])} failed:\n{done.stderr[-3000:]}"

    run(_required("pg_dump"), *connection, "--format=custom", "--file", str(dump), db["NAME"])
    run(_required("createdb"), *connection, "--template=template0", name)

    def drop() -> None:
        run(_required("dropdb"), *connection, "--if-exists", "--force", name)

    try:
        run(_required("pg_restore"), *connection, "--no-owner", "--exit-on-error", "--dbname", name, str(dump))
    except BaseException:
        drop()
        raise
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{host}:{port}/{name}", drop


def _sqlite_restore(tmp_path: Path):
    """The embedded default: sqlite3's online backup of the database file, into a new file."""
    copy = tmp_path / "restored.sqlite3"
    source, target = sqlite3.connect(settings.DATABASES["default"]["NAME"]), sqlite3.connect(copy)
    with source, target:
        source.backup(target)
    source.close()
    target.close()
    return f"sqlite:///{copy}", lambda: None


@pytest.fixture
def portal_with_data(transactional_db, inventory, people, settings):
    """A team (vision) with a lead (alice), a member (carol) and a service account, a token for each, carol's job and
    a webhook pointing at a receiver in this test, all committed; the secrets as handed out."""
    settings.PORTAL_WEBHOOK_ALLOW_LOCAL = True
    vision, alice = people["vision"], people["alice"]
    actions.set_quota(people["admin"], vision, ResourceClass.objects.get(key=H100), 2, 2)
    carol = member(vision)
    robot = service_accounts.create(alice, vision, "nightly")
    job = submit_job(carol, name="resnet-restore")
    with Receiver([]) as receiver:
        webhook, webhook_secret = webhook_ops.create(
            alice, vision, {"name": "ci", "url": receiver.url, "events": ["job.*"]}
        )
        yield {
            "job": job,
            "webhook": webhook,
            "webhook_secret": webhook_secret,
            "receiver": receiver,
            "carol": tokens.issue(carol, carol, "laptop", TokenScope.MANAGE, 30).secret,
            "robot": tokens.issue(alice, robot.user, "pipeline", TokenScope.SUBMIT, 30, team=vision).secret,
            "alice": tokens.issue(alice, alice, "admin tasks", TokenScope.MANAGE, 30).secret,
        }


@pytest.fixture
def restored(portal_with_data, tmp_path):
    """The database dumped and restored into a fresh one: its DATABASE_URL. Dropped afterwards."""
    if "postgresql" in settings.DATABASES["default"]["ENGINE"]:
        url, drop = _postgres_restore(tmp_path)
    else:
        url, drop = _sqlite_restore(tmp_path)
    yield url
    drop()


def _environment(url: str, data_dir: Path, secret_key: str, fallbacks: str = "") -> dict[str, str]:
    """A portal process on the restored copy: its own data directory and file-system broker (what it queues stays
    with it), the given key, and webhooks allowed to reach this test's receiver on 127.0.0.1."""
    data_dir.mkdir(exist_ok=True)
    return {
        **{k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY_FALLBACKS", "CELERY_BROKER_URL")},
        "DATABASE_URL": url,
        "DJANGO_SECRET_KEY": secret_key,
        "DJANGO_SECRET_KEY_FALLBACKS": fallbacks,
        "PORTAL_DATA_DIR": str(data_dir),
        "CELERY_BROKER_URL": "filesystem://",
        "PORTAL_WEBHOOK_ALLOW_LOCAL": "true",
        "PYTHONUNBUFFERED": "1",
    }


def _api(base: str, token: str, path: str, method: str = "GET") -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    request = urllib.request.Request(f"{base}/api/v1{path}", method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _send(env: dict[str, str], webhook_id: int, raw_token: str, *, ping: bool) -> dict:
    """Run the sender on the restored copy; returns what it printed."""
    extra = {"WEBHOOK_ID": str(webhook_id), "RAW_TOKEN": raw_token, "PING": "1" if ping else ""}
    done = subprocess.run([sys.executable, "-c", SEND], cwd=REPO, env=env | extra, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _last_delivery(receiver: Receiver, count: int) -> tuple[str, bytes]:
    assert len(receiver.requests) == count, f"the receiver got {len(receiver.requests)} requests, not {count}"
    request = receiver.requests[-1]
    return request["headers"]["X-Portal-Signature"], request["body"]


def test_a_restored_database_serves_the_same_tokens_job_and_webhook_secret(portal_with_data, restored, tmp_path):
    data, verify = portal_with_data, documented_verify()
    env = _environment(restored, tmp_path / "restored-portal", settings.SECRET_KEY)
    server, base = start_gunicorn(env, tmp_path / "gunicorn.log", workers=1, threads=4)
    try:
        status, listed = _api(base, data["carol"], "/jobs/")
        assert status == 200, listed
        rows = listed["results"] if isinstance(listed, dict) and "results" in listed else listed
        assert [row["name"] for row in rows] == ["resnet-restore"], "the member's token sees her job"
        status, job = _api(base, data["robot"], f"/jobs/{data['job'].pk}/")
        assert status == 200 and job["name"] == "resnet-restore", "the service account's token sees it too"
        status, _ = _api(base, "gpp_00000000_not-a-token-this-portal-made", "/jobs/")
        assert status == 401, "and the copy does check tokens"
        status, ping = _api(base, data["alice"], f"/webhooks/{data['webhook'].pk}/ping/", method="POST")
        assert status == 202, ping
    finally:
        stop(server)
    sent = _send(env, data["webhook"].pk, data["carol"], ping=False)  # the ping queued through the API
    assert sent["token_valid"]
    header, body = _last_delivery(data["receiver"], 1)
    assert json.loads(body)["type"] == "ping"
    assert verify(data["webhook_secret"], header, body), "the receiver's secret verifies the restored portal's ping"


def test_restored_under_another_key_the_receivers_reject_it_unless_the_old_key_is_a_fallback(
    portal_with_data, restored, tmp_path
):
    data, verify, old_key = portal_with_data, documented_verify(), settings.SECRET_KEY
    rotated = _environment(restored, tmp_path / "rotated", ANOTHER_KEY)
    sent = _send(rotated, data["webhook"].pk, data["carol"], ping=True)
    assert sent["token_valid"], "API tokens do not depend on the key"
    header, body = _last_delivery(data["receiver"], 1)
    assert not verify(data["webhook_secret"], header, body), "a new key alone breaks every receiver"
    with_fallback = _environment(restored, tmp_path / "rotated", ANOTHER_KEY, fallbacks=old_key)
    _send(with_fallback, data["webhook"].pk, data["carol"], ping=True)
    header, body = _last_delivery(data["receiver"], 2)
    assert verify(data["webhook_secret"], header, body), "with the old key as a fallback the receiver verifies"
