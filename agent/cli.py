"""``python -m agent``: arguments, environment, and the three ways to run the agent.

- default: run until SIGTERM, sampling every ``--interval`` and posting every ``--flush`` seconds;
- ``--once``: one sample of every device, one delivery attempt, exit 0 if the portal took it;
- ``--dry-run``: print each batch (the exact POST body) as JSON on stdout instead of sending it; with ``--once``
  this is the quick check of what a node's GPUs look like to the agent. ``--inventory`` prints the devices
  instead (index, name, PCI bus id, MIG placement), which the contract does not carry.

Every option has an environment variable, which is how the DaemonSet sets them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from . import AGENT_NAME
from .nvml import NvmlCollector, NvmlUnavailable, log_inventory
from .runner import AgentRunner
from .sender import PostResult, SampleBuffer, Sender, rfc3339

log = logging.getLogger("agent")


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agent",
        description="GPU portal node agent: reads GPUs and MIG devices through NVML and posts them to the portal.",
    )
    parser.add_argument("--portal-url", default=os.environ.get("PORTAL_URL"), help="portal base URL ($PORTAL_URL)")
    parser.add_argument(
        "--token-file",
        default=os.environ.get("PORTAL_AGENT_TOKEN_FILE"),
        help="file holding the node token, re-read before each POST so a rotated Secret takes effect "
        "($PORTAL_AGENT_TOKEN_FILE; otherwise the token is $PORTAL_AGENT_TOKEN)",
    )
    parser.add_argument(
        "--node",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="Kubernetes node name ($NODE_NAME, from the downward API spec.nodeName; default: host name)",
    )
    parser.add_argument(
        "--cluster",
        default=os.environ.get("PORTAL_AGENT_CLUSTER", ""),
        help="the portal's name for this node's cluster ($PORTAL_AGENT_CLUSTER); the portal refuses batches whose "
        "token was issued for another cluster's node (default: not sent, the token's cluster is taken)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=_env_float("PORTAL_AGENT_INTERVAL", 10.0),
        help="seconds between samples ($PORTAL_AGENT_INTERVAL, default 10)",
    )
    parser.add_argument(
        "--flush",
        type=float,
        default=_env_float("PORTAL_AGENT_FLUSH", 30.0),
        help="seconds between POSTs ($PORTAL_AGENT_FLUSH, default 30)",
    )
    parser.add_argument(
        "--buffer-size",
        type=int,
        default=int(_env_float("PORTAL_AGENT_BUFFER_SIZE", 10_000)),
        help="samples kept while the portal is unreachable; the oldest are dropped first "
        "($PORTAL_AGENT_BUFFER_SIZE, default 10000)",
    )
    parser.add_argument("--timeout", type=float, default=15.0, help="HTTP timeout in seconds (default 15)")
    parser.add_argument("--once", action="store_true", help="sample once, send once, exit")
    parser.add_argument("--dry-run", action="store_true", help="print batches as JSON on stdout instead of sending")
    parser.add_argument("--inventory", action="store_true", help="with --once --dry-run: print the devices instead")
    parser.add_argument(
        "--log-level", default=os.environ.get("PORTAL_LOG_LEVEL", "INFO"), help="($PORTAL_LOG_LEVEL, default INFO)"
    )
    return parser


class TokenSource:
    """The node token: from a file (a mounted Secret, re-read each time: kubelet updates it in place) or a value."""

    def __init__(self, value: str | None = None, path: str | None = None):
        self.path = Path(path) if path else None
        self.value = (value or "").strip()

    def __call__(self) -> str:
        if self.path is not None:
            try:
                self.value = self.path.read_text().strip()
            except OSError as error:
                log.error("Cannot read the node token from %s (%s); using the last one read.", self.path, error)
        return self.value


def _print_post(stdout: TextIO) -> Callable[[str, bytes, dict[str, str], float], PostResult]:
    def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> PostResult:
        stdout.write(json.dumps(json.loads(body), indent=2) + "\n")
        stdout.flush()
        return PostResult(202, json.dumps({"accepted": len(json.loads(body)["samples"])}))

    return post


def _problems(args: argparse.Namespace, token: TokenSource) -> list[str]:
    problems = []
    if args.interval <= 0 or args.flush <= 0:
        problems.append("--interval and --flush must be positive numbers of seconds.")
    if args.buffer_size < 1:
        problems.append("--buffer-size must be at least 1.")
    if args.dry_run:
        return problems
    if not args.portal_url:
        problems.append(
            "Set PORTAL_URL (or --portal-url) to the portal's base URL, e.g. https://gpu-portal.example.com."
        )
    elif not args.portal_url.startswith(("http://", "https://")):
        problems.append(f"PORTAL_URL must start with http:// or https://, not {args.portal_url!r}.")
    if not token():
        where = f"the file {args.token_file} is empty or unreadable" if args.token_file else "it is not set"
        problems.append(
            f"The node token is missing ({where}): set PORTAL_AGENT_TOKEN or --token-file to the token an admin "
            "issued for this node."
        )
    return problems


def main(
    argv: list[str] | None = None,
    *,
    nvml: Any = None,
    stdout: TextIO | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] | None = None,
    post: Callable[[str, bytes, dict[str, str], float], PostResult] | None = None,
) -> int:
    args = build_parser().parse_args(argv)
    stdout = stdout or sys.stdout
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    token = TokenSource(os.environ.get("PORTAL_AGENT_TOKEN"), args.token_file)
    problems = _problems(args, token)
    if problems:
        for problem in problems:
            log.error(problem)
        return 2

    collector = NvmlCollector(nvml)
    buffer = SampleBuffer(args.buffer_size)
    sender_post = _print_post(stdout) if args.dry_run else post
    sender = Sender(
        args.portal_url or "http://dry-run.invalid",
        args.node,
        token,
        buffer,
        timeout=args.timeout,
        cluster=args.cluster,
        **({"post": sender_post} if sender_post else {}),
    )
    log.info(
        "%s on node %s: sampling every %g s, posting every %g s.", AGENT_NAME, args.node, args.interval, args.flush
    )

    if args.once:
        return _run_once(args, collector, sender, clock, stdout)

    stop = threading.Event()
    runner = AgentRunner(
        collector, sender, interval=args.interval, flush=args.flush, clock=clock, sleep=sleep or stop.wait
    )

    def on_signal(signum, _frame):
        log.info("Signal %d: sending what is buffered and stopping.", signum)
        runner.stop()
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    runner.run()
    return 0


def _run_once(args, collector: NvmlCollector, sender: Sender, clock, stdout: TextIO) -> int:
    try:
        collector.start()
    except NvmlUnavailable as error:
        log.error("NVML could not start: %s.", error)
        return 3
    try:
        now = clock()
        readings = collector.collect(rfc3339(now))
    except NvmlUnavailable as error:
        log.error("NVML stopped answering: %s.", error)
        return 3
    finally:
        collector.stop()
    log_inventory(readings)
    if args.inventory:
        stdout.write(json.dumps([r.to_inventory() for r in readings], indent=2) + "\n")
        return 0
    if args.dry_run and not readings:
        stdout.write(json.dumps(sender.body([], now), indent=2) + "\n")  # show the empty batch rather than nothing
        return 0
    sender.buffer.extend(r.to_sample() for r in readings)
    return 0 if sender.flush(now) and not sender.rejected else 1
