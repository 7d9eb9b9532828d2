"""Where the client finds the portal and its token: arguments, then GPUPORTAL_URL/GPUPORTAL_TOKEN, then the config
file that ``gpuportal login`` writes (``~/.config/gpuportal/config``, or $GPUPORTAL_CONFIG; mode 0600). Inside a job
that reports its checkpoints by token, PORTAL_CHECKPOINT_URL and PORTAL_CHECKPOINT_TOKEN (``checkpoint_target``)."""

from __future__ import annotations

import configparser
import os
import re
from pathlib import Path

from .errors import ConfigError

SECTION = "portal"


def config_path() -> Path:
    if explicit := os.environ.get("GPUPORTAL_CONFIG"):
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuportal" / "config"


def read_config(path: Path | None = None) -> dict[str, str]:
    """{"url", "token"} from the file, or {} when there is none."""
    path = path or config_path()
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, configparser.Error) as error:
        raise ConfigError(f"Cannot read {path}: {error}. Run `gpuportal login` again.") from None
    return dict(parser[SECTION]) if parser.has_section(SECTION) else {}


def write_config(url: str, token: str, path: Path | None = None) -> Path:
    """Store the address and the token readable by the owner only (directory 0700, file 0600)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    parser = configparser.ConfigParser(interpolation=None)
    parser[SECTION] = {"url": url, "token": token}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file keeps its mode through O_CREAT: set it either way
    with os.fdopen(fd, "w") as out:
        parser.write(out)
    return path


def resolve(url: str | None, token: str | None) -> tuple[str, str]:
    """The address and token to use, each from the first place that has it."""
    stored: dict[str, str] = {}
    if not (url and token):
        stored = read_config()
    url = url or os.environ.get("GPUPORTAL_URL") or stored.get("url")
    token = token or os.environ.get("GPUPORTAL_TOKEN") or stored.get("token")
    missing = [name for name, value in (("address", url), ("token", token)) if not value]
    if missing:
        raise ConfigError(
            f"No portal {' or '.join(missing)}: run `gpuportal login --url URL`, or set GPUPORTAL_URL and "
            "GPUPORTAL_TOKEN."
        )
    assert url and token  # for type checkers: checked just above
    return url, token


#: What the portal sets inside a job that declared ``"report": "token"``: the job's own checkpoint address and the
#: token that may report its checkpoints and do nothing else.
CHECKPOINT_URL_ENV = "PORTAL_CHECKPOINT_URL"
CHECKPOINT_TOKEN_ENV = "PORTAL_CHECKPOINT_TOKEN"
_CHECKPOINT_URL = re.compile(r"(?P<base>https?://.+?)/api/v1/jobs/(?P<id>[0-9]+)/checkpoint/?")


def checkpoint_target() -> tuple[str, int, str]:
    """(the portal's address, the job's id, the checkpoint token) from the job's environment."""
    url, token = os.environ.get(CHECKPOINT_URL_ENV, ""), os.environ.get(CHECKPOINT_TOKEN_ENV, "")
    missing = [name for name, value in ((CHECKPOINT_URL_ENV, url), (CHECKPOINT_TOKEN_ENV, token)) if not value]
    if missing:
        raise ConfigError(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set. The portal sets them inside a "
            'job whose checkpoint declaration says "report": "token"; elsewhere use `gpuportal jobs checkpoint '
            "JOB_ID` with your own token."
        )
    found = _CHECKPOINT_URL.fullmatch(url.strip())
    if found is None:
        raise ConfigError(
            f"{CHECKPOINT_URL_ENV} is {url!r}, not a job's checkpoint address (<portal>/api/v1/jobs/<id>/checkpoint/)."
        )
    return found["base"], int(found["id"]), token.strip()
