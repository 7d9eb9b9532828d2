"""The GPU portal's Python client: ``Client(url, token)`` for jobs, arrays, logs and notebooks over /api/v1/.

>>> from gpuportal import Client
>>> portal = Client()                      # GPUPORTAL_URL/GPUPORTAL_TOKEN, else ~/.config/gpuportal/config
>>> job = portal.submit("train.yaml")      # or a dict of the job's fields
>>> portal.wait(job["id"], timeout=3600)["state"]
'succeeded'

Inside a job that declared ``"report": "token"``, ``report_checkpoint_from_job()`` reports a checkpoint with the token
the portal gave the job (no login needed).
"""

__version__ = "1.0.0"

from .client import Client, report_checkpoint_from_job  # noqa: E402 - __version__ first: the User-Agent reads it
from .errors import (  # noqa: E402
    APIError,
    BadRequest,
    ConfigError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    NotFound,
    PortalError,
    SpecError,
    Unauthorized,
    Unavailable,
    WaitTimeout,
)
from .types import FINAL_STATES  # noqa: E402

__all__ = [
    "APIError",
    "BadRequest",
    "Client",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "FINAL_STATES",
    "Forbidden",
    "NotFound",
    "PortalError",
    "SpecError",
    "Unauthorized",
    "Unavailable",
    "WaitTimeout",
    "__version__",
    "report_checkpoint_from_job",
]
