"""What can go wrong, as exceptions. An API refusal keeps every field's messages, so a caller (or the CLI) can
show all the problems of a request at once."""

from __future__ import annotations

from typing import Any


class PortalError(Exception):
    """Anything this package raises on purpose."""


class ConfigError(PortalError):
    """No portal address or token: give them, set GPUPORTAL_URL/GPUPORTAL_TOKEN, or run `gpuportal login`."""


class SpecError(PortalError):
    """A spec file that cannot be read or is not a JSON/YAML object; ``problems`` lists every one found."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = list(problems)
        super().__init__(f"{path}: " + "; ".join(self.problems))


class ConnectionFailed(PortalError):
    """The portal did not answer (wrong address, down, network)."""


class WaitTimeout(PortalError):
    """wait() gave up before the job ended; ``job`` is the last state seen."""

    def __init__(self, job: dict[str, Any], timeout: float, *, what: str = "Job") -> None:
        self.job = job
        self.timeout = timeout
        super().__init__(f"{what} #{job.get('id')} is still {job.get('state')} after {timeout:g} s.")


class APIError(PortalError):
    """The portal refused a request. ``status`` is the HTTP status, ``detail`` the general message (may be empty)
    and ``field_errors`` every field's messages, e.g. {"count": ["..."], "image": ["..."]}."""

    def __init__(self, status: int, body: Any, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body
        self.method = method
        self.path = path
        self.detail, self.field_errors = _split(body)
        super().__init__(self.render())

    def render(self) -> str:
        """Every problem, one per line: the detail first, then each field with its messages."""
        lines = [self.detail] if self.detail else []
        for field, messages in self.field_errors.items():
            lines.extend(f"{field}: {message}" for message in messages)
        if not lines:
            lines.append(f"HTTP {self.status} from {self.method} {self.path}".strip())
        return "\n".join(lines)


class BadRequest(APIError):
    """400: the request is invalid; ``field_errors`` says what to change in each field."""


class Unauthorized(APIError):
    """401: unknown, expired or revoked token."""


class Forbidden(APIError):
    """403: not allowed (a read-only token, another team's work, …)."""


class NotFound(APIError):
    """404: no such thing among those you can see, or (logs) nothing to show yet."""


class Conflict(APIError):
    """422: e.g. an Idempotency-Key used before with a different request."""


class Unavailable(APIError):
    """503: the cluster could not answer now; try again shortly."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    422: Conflict,
    503: Unavailable,
}


def error_for(status: int, body: Any, method: str = "", path: str = "") -> APIError:
    return _BY_STATUS.get(status, APIError)(status, body, method, path)


def _split(body: Any) -> tuple[str, dict[str, list[str]]]:
    """DRF's error bodies: {"detail": "..."}, {"field": ["...", ...], ...}, a list, or text."""
    if isinstance(body, dict):
        detail = body.get("detail", "")
        fields = {str(k): _messages(v) for k, v in body.items() if k != "detail"}
        return (detail if isinstance(detail, str) else " ".join(_messages(detail))), fields
    if isinstance(body, list):
        return " ".join(_messages(body)), {}
    return (str(body).strip() if body else ""), {}


def _messages(value: Any) -> list[str]:
    """A field's messages as flat strings; nested errors (a list of objects) keep their position in the text."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        out: list[str] = []
        for index, item in enumerate(value):
            if isinstance(item, dict | list) and item:
                out.extend(f"[{index}] {m}" for m in _messages(item))
            elif item:
                out.append(str(item))
        return out
    if isinstance(value, dict):
        return [f"{key}: {m}" for key, item in value.items() for m in _messages(item)]
    return [str(value)]
