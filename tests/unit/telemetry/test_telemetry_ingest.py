"""The node agent's ingest endpoint: who may write what, and every way a batch can be wrong."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db.models import F

from accounts.models import APIToken
from core.models import AuditEvent
from gpus.models import GPU, Node
from telemetry.models import GpuSample, NodeAgentToken

URL = "/api/v1/telemetry/samples/"
GPU0 = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
GPU1 = "GPU-aaaaaaaa-d595-d1c7-d1d2-179bcfa61661"


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sample(ts: datetime, uuid: str = GPU0, **extra) -> dict:
    body = {"ts": stamp(ts), "gpu_uuid": uuid, "util_pct": 42.5, "mem_used_mb": 1000, "mem_total_mb": 40960,
            "power_w": 210.0, "temp_c": 55, "processes": [{"pid": 4242, "used_mb": 900}]}  # fmt: skip
    body.update(extra)
    return body


def batch(node: str, samples: list[dict], sent_at: datetime | None = None) -> dict:
    return {"node": node, "sent_at": stamp(sent_at or datetime.now(UTC)), "agent": "gpu-portal-agent/test",
            "samples": samples}  # fmt: skip


@pytest.fixture
def node_token(inventory):
    token, raw = NodeAgentToken.issue("gpu-h100-01")
    return raw


def post(api_client, raw: str, body: dict):
    return api_client.post(URL, body, format="json", HTTP_AUTHORIZATION=f"Bearer {raw}")


def test_a_valid_batch_is_stored_for_the_tokens_node_and_teaches_gpu_uuids(api_client, node_token):
    now = datetime.now(UTC)
    samples = [
        sample(now - timedelta(seconds=20), gpu_index=0),
        sample(now - timedelta(seconds=10), gpu_index=0, util_pct=None),  # NotSupported on the node: null
        sample(now - timedelta(seconds=10), uuid=GPU1, gpu_index=1, util_pct=0),
        sample(
            now - timedelta(seconds=10),
            uuid=GPU1,
            gpu_index=1,
            mig_uuid="MIG-11111111-2222-3333-4444-555555555555",
            gpu_instance_id=2,
            mig_profile="3g.40gb",
            util_pct=None,
        ),  # fmt: skip
    ]
    response = post(api_client, node_token, batch("gpu-h100-01", samples))
    assert response.status_code == 202, response.json()
    assert response.json() == {"accepted": 4, "lost": 0}
    rows = GpuSample.objects.order_by("ts", "gpu_uuid", F("gpu_instance_id").asc(nulls_first=True))
    assert {r.node_name for r in rows} == {"gpu-h100-01"}
    assert [r.util_pct for r in rows] == [42.5, None, 0.0, None]
    mig = rows.get(gpu_instance_id=2)
    assert (mig.mig_profile, round(mig.weight, 3)) == ("3g.40gb", round(3 / 7, 3))
    uuids = dict(GPU.objects.filter(node__name="gpu-h100-01", index__in=[0, 1]).values_list("index", "uuid"))
    assert uuids == {0: GPU0, 1: GPU1}
    assert NodeAgentToken.objects.get().last_used_at is not None


def test_a_token_cannot_write_another_nodes_data(api_client, node_token):
    response = post(api_client, node_token, batch("gpu-h100-02", [sample(datetime.now(UTC))]))
    assert response.status_code == 403
    assert "gpu-h100-01" in response.json()["detail"] and "gpu-h100-02" in response.json()["detail"]
    assert not GpuSample.objects.exists()


def test_unknown_revoked_and_user_tokens_are_refused(api_client, node_token, people):
    body = batch("gpu-h100-01", [sample(datetime.now(UTC))])
    assert post(api_client, "gpa_deadbeef_nope", body).status_code == 401
    _, user_raw = APIToken.issue(people["alice"], "pipeline")
    assert post(api_client, user_raw, body).status_code == 401
    assert api_client.post(URL, body, format="json").status_code in (401, 403)
    NodeAgentToken.objects.update(revoked_at=datetime.now(UTC))
    assert post(api_client, node_token, body).status_code == 401
    assert not GpuSample.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"util_pct": 150}, "samples[1].util_pct"),
        ({"util_pct": -1}, "samples[1].util_pct"),
        ({"mem_used_mb": 50000, "mem_total_mb": 40960}, "samples[1].mem_used_mb"),
        ({"power_w": 99999}, "samples[1].power_w"),
        ({"temp_c": 400}, "samples[1].temp_c"),
        ({"gpu_uuid": "not-a-uuid"}, "samples[1].gpu_uuid"),
        ({"ts": "yesterday"}, "samples[1].ts"),
        ({"mig_uuid": "MIG-11111111-2222-3333-4444-555555555555"}, "samples[1].gpu_instance_id"),
        ({"processes": [{"pid": -3}]}, "samples[1].processes[0].pid"),
    ],
)
def test_a_bad_sample_refuses_the_whole_batch_naming_it(api_client, node_token, change, field):
    now = datetime.now(UTC)
    bad = sample(now, uuid=GPU1)
    bad.update(change)
    response = post(api_client, node_token, batch("gpu-h100-01", [sample(now), bad]))
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not GpuSample.objects.exists()


def test_clock_skew_and_stale_or_future_samples_are_refused(api_client, node_token, settings):
    now = datetime.now(UTC)
    skewed = post(api_client, node_token, batch("gpu-h100-01", [sample(now)], sent_at=now + timedelta(minutes=20)))
    assert skewed.status_code == 400 and "NTP" in skewed.json()["sent_at"][0]
    old = now - timedelta(seconds=settings.PORTAL_TELEMETRY_MAX_AGE + 60)
    stale = post(api_client, node_token, batch("gpu-h100-01", [sample(old)]))
    assert stale.status_code == 400 and "samples[0].ts" in stale.json()
    ahead = post(api_client, node_token, batch("gpu-h100-01", [sample(now + timedelta(minutes=30))]))
    assert ahead.status_code == 400 and "samples[0].ts" in ahead.json()
    # An agent that buffered through an outage may send hour-old samples.
    buffered = post(api_client, node_token, batch("gpu-h100-01", [sample(now - timedelta(hours=1))]))
    assert buffered.status_code == 202
    assert GpuSample.objects.count() == 1


def test_batch_shape_errors(api_client, node_token, settings):
    now = datetime.now(UTC)
    assert post(api_client, node_token, {"node": "gpu-h100-01"}).status_code == 400
    empty = post(api_client, node_token, batch("gpu-h100-01", []))
    assert empty.status_code == 400 and "samples" in empty.json()
    twice = post(api_client, node_token, batch("gpu-h100-01", [sample(now), sample(now)]))
    assert twice.status_code == 400 and "samples[1]" in twice.json()
    settings.PORTAL_TELEMETRY_MAX_BATCH = 3
    big = [sample(now - timedelta(seconds=i)) for i in range(4)]
    too_many = post(api_client, node_token, batch("gpu-h100-01", big))
    assert too_many.status_code == 413 and "at most 3" in too_many.json()["detail"]
    assert not GpuSample.objects.exists()


def test_lost_gpus_are_counted_not_stored(api_client, node_token):
    now = datetime.now(UTC)
    body = batch("gpu-h100-01", [sample(now), sample(now, uuid=GPU1, lost=True, util_pct=None)])
    response = post(api_client, node_token, body)
    assert response.status_code == 202 and response.json() == {"accepted": 1, "lost": 1}


def test_issue_agent_token_command_prints_a_working_token_and_audits(api_client, inventory, capsys):
    call_command("issue_agent_token", "gpu-h100-02")
    raw = capsys.readouterr().out.strip()
    assert raw.startswith("gpa_")
    token = NodeAgentToken.objects.get(node_name="gpu-h100-02")
    assert token.key_hash != raw and raw not in token.key_hash  # stored hashed
    assert post(api_client, raw, batch("gpu-h100-02", [sample(datetime.now(UTC))])).status_code == 202
    assert AuditEvent.objects.filter(action="agent_token.issue").count() == 1
    call_command("issue_agent_token", "gpu-h100-02", "--revoke")
    assert post(api_client, raw, batch("gpu-h100-02", [sample(datetime.now(UTC))])).status_code == 401
    assert AuditEvent.objects.filter(action="agent_token.revoke").count() == 1
    with pytest.raises(Exception, match="No node"):
        call_command("issue_agent_token", "no-such-node")
    assert Node.objects.filter(name="no-such-node").count() == 0


def test_a_token_cannot_post_samples_for_another_nodes_gpus_or_relabel_its_own(api_client, node_token):
    """Audit finding 3: every sample belongs to the token's node; UUIDs are learnt only from that node's own GPUs
    and a UUID known elsewhere is never reassigned."""
    GPU.objects.filter(node__name="gpu-h100-02", index=0).update(uuid=GPU1)
    GPU.objects.filter(node__name="gpu-h100-01", index=0).update(uuid=GPU0)
    other = "GPU-bbbbbbbb-d595-d1c7-d1d2-179bcfa61662"
    now = datetime.now(UTC)
    forged = [
        sample(now, gpu_index=0),  # fine: the node's own GPU 0
        sample(now - timedelta(seconds=1), uuid=GPU1),  # another node's GPU
        sample(now - timedelta(seconds=2), uuid=GPU1, gpu_index=1),  # ... claimed as this node's GPU 1
        sample(now - timedelta(seconds=3), uuid=other, gpu_index=0),  # relabelling this node's GPU 0
        sample(now - timedelta(seconds=4), uuid=GPU0, gpu_index=2),  # this node's GPU 0 claimed as GPU 2
        sample(now - timedelta(seconds=5), uuid=other, gpu_index=40),  # no such GPU on this node
    ]
    response = post(api_client, node_token, batch("gpu-h100-01", forged))
    assert response.status_code == 400, response.json()
    errors = response.json()
    assert set(errors) == {f"samples[{i}].gpu_uuid" for i in (1, 2, 3, 4)} | {"samples[5].gpu_index"}
    assert "gpu-h100-02" in errors["samples[1].gpu_uuid"][0]
    assert GPU0 in errors["samples[3].gpu_uuid"][0]
    assert not GpuSample.objects.exists()
    uuids = dict(GPU.objects.filter(index=0, node__name__in=["gpu-h100-01", "gpu-h100-02"]).values_list(
        "node__name", "uuid"))  # fmt: skip
    assert uuids == {"gpu-h100-01": GPU0, "gpu-h100-02": GPU1}


def test_samples_under_a_uuid_another_node_learns_later_never_show_on_its_gpu(api_client, node_token, people):
    """A UUID not yet known anywhere is stored under the token's node only: the GPU view reads the node the UUID
    belongs to, so an agent cannot plant samples on another node's GPU before that node's agent reports it."""
    now = datetime.now(UTC)
    assert post(api_client, node_token, batch("gpu-h100-01", [sample(now, uuid=GPU1)])).status_code == 202
    GPU.objects.filter(node__name="gpu-h100-02", index=0).update(uuid=GPU1)
    api_client.force_authenticate(people["admin"])
    response = api_client.get("/api/v1/utilisation/", {"scope": "gpu", "gpu": GPU1, "range": "1h"})
    assert response.status_code == 200, response.json()
    assert not [p for p in response.json()["points"] if p.get("util") is not None]
