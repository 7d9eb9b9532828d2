"""A web process's interpreter, set up for many short requests: ``settle()`` runs once in each gunicorn worker,
after the application is loaded and before the first request (gunicorn.conf.py's ``post_worker_init``).

* **The garbage collector leaves the loaded code alone.** A worker holds ~130,000 objects once Django, DRF and the
  portal's modules are imported, and they live as long as the process. CPython's full collection walks every one
  of them: 250-430 ms with the GIL held, a dozen times a minute under load, during which every request of the
  process stands still (measured with ``gc.callbacks`` in bench/api_load.py's server: docs/benchmarks.md, section
  0). ``gc.freeze()`` moves what exists after loading into a generation the collector never walks; a full
  collection then walks only what requests made since (~25,000 objects, 10-30 ms). Nothing is leaked: the frozen
  objects are the modules, classes and functions the process keeps anyway. The URLconf is loaded first, so every
  view module (and what it imports) is among them, as the first request would have loaded it.
"""

from __future__ import annotations

import gc

from django.conf import settings


def settle() -> None:
    """Load every view, collect once and freeze what is left (module docstring).

    gunicorn reads ./gunicorn.conf.py for whatever it serves from the checkout, so this also runs for other
    applications (the test suite's OpenID provider is a Django project of its own): without Django's settings it
    only freezes."""
    if settings.configured:
        from django.urls import get_resolver  # noqa: PLC0415 - needs the settings, which the worker has loaded

        get_resolver().url_patterns  # noqa: B018 - imports the URLconf and every view module it names
    gc.collect()
    gc.freeze()
