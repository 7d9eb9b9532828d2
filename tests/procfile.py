"""The demo's processes as deploy/Procfile.demo declares them: each line runs its command under the demo's restart
(deploy/keep_running.py NAME -- COMMAND...); tests read the command it keeps running."""

from __future__ import annotations

import shlex
from pathlib import Path

PROCFILE = Path(__file__).resolve().parents[1] / "deploy" / "Procfile.demo"
KEEP_RUNNING = [".venv/bin/python", "deploy/keep_running.py"]


def demo_lines() -> dict[str, list[str]]:
    """Each process's whole command line, by name."""
    lines = {}
    for line in PROCFILE.read_text().splitlines():
        name, _, command = line.partition(":")
        if command.strip():
            lines[name.strip()] = shlex.split(command)
    return lines


def demo_processes() -> dict[str, list[str]]:
    """The command each process keeps running, by name (what follows ``--``)."""
    return {name: argv[argv.index("--") + 1 :] for name, argv in demo_lines().items()}
