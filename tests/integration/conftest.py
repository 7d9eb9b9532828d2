"""Integration tier: a real Celery worker process, the real broker (Redis in CI), the real database
(PostgreSQL in CI). Outside CI they run on the embedded default (SQLite file + file-system broker)."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

REPO = Path(__file__).resolve().parents[2]


def worker_database_url() -> str:
    """DATABASE_URL that points a subprocess at the test database pytest-django created."""
    db = settings.DATABASES["default"]
    if "sqlite" in db["ENGINE"]:
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


@pytest.fixture
def celery_worker_process(transactional_db, tmp_path):
    """Start `celery -A portal worker` as a separate process on a queue of its own; yields (queue, env)."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "PORTAL_DATA_DIR": str(settings.DATA_DIR),
        "PORTAL_SIM_STATE": str(tmp_path / "simcluster.json"),
        "PYTHONUNBUFFERED": "1",
    }
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool", "solo", "-Q", queue,
             "--loglevel", "info", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while "ready." not in log_path.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"The Celery worker did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.2)
    try:
        yield {"queue": queue, "env": env, "log": log_path, "sim_state": env["PORTAL_SIM_STATE"]}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def private_broker(transactional_db, tmp_path):
    """A redis-server of the test's own on a spare port, and the environment that points a worker and beat at it
    (and at the test database and a simulated cluster under tmp_path), for the fault tests that stop and restart
    processes: no other test's worker can take their tasks."""
    from .processes import free_port, start_redis, stop

    port = free_port()
    redis = start_redis(port, tmp_path)
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{port}/0",
        "PORTAL_DATA_DIR": str(tmp_path),
        "PORTAL_SIM_STATE": str(tmp_path / "simcluster.json"),
        "PORTAL_JOB_CYCLE_INTERVAL": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    try:
        yield {"env": env, "port": port, "redis": redis, "dir": tmp_path}
    finally:
        stop(redis)
