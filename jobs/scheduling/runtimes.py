"""What the portal has learned of how long work runs, for start-time estimates (jobs.scheduling.estimate). Pure
Python, no Django: jobs.cycle.estimates reads the finished jobs and hands their run lengths here.

A job's run length is predicted from the finished jobs of the most similar work that has enough of them, keys in
order of specificity: the same team, class, image and command; the same user and class; the same team and class.
The prediction at quantile ``q`` is the ``q``-quantile of those run lengths, never more than the job's maximum
runtime (the portal stops it there). Work like nothing learned runs its maximum runtime.

For a running job the prediction is conditional on what it has already run: only the observed lengths longer than
its elapsed time count (a job that has run 3 hours is not one of those that finished in 1). When none is longer,
it runs to its maximum runtime.
"""

from __future__ import annotations

import bisect
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Fewest finished jobs a key needs before its lengths are used (else the next, broader key is asked).
MIN_SAMPLES = 5
#: Most run lengths kept per key (the newest; older ones are dropped first).
MAX_SAMPLES = 400


@dataclass(frozen=True)
class Work:
    """What identifies a job's work for learning: its team, owner, class, image and command."""

    team: int
    owner: int
    class_id: int
    image: str = ""
    command: str = ""

    def keys(self) -> tuple[tuple, ...]:
        return (
            ("tcic", self.team, self.class_id, self.image, self.command),
            ("uc", self.owner, self.class_id),
            ("tc", self.team, self.class_id),
        )


@dataclass
class Runtimes:
    """Observed run lengths (seconds) by key, each list sorted; ``arrived``: the same lengths by key in the order
    they were learned (the oldest is dropped first once a key has ``MAX_SAMPLES``)."""

    lengths: dict[tuple, list[float]] = field(default_factory=dict)
    arrived: dict[tuple, deque] = field(default_factory=dict)

    @classmethod
    def learn(cls, finished: Iterable[tuple[Work, float]]) -> Runtimes:
        """From (work, run length) pairs, oldest first."""
        found: dict[tuple, list[float]] = defaultdict(list)
        for work, length in finished:
            if length >= 0:
                for key in work.keys():
                    found[key].append(length)
        kept = {key: values[-MAX_SAMPLES:] for key, values in found.items()}
        return cls({key: sorted(values) for key, values in kept.items()}, {k: deque(v) for k, v in kept.items()})

    def add(self, finished: Iterable[tuple[Work, float]]) -> int:
        """Learn more (work, run length) pairs, oldest first, newer than any learned so far: each key keeps its
        newest ``MAX_SAMPLES``. How many pairs were added."""
        added = 0
        for work, length in finished:
            if length < 0:
                continue
            added += 1
            for key in work.keys():
                values = self.lengths.setdefault(key, [])
                order = self.arrived.setdefault(key, deque())
                bisect.insort(values, length)
                order.append(length)
                if len(order) > MAX_SAMPLES:
                    del values[bisect.bisect_left(values, order.popleft())]
        return added

    def predict(self, work: Work | None, q: float, max_runtime_s: float, elapsed_s: float = 0.0) -> float:
        """The job's total run length at quantile ``q`` (0..1), given it has run ``elapsed_s``: never more than
        ``max_runtime_s``, never less than ``elapsed_s``."""
        cap = float(max_runtime_s)
        if work is not None:
            for key in work.keys():
                values = self.lengths.get(key)
                if values is None or len(values) < MIN_SAMPLES:
                    continue
                longer = values[bisect.bisect_right(values, elapsed_s) :]
                if not longer:
                    return max(cap, elapsed_s)
                return max(elapsed_s, min(cap, quantile(longer, q)))
        return max(cap, elapsed_s)


def quantile(values: list[float], q: float) -> float:
    """The ``q``-quantile of sorted ``values``, linearly interpolated."""
    if len(values) == 1:
        return values[0]
    at = min(max(q, 0.0), 1.0) * (len(values) - 1)
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)
