"""What the command line's commands share: exit codes, error reporting, output helpers."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import click

from .client import Client
from .errors import APIError, PortalError, SpecError

EXIT_OK, EXIT_FAILED, EXIT_CANCELLED, EXIT_TIMEOUT, EXIT_ERROR, EXIT_USAGE = 0, 1, 2, 3, 4, 64
OUTCOME_EXIT = {"succeeded": EXIT_OK, "failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED, "lost": EXIT_CANCELLED}


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(code)


def handled(func: Callable[..., Any]) -> Callable[..., Any]:
    """A command whose PortalErrors end it with a message (every field's problem, one a line) and exit code 4."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SpecError as error:
            fail("The spec file is not usable:\n" + "\n".join(f"  {error.path}: {p}" for p in error.problems))
        except APIError as error:
            lines = error.render().splitlines()
            fail(f"The portal refused the request (HTTP {error.status}):\n" + "\n".join(f"  {x}" for x in lines))
        except PortalError as error:
            fail(f"Error: {error}")

    return run


def client_from(ctx: click.Context) -> Client:
    obj = ctx.find_root().obj or {}
    return Client(obj.get("url"), obj.get("token"))


def emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def table(rows: list[list[str]], head: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    return "\n".join(lines)


def cluster_column(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a listing shows a CLUSTER column: when its rows are in more than one cluster of the fleet, as the
    portal's pages show one only once the fleet has several."""
    return len({row.get("cluster") for row in rows if row.get("cluster")}) > 1
