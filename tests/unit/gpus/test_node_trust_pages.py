"""The node page's scheduling line (issue 16, node trust): a NotReady node, or one placement keeps work off, never
reads "accepts new work"."""

from __future__ import annotations

import pytest

from gpus.models import Node
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def scheduling_line(client, name: str) -> str:
    page = client.get(f"/nodes/{name}/").content.decode()
    start = page.index("<dt>Scheduling</dt>")
    return page[start : page.index("</dd>", start)]


def test_a_not_ready_or_blocked_node_does_not_say_it_accepts_new_work(client, people, inventory):
    client.login(username="admin", password=PASSWORD)
    assert "accepts new work" in scheduling_line(client, "gpu-h100-01")
    Node.objects.filter(name="gpu-h100-01").update(ready=False, blocked_reason="the node is not Ready")
    line = scheduling_line(client, "gpu-h100-01")
    assert "accepts new work" not in line and "not Ready" in line
    Node.objects.filter(name="gpu-h100-02").update(blocked_reason="its MIG configuration failed (x=failed)")
    line = scheduling_line(client, "gpu-h100-02")
    assert "accepts new work" not in line and "MIG configuration failed" in line
