"""The simulated cluster's log follow: lines come as the simulated process writes them, and the stream ends
when the container does, when the pod goes, or when the follower's time is up (as ``kubectl logs -f``)."""

from __future__ import annotations

import pytest

from cluster.base import ClusterBackend, ClusterError, NotFound
from cluster.sim import DURATION_ANNOTATION, EXIT_CODE_ANNOTATION, SimulatedCluster
from tests.sim_objects import SMALL, job, pod_of


@pytest.fixture
def small(clock) -> SimulatedCluster:
    cluster = SimulatedCluster(None, scenario=SMALL, clock=clock)
    cluster.watch_poll_interval = 0.0
    return cluster


def started(cluster, clock, name: str, **annotations) -> str:
    cluster.create_workload(job(name, annotations=annotations))
    clock.advance(5)
    return pod_of(cluster, name)["metadata"]["name"]


def test_the_simulated_cluster_offers_the_follow_method_of_the_protocol(small):
    assert isinstance(small, ClusterBackend)
    assert callable(small.stream_pod_log)


def test_following_yields_each_line_as_it_is_written_and_ends_with_the_container(small, clock):
    pod = started(small, clock, "follow", **{DURATION_ANNOTATION: "60"})
    seen: list[str] = []
    for line in small.stream_pod_log("team-a", pod, follow=True, timeout_seconds=30):
        seen.append(line)
        clock.advance(10)  # the process runs on while the follower reads
    assert all(line.endswith("\n") for line in seen)
    # Every line arrived once, in order, and the stream stopped by itself when the container finished.
    assert "".join(seen) == small.pod_logs("team-a", pod, tail_lines=10_000)
    assert "finished after" in seen[-1]
    assert sum(" step " in line for line in seen) == 6


def test_a_follow_starts_with_the_tail_asked_for(small, clock):
    pod = started(small, clock, "tail", **{DURATION_ANNOTATION: "600"})
    clock.advance(100)
    whole = small.pod_logs("team-a", pod, tail_lines=10_000).splitlines(keepends=True)
    first = list(small.stream_pod_log("team-a", pod, follow=True, tail_lines=3, timeout_seconds=0))
    assert first == whole[-3:]


def test_a_follow_ends_when_its_time_is_up_even_while_the_container_runs(small, clock):
    pod = started(small, clock, "slow", **{DURATION_ANNOTATION: "3600"})
    lines = list(small.stream_pod_log("team-a", pod, follow=True, timeout_seconds=0.05))
    assert lines and "starting" in lines[0]
    assert pod_of(small, "slow")["status"]["phase"] == "Running"


def test_a_follow_ends_when_the_pod_is_deleted(small, clock):
    pod = started(small, clock, "gone", **{DURATION_ANNOTATION: "3600"})
    stream = small.stream_pod_log("team-a", pod, follow=True, timeout_seconds=30)
    assert "starting" in next(stream)
    small.delete_workload("team-a", "gone")
    clock.advance(100)
    rest = list(stream)  # the rest of what was read before the delete, then the stream ends (no NotFound)
    assert not any(" step " in line or "finished" in line for line in rest)
    with pytest.raises(NotFound):
        small.pod_logs("team-a", pod)


def test_without_follow_the_whole_log_is_read_once(small, clock):
    pod = started(small, clock, "failing", **{DURATION_ANNOTATION: "30", EXIT_CODE_ANNOTATION: "3"})
    clock.advance(60)
    text = "".join(small.stream_pod_log("team-a", pod))
    assert text == small.pod_logs("team-a", pod, tail_lines=10_000)
    assert "exiting with code 3" in text


def test_following_an_unknown_pod_is_not_found_and_an_unstarted_one_says_why(small):
    with pytest.raises(NotFound):
        list(small.stream_pod_log("team-a", "ghost-abcde", follow=True))
    small.create_workload(job("creating"))
    pod = pod_of(small, "creating")["metadata"]["name"]
    with pytest.raises(ClusterError, match="waiting to start: ContainerCreating"):
        list(small.stream_pod_log("team-a", pod, follow=True))
