"""Which registry a container image reference is pulled from.

The grammar is the distribution project's reference grammar (github.com/distribution/reference, ``reference.go``
and ``normalize.go``): ``[domain[:port]/]path[:tag][@digest]``. The first component is a registry only when it
contains a '.' or a ':' or is ``localhost``; otherwise the whole reference is a Docker Hub repository
(``nvidia/cuda`` is ``docker.io/nvidia/cuda``, ``ubuntu`` is ``docker.io/library/ubuntu``). The legacy host
``index.docker.io`` is Docker Hub too. Registry hosts are compared case-insensitively, as DNS names are.

Pure Python; no Django, no I/O.
"""

from __future__ import annotations

import re

from .names import DOCKER_HUB_REGISTRY

#: The legacy spelling of Docker Hub that normalize.go maps to docker.io.
LEGACY_DOCKER_HUB = "index.docker.io"

_HOST_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
#: A registry as an image reference spells it: a DNS name (or IPv6 literal) with an optional port.
REGISTRY_HOST = re.compile(rf"^(?:{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]{{1,5}})?$")


def registry_of(reference: str) -> str:
    """The registry host[:port] ``reference`` is pulled from, lowercased (docker.io for Docker Hub)."""
    reference = (reference or "").strip()
    first, slash, _ = reference.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return DOCKER_HUB_REGISTRY
    host = first.lower()
    return DOCKER_HUB_REGISTRY if host == LEGACY_DOCKER_HUB else host


def normalise_registry(text: str) -> str:
    """A registry as a person may type it (``https://nvcr.io/``, ``Index.Docker.io``) in the form ``registry_of``
    returns; the caller checks the result against ``REGISTRY_HOST``."""
    host = (text or "").strip()
    for scheme in ("https://", "http://"):
        if host.lower().startswith(scheme):
            host = host[len(scheme) :]
    host = host.split("/", 1)[0].lower()
    return DOCKER_HUB_REGISTRY if host == LEGACY_DOCKER_HUB else host
