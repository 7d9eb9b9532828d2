"""The registry of workload kinds, keyed by ``Job.kind``. The scheduler asks it, never a kind's name.

The jobs app registers its kinds when Django starts (jobs.apps.JobsConfig.ready); importing a module registers
nothing."""

from __future__ import annotations

from jobs.kinds.base import Demand, Observation, WorkloadKind

__all__ = ["Demand", "Observation", "WorkloadKind", "for_job", "get", "register", "registered", "unregister"]

_kinds: dict[str, WorkloadKind] = {}


def register(kind: WorkloadKind) -> WorkloadKind:
    _kinds[str(kind.name)] = kind
    return kind


def unregister(name: str) -> None:
    _kinds.pop(str(name), None)


def registered() -> dict[str, WorkloadKind]:
    return dict(_kinds)


def get(name: str) -> WorkloadKind:
    try:
        return _kinds[str(name)]
    except KeyError:
        raise LookupError(f"No workload kind {name!r} is registered; known: {', '.join(sorted(_kinds))}.") from None


def for_job(job) -> WorkloadKind:
    return get(job.kind)


def related_fields() -> list[str]:
    """Every relation some kind's ``render`` reads (for ``select_related`` when launching)."""
    return sorted({path for kind in _kinds.values() for path in kind.related})
