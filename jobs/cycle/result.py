"""What one job cycle did, counted: the type every step of the cycle adds to."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class CycleResult:
    admitted: int = 0
    preempted: int = 0
    requeued: int = 0
    waiting: int = 0
    launched: int = 0
    started: int = 0
    finished: int = 0
    failed: int = 0
    lost: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)
