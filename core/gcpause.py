"""``paused_gc``: no cyclic garbage collection while a bulk pass runs (the inventory sync, the job reconcile, an
admission cycle). Plumbing with no domain, needed by more than one floor (gpus and jobs): core is its one home."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the block.

    A pass at scale allocates hundreds of thousands of short-lived objects that form no cycles (rows, copies of API
    objects, models, admission's views); their allocation keeps triggering the collector's full passes over the
    worker's whole heap, which at 20,000 workloads cost more than the pass itself (bench/reconcile_scale.py) and
    about a quarter of an explain-only admission cycle of 10,000 jobs. Reference counting still frees them as they
    go; the collector resumes, and catches up on anything cyclic, when the block ends. Nested use is harmless."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
