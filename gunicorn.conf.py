"""gunicorn's settings for every way the portal runs (gunicorn reads ./gunicorn.conf.py from its working directory;
command-line flags still override it).

Prometheus multiprocess mode (portal.metrics): each worker writes its metrics to a file of its own in
PROMETHEUS_MULTIPROC_DIR, which must exist before the first worker starts and is read by whichever worker answers
/metrics. When a worker exits, ``child_exit`` tells prometheus_client, so the values only a live process may report
(live gauges) are dropped while its counters keep counting.
"""

import os


def on_starting(server):
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        os.makedirs(directory, exist_ok=True)


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess  # noqa: PLC0415 - only in multiprocess mode

        multiprocess.mark_process_dead(worker.pid)
