"""The web server runs processes of one thread each (issue 30, item 5): gunicorn.conf.py's defaults and every
command line that starts web (the image, docker-compose, the cluster's Deployment, the demo's Procfile) agree, so
the operating system shares the cores among processes instead of each process's threads queueing for the GIL; the
connection pool follows the threads (one a process). Web's workers are gunicorn's sync workers, behind a proxy that
waits for them as long as they may answer; the stream server keeps gthread and its many threads: its clients wait."""

from __future__ import annotations

import os
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

from gunicorn.config import Config

from jobs.api.streams import MOST_SECONDS

REPO = Path(__file__).resolve().parents[3]
#: Each file that starts web, and the text of its web command line.
WEB_COMMANDS = {
    "Dockerfile": r"^CMD \[\"gunicorn\".*$",
    "docker-compose.yml": r"^  web:\n(?:    .*\n)*?    command: (.*)$",
    "deploy/30-web.yaml": r"command: \[\"gunicorn\".*$",
    "deploy/Procfile.demo": r"^web: .*$",
}


def threads_and_workers(command: str) -> tuple[int, int]:
    words = re.findall(r"[\w.:${}/-]+", command)
    return int(words[words.index("--threads") + 1]), int(words[words.index("--workers") + 1])


def test_gunicorn_conf_defaults_to_processes_of_one_thread(monkeypatch):
    monkeypatch.delenv("GUNICORN_THREADS", raising=False)
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    config = runpy.run_path(str(REPO / "gunicorn.conf.py"))
    assert (config["workers"], config["threads"], config["worker_class"]) == (4, 1, "sync")
    monkeypatch.delenv("DATABASE_POOL_MAX", raising=False)
    config["post_fork"](None, SimpleNamespace(cfg=SimpleNamespace(threads=config["threads"])))
    assert os.environ["DATABASE_POOL_MAX"] == "1"


def test_every_web_command_line_runs_one_thread_a_process():
    seen = {}
    for name, pattern in WEB_COMMANDS.items():
        match = re.search(pattern, (REPO / name).read_text(), re.MULTILINE)
        assert match, f"no web command line found in {name}"
        seen[name] = threads_and_workers(match.group(match.lastindex or 0))
    assert seen == {
        "Dockerfile": (1, 4),
        "docker-compose.yml": (1, 4),
        "deploy/30-web.yaml": (1, 4),
        "deploy/Procfile.demo": (1, 2),
    }


def worker_of(threads: int) -> str:
    """The worker class gunicorn runs with gunicorn.conf.py's settings and ``threads`` (the command line's
    --threads), as gunicorn's own Config decides it."""
    settings = runpy.run_path(str(REPO / "gunicorn.conf.py"))
    config = Config()
    config.set("worker_class", settings["worker_class"])
    config.set("threads", threads)
    return config.worker_class_str


def test_web_runs_sync_workers_and_threaded_command_lines_run_gthread():
    # One thread a process (every web command line): the sync worker, which takes a connection only when free.
    assert worker_of(1) == "sync"
    # More threads (the stream server's command lines, the integration tests' servers): gunicorn's gthread.
    assert worker_of(8) == "gthread"


def test_a_sync_worker_is_not_killed_while_the_proxy_still_waits_for_it():
    timeout = runpy.run_path(str(REPO / "gunicorn.conf.py"))["timeout"]
    proxied = {
        "deploy/proxy/portal.conf.template": r"location / \{[^}]*proxy_read_timeout (\d+)s;",
        "deploy/70-ingress.yaml": r'proxy-read-timeout: "(\d+)"',
        "deploy/chart/gpu-portal/templates/70-ingress.yaml": r'proxy-read-timeout: "(\d+)"',
    }
    for name, pattern in proxied.items():
        match = re.search(pattern, (REPO / name).read_text())
        assert match, f"no read timeout for web found in {name}"
        assert timeout >= int(match.group(1)), name
    # A long-poll sent to web directly (no proxy in front) is answered before the worker would be killed.
    assert timeout > MOST_SECONDS


def test_the_proxy_keeps_no_idle_connections_to_web():
    # A sync worker closes its connection after each answer: a kept pool would only hold closing sockets.
    config = (REPO / "deploy/proxy/portal.conf.template").read_text()
    web = re.search(r"^upstream portal_web \{\n(.*?)^\}", config, re.MULTILINE | re.DOTALL)
    streams = re.search(r"^upstream portal_streams \{\n(.*?)^\}", config, re.MULTILINE | re.DOTALL)
    assert web and streams
    assert "keepalive" not in web.group(1)
    assert "keepalive 32;" in streams.group(1)
