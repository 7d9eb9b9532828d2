"""The agent and the portal agree: the agent's own Sender, reading the real captures through the fake NVML,
posts to the real ingest view (through Django's test client instead of a socket); the portal accepts the
batches, stores them against the token's node and learns the GPU UUIDs; a wrong token is dropped, not retried."""

from __future__ import annotations

import time

from django.test import Client

from agent.nvml import NvmlCollector
from agent.sender import SampleBuffer, Sender, rfc3339
from gpus.models import GPU
from telemetry.models import GpuSample, NodeAgentToken
from tests.realdata import real_path
from tests.unit.agent.fake_nvml import FakeNvml


def via_django(calls: list):
    client = Client()

    def post(url, body, headers, timeout):
        from agent.sender import PostResult

        calls.append((url, headers))
        path = url.split("://", 1)[1].split("/", 1)[1]
        response = client.generic(
            "POST", "/" + path, body, content_type=headers["Content-Type"],
            HTTP_AUTHORIZATION=headers["Authorization"],
        )  # fmt: skip
        return PostResult(response.status_code, response.content.decode())

    return post


def run_agent_once(prefix: str, node: str, raw_token: str, calls: list) -> Sender:
    collector = NvmlCollector(FakeNvml.from_xml(real_path(prefix)))
    collector.start()
    buffer = SampleBuffer()
    now = time.time()
    buffer.extend(r.to_sample() for r in collector.collect(rfc3339(now)))
    sender = Sender("http://portal.test", node, lambda: raw_token, buffer, post=via_django(calls))
    sender.flush(now)
    return sender


def test_the_portal_accepts_what_the_agent_sends_for_8_h100s(inventory):
    _, raw = NodeAgentToken.issue("gpu-h100-03")
    calls: list = []
    sender = run_agent_once("04", "gpu-h100-03", raw, calls)
    assert calls[0][0] == "http://portal.test/api/v1/telemetry/samples/"
    assert sender.delivered == 8 and len(sender.buffer) == 0
    stored = list(GpuSample.objects.filter(node_name="gpu-h100-03").order_by("gpu_index"))
    assert len(stored) == 8 and all(s.util_pct is not None for s in stored)
    learned = dict(GPU.objects.filter(node__name="gpu-h100-03").values_list("index", "uuid"))
    assert learned == {s.gpu_index: s.gpu_uuid for s in stored}


def test_the_a100_capture_and_a_foreign_token(inventory):
    _, raw = NodeAgentToken.issue("gpu-a100-40g-01")
    calls: list = []
    sender = run_agent_once("03", "gpu-a100-40g-01", raw, calls)
    assert sender.delivered >= 1
    assert GpuSample.objects.filter(node_name="gpu-a100-40g-01").count() == sender.delivered
    # A token of another node: 403, which the agent drops instead of retrying forever.
    _, other = NodeAgentToken.issue("gpu-t4-01")
    sender = run_agent_once("03", "gpu-a100-40g-01", other, calls)
    assert sender.delivered == 0 and sender.rejected >= 1 and len(sender.buffer) == 0


def test_the_agent_s_energy_counter_reaches_the_portal_and_counts_the_joules_between_readings(inventory):
    _, raw = NodeAgentToken.issue("gpu-h100-03")
    fake = FakeNvml.from_xml(real_path("04"))
    collector = NvmlCollector(fake)
    collector.start()
    buffer = SampleBuffer()
    now = time.time()
    for tick, counter in ((0, 1_000_000), (30, 1_000_000 + 30 * 700_000)):  # 700 W for 30 s
        for gpu in fake.gpus:
            gpu.energy_mj = counter
        buffer.extend(r.to_sample() for r in collector.collect(rfc3339(now - 60 + tick)))
    sender = Sender("http://portal.test", "gpu-h100-03", lambda: raw, buffer, post=via_django([]))
    sender.flush(now)
    assert sender.delivered == 16
    latest = GpuSample.objects.filter(node_name="gpu-h100-03").order_by("-ts", "gpu_index")[:8]
    assert [s.energy_mj for s in latest] == [1_000_000 + 30 * 700_000] * 8
    assert [round(s.energy_j) for s in latest] == [21_000] * 8
