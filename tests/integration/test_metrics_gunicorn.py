"""/metrics under a real gunicorn with two workers, as deployed: gunicorn.conf.py creates the multiprocess directory
and marks dead workers, and the counters every worker wrote are summed whichever worker answers the scrape, even
after every worker that did the counting was killed and replaced.

The count comes from real requests: telemetry batches POSTed by a node agent's token.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.sim import SimulatedCluster
from gpus.models import Node
from gpus.reconcile import sync_inventory
from telemetry.models import NodeAgentToken
from tests.sim_objects import DEMO_SCENARIO

from .conftest import worker_database_url
from .processes import start_gunicorn, stop

pytestmark = pytest.mark.integration

METRICS_TOKEN = "gunicorn-test-metrics-token"


def children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(child) for child in (task / "children").read_text().split()}
    return found


def request(url: str, *, token: str, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    if data:
        headers["Content-Type"] = "application/json"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def ingested(base: str) -> float:
    status, text = request(f"{base}/metrics", token=METRICS_TOKEN)
    assert status == 200, text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpuportal_telemetry_samples_ingested_total" and sample.labels == {"source": "agent"}:
                return sample.value
    return 0.0


def test_counters_are_summed_across_gunicorn_workers_and_outlive_them(transactional_db, tmp_path):
    sync_inventory(SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO))
    node = Node.objects.filter(gpu_count__gt=0).first()
    _, agent_token = NodeAgentToken.issue(node.name)
    multiproc = tmp_path / "prometheus"  # absent: gunicorn.conf.py's on_starting must create it
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
        "PORTAL_METRICS_TOKEN": METRICS_TOKEN,
        "PORTAL_METRICS_ALLOW_LOCAL": "false",
        "PORTAL_DATA_DIR": str(tmp_path),
    }
    log = tmp_path / "gunicorn.log"
    server, base = start_gunicorn(env, log, workers=2, threads=2, ready=lambda s: len(children(s.pid)) == 2)
    try:
        assert multiproc.is_dir()
        assert request(f"{base}/metrics", token="wrong")[0] == 403

        now = datetime.now(UTC)
        for batch in range(10):
            at = (now - timedelta(seconds=batch)).isoformat()  # one GPU's UUID stays its own; each batch a moment
            samples = [
                {"ts": at, "gpu_uuid": f"GPU-{gpu:08d}-aaaa-bbbb", "gpu_index": gpu, "util_pct": 50.0}
                for gpu in range(3)
            ]
            status, text = request(
                f"{base}/api/v1/telemetry/samples/",
                token=agent_token,
                body={"node": node.name, "sent_at": now.isoformat(), "samples": samples},
            )
            assert status == 202, text
        assert {ingested(base) for _ in range(6)} == {30.0}

        # Replace every worker that counted: a SIGKILLed worker's counts stay (child_exit marks it dead).
        for victim in sorted(children(server.pid)):
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while victim in children(server.pid) or len(children(server.pid)) < 2:
                if time.monotonic() > deadline:
                    pytest.fail(f"gunicorn did not replace worker {victim}:\n{log.read_text()[-3000:]}")
                time.sleep(0.1)
        assert {ingested(base) for _ in range(6)} == {30.0}
    finally:
        stop(server)
