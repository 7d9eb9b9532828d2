"""Find or provide the Kubernetes control-plane binaries the real-apiserver tests run.

No registry this project may use ships a prebuilt kube-apiserver, so the binaries (v1.20.2) come from, in order:

a. the cache outside the repository (``~/.cache/gpu-portal/k8s-v1.20.2/``, or ``$PORTAL_K8S_BIN_DIR``), when every
   binary there matches the cache's SHA256SUMS;
b. the prebuilt copies in ``../shared/k8s-bin`` next to the repository (or ``$PORTAL_K8S_PREBUILT``), unpacked
   into the cache after checking both the ``.xz`` files and the unpacked binaries against that folder's SHA256SUMS;
c. a build from Debian's ``kubernetes`` source package by ``build-k8s-binaries.sh`` (about 15 minutes on two
   cores; needs root or sudo for apt-get).

etcd is Debian's ``etcd-server`` package (``/usr/bin/etcd``), or ``$PORTAL_ETCD`` / the first ``etcd`` on PATH.

Run ``python -m tests.kube.binaries`` to make sure the binaries exist (building them if need be) and print where.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "v1.20.2"
BINARY_NAMES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
SUMS_FILE = "SHA256SUMS"

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = Path(__file__).resolve().with_name("build-k8s-binaries.sh")


class BinariesUnavailable(RuntimeError):
    """The control-plane binaries are not cached, cannot be unpacked, and were not (or could not be) built."""


@dataclass(frozen=True)
class KubeBinaries:
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    etcd: Path

    def as_dict(self) -> dict[str, Path]:
        return {
            "kube-apiserver": self.kube_apiserver,
            "kube-scheduler": self.kube_scheduler,
            "kube-controller-manager": self.kube_controller_manager,
            "etcd": self.etcd,
        }


def cache_dir() -> Path:
    override = os.environ.get("PORTAL_K8S_BIN_DIR")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "gpu-portal" / f"k8s-{K8S_VERSION}"


def prebuilt_dir() -> Path:
    override = os.environ.get("PORTAL_K8S_PREBUILT")
    if override:
        return Path(override).expanduser()
    return REPO_ROOT.parent / "shared" / "k8s-bin"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_sums(path: Path) -> dict[str, str]:
    """Parse a ``sha256sum``-style file into {file name: hex digest}."""
    sums: dict[str, str] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            digest, name = parts
            sums[name.lstrip("*")] = digest.lower()
    return sums


def find_etcd() -> Path:
    candidates = [os.environ.get("PORTAL_ETCD"), "/usr/bin/etcd", shutil.which("etcd")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise BinariesUnavailable(
        "etcd was not found. Install Debian's etcd-server package (apt-get install etcd-server) "
        "or point PORTAL_ETCD at an etcd 3.4+ binary."
    )


def _verified(directory: Path) -> str | None:
    """None when every binary in ``directory`` matches its SHA256SUMS, else why not."""
    sums_path = directory / SUMS_FILE
    if not sums_path.is_file():
        return f"{sums_path} is missing"
    sums = read_sums(sums_path)
    for name in BINARY_NAMES:
        binary = directory / name
        if name not in sums:
            return f"{sums_path} has no entry for {name}"
        if not binary.is_file():
            return f"{binary} is missing"
        if sha256_of(binary) != sums[name]:
            return f"{binary} does not match its checksum"
        if not os.access(binary, os.X_OK):
            return f"{binary} is not executable"
    return None


def _binaries_in(directory: Path) -> KubeBinaries:
    return KubeBinaries(
        kube_apiserver=directory / "kube-apiserver",
        kube_scheduler=directory / "kube-scheduler",
        kube_controller_manager=directory / "kube-controller-manager",
        etcd=find_etcd(),
    )


def unpack_prebuilt(source: Path, target: Path) -> None:
    """Check ``source``'s .xz files and their contents against its SHA256SUMS and install them into ``target``."""
    sums_path = source / SUMS_FILE
    if not sums_path.is_file():
        raise BinariesUnavailable(f"{source} has no {SUMS_FILE}")
    sums = read_sums(sums_path)
    target.mkdir(parents=True, exist_ok=True)
    for name in BINARY_NAMES:
        archive = source / f"{name}.xz"
        if f"{name}.xz" not in sums or name not in sums:
            raise BinariesUnavailable(f"{sums_path} must list both {name}.xz and {name}")
        if not archive.is_file():
            raise BinariesUnavailable(f"{archive} is missing")
        if sha256_of(archive) != sums[f"{name}.xz"]:
            raise BinariesUnavailable(f"{archive} does not match {sums_path}; the prebuilt copy is corrupt")
        # Unpack next to the destination and rename into place, so an interrupted run never leaves a half binary.
        with tempfile.NamedTemporaryFile(dir=target, prefix=f".{name}.", delete=False) as partial:
            partial_path = Path(partial.name)
            try:
                with lzma.open(archive) as compressed:
                    shutil.copyfileobj(compressed, partial, length=1 << 20)
            except BaseException:
                partial_path.unlink(missing_ok=True)
                raise
        if sha256_of(partial_path) != sums[name]:
            partial_path.unlink(missing_ok=True)
            raise BinariesUnavailable(f"{archive} unpacks to a {name} that does not match {sums_path}")
        partial_path.chmod(0o755)
        partial_path.replace(target / name)
    cached_sums = "".join(f"{sums[name]}  {name}\n" for name in BINARY_NAMES)
    (target / SUMS_FILE).write_text(cached_sums)


def build_from_source(target: Path) -> None:
    """Build the binaries from Debian's source package into ``target`` (slow; needs apt-get as root)."""
    if not BUILD_SCRIPT.is_file():
        raise BinariesUnavailable(f"{BUILD_SCRIPT} is missing")
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["bash", str(BUILD_SCRIPT), str(target)], check=False)
    if result.returncode != 0:
        raise BinariesUnavailable(
            f"{BUILD_SCRIPT.name} failed with exit status {result.returncode}; its output above says which step."
        )
    with (target / SUMS_FILE).open("w") as sums:
        for name in BINARY_NAMES:
            sums.write(f"{sha256_of(target / name)}  {name}\n")


def ensure_binaries(allow_build: bool = True) -> KubeBinaries:
    """Return verified binaries, unpacking or (if ``allow_build``) building them into the cache first."""
    target = cache_dir()
    problem = _verified(target)
    if problem is None:
        return _binaries_in(target)

    source = prebuilt_dir()
    if (source / SUMS_FILE).is_file():
        unpack_prebuilt(source, target)
        problem = _verified(target)
        if problem is None:
            return _binaries_in(target)
        raise BinariesUnavailable(f"Unpacked {source} into {target}, but {problem}")

    if not allow_build:
        raise BinariesUnavailable(
            f"No Kubernetes {K8S_VERSION} control-plane binaries: {problem}, and there is no prebuilt copy at "
            f"{source}. Build them once (about 15 minutes) with: python -m tests.kube.binaries"
        )
    build_from_source(target)
    problem = _verified(target)
    if problem is not None:
        raise BinariesUnavailable(f"The build finished, but {problem}")
    return _binaries_in(target)


def main() -> int:
    try:
        binaries = ensure_binaries(allow_build=True)
    except BinariesUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for name, path in binaries.as_dict().items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
