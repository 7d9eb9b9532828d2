"""gunicorn's settings for every way the portal runs (gunicorn reads ./gunicorn.conf.py from its working directory;
command-line flags still override it).

Prometheus multiprocess mode (portal.metrics): each worker writes its metrics to a file of its own in
PROMETHEUS_MULTIPROC_DIR, which must exist before the first worker starts and is read by whichever worker answers
/metrics. When a worker exits, ``child_exit`` tells prometheus_client, so the values only a live process may report
(live gauges) are dropped while its counters keep counting.
"""

import os

# Workers and threads when the command line names none (the image, deploy/30-web.yaml and docker-compose.yml pass
# the same, --workers 4 --threads 1; the demo's Procfile 2 × 1). A request is Python under the GIL plus short
# database waits: processes, not threads, share the cores, so the operating system, not the GIL, decides who runs.
# With 16 threads a process ran its requests all at once, each queueing for the GIL behind the others after every
# query: at 20% of the bare-DRF ceiling the worst kind's p99 was far above the one-thread figure (bench/api_load.py
# measures this setting: docs/benchmarks.md, section 0). Four processes keep a 2-core machine's cores busy while
# some wait on PostgreSQL. Web serves no waiting clients (long-polls and event streams go to the stream server,
# deploy/35-streams.yaml), so it needs no threads for them. WEB_CONCURRENCY and GUNICORN_THREADS change them
# without a new command line.
workers = int(os.environ.get("WEB_CONCURRENCY", "4"))
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
# gunicorn's default worker, sync: a process takes a connection only when it is free, answers one request on it and
# closes it. Every web deployment sits behind a buffering proxy, as gunicorn's design guide asks of sync workers (the
# ingress, deploy/70-ingress.yaml; nginx in docker-compose and the demo, deploy/proxy/portal.conf.template). gthread
# with one thread kept taking connections while its thread was busy and held kept-alive ones, so a request could
# wait behind another process's slow one while a process stood idle: the short kinds' p99 at 20% of the ceiling
# were 2-3 times the sync worker's (docs/benchmarks.md, section 0). With more than one thread (GUNICORN_THREADS,
# --threads; the stream server's command lines) gunicorn runs its gthread worker instead, as documented.
worker_class = "sync"
# The stream server's gthread workers: a pipeline polling every 2 s keeps its connection (gunicorn's default keeps
# an idle one 2 s); an idle kept-alive connection costs the worker's poller a socket, not a thread. The sync worker
# keeps none.
keepalive = 5
# A sync worker cannot tell the arbiter it is alive while it answers, so a request running past ``timeout`` is
# killed (gthread workers keep telling it). It is as long as the proxies wait for an answer (proxy_read_timeout 90s,
# the Ingress's proxy-read-timeout), so neither a slow page nor a long-poll sent to web directly (at most 60 s,
# jobs.api.streams.MOST_SECONDS) is cut short.
timeout = 90


def on_starting(server):
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        os.makedirs(directory, exist_ok=True)


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess  # noqa: PLC0415 - only in multiprocess mode

        multiprocess.mark_process_dead(worker.pid)


def post_fork(server, worker):
    # Before the worker loads the application: PostgreSQL connections come from a pool per process, as large as
    # the process has threads (portal/settings.py, DATABASE_POOL_MAX; the command line's --threads counts), so no
    # thread waits for one, and a process keeps the few it uses, not one per thread that ever served a request.
    os.environ.setdefault("DATABASE_POOL_MAX", str(worker.cfg.threads))


def post_worker_init(worker):
    # The application is loaded: load every view and freeze the loaded objects out of the collector's walks
    # before the first request (portal/webprocess.py says why).
    from portal.webprocess import settle  # noqa: PLC0415 - the worker has loaded Django's settings by now

    settle()
