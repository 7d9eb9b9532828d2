"""The node configuration tests' helpers: a step of the node operations on the simulated clock, and a job that holds
its GPUs past the steps (so a drain has work to wait for)."""

from __future__ import annotations

from gpus.nodeconfig import advance_operations
from jobs.models import Job
from tests.factories import submit_job


def step(sim, clock, seconds: float = 0):
    """Moves ``clock`` on by ``seconds``, then advances every node operation at that moment."""
    clock.advance(seconds)
    return advance_operations(sim, now=clock.now)


def submit(user, team_slug, rc, **fields) -> Job:
    """submit_job of an hour's sleep (two hours allowed) unless ``fields`` say otherwise."""
    return submit_job(user, team_slug, rc, **({"command": ["sleep", "3600"], "max_runtime_seconds": 7200} | fields))
