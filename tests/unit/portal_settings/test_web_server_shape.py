"""The web server runs processes of one thread each (issue 30, item 5): gunicorn.conf.py's defaults and every
command line that starts web (the image, docker-compose, the cluster's Deployment, the demo's Procfile) agree, so
the operating system shares the cores among processes instead of each process's threads queueing for the GIL; the
connection pool follows the threads (one a process). The stream server keeps its many threads: its clients wait."""

from __future__ import annotations

import os
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

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
    assert (config["workers"], config["threads"], config["worker_class"]) == (4, 1, "gthread")
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
