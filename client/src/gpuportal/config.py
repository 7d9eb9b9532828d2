"""Where the client finds the portal and its token: arguments, then GPUPORTAL_URL/GPUPORTAL_TOKEN, then the config
file that ``gpuportal login`` writes (``~/.config/gpuportal/config``, or $GPUPORTAL_CONFIG; mode 0600)."""

from __future__ import annotations

import configparser
import os
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
