"""The agent's loop and command line, driven by a fake clock: hours of outages in milliseconds, no timing asserts."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent import AGENT_NAME
from agent.cli import main
from agent.nvml import NvmlCollector
from agent.runner import AgentRunner
from agent.sender import Backoff, PostResult, SampleBuffer, Sender
from tests.realdata import real_path
from tests.unit.agent.fake_nvml import FakeNvml
from tests.unit.agent.fake_portal import FakePortal, SimpleRng

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 11, 23, 9, 0, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, now: float = T0):
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


class TimedPortal(FakePortal):
    def __init__(self, clock: Clock, *answers: PostResult):
        super().__init__(*answers)
        self.clock = clock
        self.times: list[float] = []

    def __call__(self, url, body, headers, timeout):
        self.times.append(self.clock.now - T0)
        return super().__call__(url, body, headers, timeout)


def make_runner(fake: FakeNvml, portal, clock: Clock, capacity=10_000, interval=10.0, flush=30.0) -> AgentRunner:
    sender = Sender(
        "http://portal.test",
        "gpu-node-7",
        lambda: "tok",
        SampleBuffer(capacity),
        post=portal,
        backoff=Backoff(base=5, cap=300, rng=SimpleRng(1.0)),
    )
    return AgentRunner(
        NvmlCollector(fake),
        sender,
        interval=interval,
        flush=flush,
        clock=clock,
        sleep=clock.sleep,
        init_backoff=Backoff(base=10, cap=300, rng=SimpleRng(1.0)),
    )


def run_until(runner: AgentRunner, clock: Clock, seconds: float) -> None:
    runner.run(should_stop=lambda: clock.now - T0 > seconds)


def h100() -> FakeNvml:
    return FakeNvml.from_xml(real_path("04"))


def test_samples_every_interval_and_posts_every_flush():
    clock = Clock()
    portal = TimedPortal(clock)
    runner = make_runner(h100(), portal, clock)
    run_until(runner, clock, 105)
    # Ticks at 0, 10 … 100 (8 GPUs each); POSTs at 30, 60, 90, and the last flush when the loop stops at 110.
    assert portal.times == [30, 60, 90, 110]
    assert [len(b["samples"]) for b in portal.bodies] == [32, 24, 24, 8]
    stamps = sorted({s["ts"] for b in portal.bodies for s in b["samples"]})
    assert stamps[:2] == ["2026-11-23T09:00:00Z", "2026-11-23T09:00:10Z"] and len(stamps) == 11
    assert all(b["node"] == "gpu-node-7" and b["agent"] == AGENT_NAME for b in portal.bodies)
    assert runner.collector.ready is False  # nvmlShutdown on the way out
    assert max(clock.sleeps) <= 10


def test_driver_not_loaded_retries_init_with_backoff_then_recovers(caplog):
    clock = Clock()
    fake = h100()
    fake.init_errors = [fake.NVML_ERROR_DRIVER_NOT_LOADED] * 3
    init_times = []
    original = fake.nvmlInit

    def timed_init():
        init_times.append(clock.now - T0)
        original()

    fake.nvmlInit = timed_init
    portal = TimedPortal(clock)
    runner = make_runner(fake, portal, clock)
    with caplog.at_level(logging.INFO):
        run_until(runner, clock, 100)
    assert init_times == [0, 10, 30, 70]  # 10 s, 20 s, 40 s: no loop storm
    assert caplog.text.count("NVML could not start") == 3
    assert "kernel driver is not loaded" in caplog.text
    assert "NVML started after 3 failed attempts" in caplog.text
    first = min(s["ts"] for b in portal.bodies for s in b["samples"])
    assert first == "2026-11-23T09:01:10Z"  # the first sample is taken as soon as NVML starts


def test_missing_library_is_retried_at_most_every_five_minutes():
    clock = Clock()
    fake = h100()
    fake.init_errors = [fake.NVML_ERROR_LIBRARY_NOT_FOUND] * 100
    init_times = []
    original = fake.nvmlInit

    def timed_init():
        init_times.append(clock.now - T0)
        original()

    fake.nvmlInit = timed_init
    runner = make_runner(fake, TimedPortal(clock), clock)
    run_until(runner, clock, 3600)
    assert init_times == [0, 10, 30, 70, 150, 310, *range(610, 3600, 300)]
    assert runner.collector.ready is False


def test_portal_outage_keeps_the_newest_samples_and_counts_the_dropped(caplog):
    clock = Clock()
    fake = FakeNvml.from_xml(real_path("03"))  # one GPU: one sample per tick
    portal = TimedPortal(clock, *[PostResult(503)] * 6)
    runner = make_runner(fake, portal, clock, capacity=20)
    with caplog.at_level(logging.WARNING):
        run_until(runner, clock, 400)
    # 503 at 30, retried after 5, 10, 20, 40, 80, 160 s, not at the next flush tick; delivered at 345.
    assert portal.times[:8] == [30, 35, 45, 65, 105, 185, 345, 375]
    assert [len(b["samples"]) for b in portal.bodies[6:8]] == [20, 3]
    # By 345, 35 ticks (0 … 340) met a buffer of 20: the 15 oldest were dropped, the newest 20 delivered.
    assert runner.buffer.dropped == 15
    assert portal.bodies[6]["samples"][0]["ts"] == "2026-11-23T09:02:30Z"
    delivered = [s["ts"] for b in portal.bodies[6:] for s in b["samples"]]
    assert len(delivered) == len(set(delivered)) == 41 - 15
    warnings = [r.getMessage() for r in caplog.records if "buffer is full" in r.getMessage()]
    assert 1 <= len(warnings) < 15  # rate-limited, yet every drop is counted
    assert "15 since the agent started" in warnings[-1]
    assert "retrying in 5 s" in caplog.text


def test_nvml_lost_mid_run_is_restarted():
    clock = Clock()
    fake = h100()
    portal = TimedPortal(clock)
    runner = make_runner(fake, portal, clock)

    def driver_upgrade_at_15_s() -> bool:
        if clock.now - T0 >= 15 and fake.init_calls == 1:
            fake.initialised = 0  # the driver was unloaded: every call now says Uninitialized
            fake.init_errors = [fake.NVML_ERROR_DRIVER_NOT_LOADED]  # and it is not back at the first retry
            fake.init_calls += 1
        return clock.now - T0 > 100

    runner.run(should_stop=driver_upgrade_at_15_s)
    ticks = sorted({s["ts"][11:19] for b in portal.bodies for s in b["samples"]})
    # 0 and 10 before; 20 fails and schedules init at 30, which fails (driver loading), then 50 succeeds.
    assert ticks[:4] == ["09:00:00", "09:00:10", "09:00:50", "09:01:00"]


def test_lost_gpu_keeps_being_reported_lost():
    clock = Clock()
    fake = h100()
    fake.lose(5)
    portal = TimedPortal(clock)
    run_until(make_runner(fake, portal, clock), clock, 25)
    lost = [s for b in portal.bodies for s in b["samples"] if s["lost"]]
    assert len(lost) == 3 and {s["gpu_uuid"] for s in lost} == {"GPU-00000005-0000-0000-0000-000000000005"}


# Command line ------------------------------------------------------------------------------------------------
@pytest.fixture
def env(monkeypatch):
    for name in ("PORTAL_URL", "PORTAL_AGENT_TOKEN", "PORTAL_AGENT_TOKEN_FILE", "NODE_NAME", "PORTAL_AGENT_INTERVAL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_once_dry_run_prints_one_batch_as_json(env):
    env.setenv("NODE_NAME", "dgx-h100-03")
    fake = h100()
    fake.carve(0, [("3g.40gb", 0), ("3g.40gb", 4)])
    out = io.StringIO()
    assert main(["--once", "--dry-run"], nvml=fake, stdout=out, clock=lambda: T0) == 0
    body = json.loads(out.getvalue())
    assert set(body) == {"node", "sent_at", "agent", "samples"}
    assert body["node"] == "dgx-h100-03" and body["sent_at"] == "2026-11-23T09:00:00Z"
    assert len(body["samples"]) == 8 + 2
    assert [s["mig_profile"] for s in body["samples"][:3]] == [None, "3g.40gb", "3g.40gb"]
    assert set(body["samples"][0]) == {
        "ts", "gpu_uuid", "gpu_index", "mig_uuid", "gpu_instance_id", "mig_profile", "util_pct", "mem_used_mb",
        "mem_total_mb", "power_w", "energy_mj", "temp_c", "lost", "processes",
    }  # fmt: skip
    assert fake.initialised == 0  # shut down again


def test_once_dry_run_inventory(env):
    fake = h100()
    fake.carve(1, [("1g.10gb", 6)])
    out = io.StringIO()
    assert main(["--once", "--dry-run", "--inventory", "--node", "n"], nvml=fake, stdout=out) == 0
    devices = json.loads(out.getvalue())
    assert devices[0]["pci_bus_id"] == "00000000:53:00.0" and devices[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert devices[2]["placement"] == {"start": 6, "size": 1} and devices[2]["mig_profile"] == "1g.10gb"


def test_once_sends_and_exits_by_what_the_portal_said(env, tmp_path):
    token = tmp_path / "token"
    token.write_text("node-token-abc\n")
    env.setenv("PORTAL_URL", "https://portal.example.com")
    accepted, refused = FakePortal(), FakePortal(PostResult(401, '{"detail": "Invalid token."}'))
    args = ["--once", "--token-file", str(token), "--node", "n1"]
    assert main(args, nvml=h100(), post=accepted) == 0
    assert accepted.headers[0]["Authorization"] == "Bearer node-token-abc"
    assert len(accepted.bodies[0]["samples"]) == 8
    assert main(args, nvml=h100(), post=refused) == 1


def test_configuration_errors_are_sentences(env, caplog):
    with caplog.at_level(logging.ERROR):
        assert main(["--once"], nvml=h100()) == 2
    assert "Set PORTAL_URL" in caplog.text and "node token is missing" in caplog.text
    env.setenv("PORTAL_URL", "portal.example.com")
    env.setenv("PORTAL_AGENT_TOKEN", "t")
    assert main(["--once"], nvml=h100()) == 2
    assert "must start with http" in caplog.text


def test_environment_sets_the_options(env):
    env.setenv("PORTAL_AGENT_INTERVAL", "5")
    env.setenv("PORTAL_AGENT_FLUSH", "60")
    env.setenv("PORTAL_AGENT_BUFFER_SIZE", "500")
    env.setenv("NODE_NAME", "from-downward-api")
    from agent.cli import build_parser

    args = build_parser().parse_args([])
    assert (args.interval, args.flush, args.buffer_size, args.node) == (5.0, 60.0, 500, "from-downward-api")


def test_init_failure_with_once_exits_with_the_reason(env, caplog):
    fake = h100()
    fake.init_errors = [fake.NVML_ERROR_LIBRARY_NOT_FOUND]
    with caplog.at_level(logging.ERROR):
        assert main(["--once", "--dry-run"], nvml=fake, stdout=io.StringIO()) == 3
    assert "libnvidia-ml.so.1" in caplog.text


def test_module_runs_with_the_real_pynvml():
    """`python -m agent`: --help works, and --once --dry-run either reads this machine's GPUs or says why not."""
    help_text = subprocess.run(
        [sys.executable, "-m", "agent", "--help"], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout
    assert "--token-file" in help_text and "PORTAL_AGENT_INTERVAL" in help_text
    run = subprocess.run(
        [sys.executable, "-m", "agent", "--once", "--dry-run", "--node", "here"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    if run.returncode == 0:  # a GPU machine
        body = json.loads(run.stdout)
        assert body["node"] == "here" and body["samples"][0]["gpu_uuid"].startswith("GPU-")
    else:
        assert run.returncode == 3, run.stderr
        assert "NVML could not start" in run.stderr and run.stdout == ""


def test_a_node_where_nvml_sees_no_gpu_says_so(env, caplog):
    out = io.StringIO()
    with caplog.at_level(logging.WARNING):
        assert main(["--once", "--dry-run", "--node", "n"], nvml=FakeNvml([]), stdout=out) == 0
    assert json.loads(out.getvalue())["samples"] == []
    assert "NVML started but sees no GPU" in caplog.text


def test_an_unexpected_exception_costs_one_tick_not_the_agent(caplog):
    clock = Clock()
    fake = h100()
    portal = TimedPortal(clock)
    runner = make_runner(fake, portal, clock)
    original = runner.collector.collect
    calls = []

    def flaky(ts):
        calls.append(ts)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return original(ts)

    runner.collector.collect = flaky
    with caplog.at_level(logging.ERROR):
        run_until(runner, clock, 25)
    ticks = sorted({s["ts"][11:19] for b in portal.bodies for s in b["samples"]})
    assert ticks == ["09:00:00", "09:00:20"] and len(calls) == 3
    assert "the next tick tries again" in caplog.text


def test_a_wall_clock_step_backwards_does_not_stall_sampling():
    steady = Clock()
    wall = {"offset": 0.0}
    portal = FakePortal()
    fake = FakeNvml.from_xml(real_path("03"))
    sender = Sender("http://portal.test", "n", lambda: "t", SampleBuffer(), post=portal)
    runner = AgentRunner(
        NvmlCollector(fake),
        sender,
        clock=lambda: steady.now + wall["offset"],
        monotonic=steady,
        sleep=steady.sleep,
    )

    def ntp_steps_back_an_hour_at_25_s() -> bool:
        if steady.now - T0 >= 25:
            wall["offset"] = -3600.0
        return steady.now - T0 > 65

    runner.run(should_stop=ntp_steps_back_an_hour_at_25_s)
    stamps = [s["ts"][11:19] for b in portal.bodies for s in b["samples"]]
    # Still one sample every 10 s; after the step the timestamps are an hour earlier, as the node's clock says.
    assert stamps == ["09:00:00", "09:00:10", "09:00:20", "08:00:30", "08:00:40", "08:00:50", "08:01:00"]


AGENT_PROCESS = """
import sys
from agent.cli import main
from tests.realdata import real_path
from tests.unit.agent.fake_nvml import FakeNvml
sys.exit(main(sys.argv[1:], nvml=FakeNvml.from_xml(real_path("04"))))
"""


def test_agent_process_posts_to_a_real_server_and_stops_cleanly_on_sigterm(tmp_path, server):
    """The long-running agent as a process: real sockets, real signals. It waits on events, never on durations."""
    import os
    import signal
    import time

    token = tmp_path / "gpu-node-7"
    token.write_text("per-node-token")
    env = {**os.environ, "PORTAL_URL": f"http://127.0.0.1:{server.server_address[1]}", "NODE_NAME": "gpu-node-7"}
    args = ["--token-file", str(token), "--interval", "0.2", "--flush", "0.5", "--log-level", "DEBUG"]
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT_PROCESS, *args], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not server.requests and time.monotonic() < deadline and agent.poll() is None:
            time.sleep(0.05)
        assert server.requests, "the agent never posted"
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=120)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, stderr
    assert "Signal 15: sending what is buffered and stopping." in stderr
    for method, path, headers, body in server.requests:
        assert (method, path, headers["Authorization"]) == (
            "POST",
            "/api/v1/telemetry/samples/",
            "Bearer per-node-token",
        )
        assert body["node"] == "gpu-node-7" and len(body["samples"]) % 8 == 0
    uuids = {s["gpu_uuid"] for _, _, _, body in server.requests for s in body["samples"]}
    assert uuids == {f"GPU-0000000{i}-0000-0000-0000-00000000000{i}" for i in range(8)}
