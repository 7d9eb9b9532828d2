"""A throwaway Kubernetes v1.20 control plane on 127.0.0.1 for integration tests.

``LocalControlPlane`` starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager as child processes
on free loopback ports inside a temporary directory, waits until each is healthy, writes a kubeconfig for a
static-token admin user, and stops everything (SIGTERM, then SIGKILL) on ``stop()``. There are no kubelets: Nodes
are plain API objects, so the scheduler really binds pods to them and the Job/GC controllers really run, but no
container ever starts.

The flags below are what v1.20.2 needs when nothing else of a cluster exists (see
shared/research/k8s_test_harness.md for the reasons behind each).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .binaries import KubeBinaries, ensure_binaries

ADMIN_USER = "portal-test-admin"
SERVICE_CIDR = "10.0.0.0/24"
CONTROLLERS = "*,-nodelifecycle,-serviceaccount-token,-cloud-node-lifecycle,-nodeipam"
LOG_TAIL_LINES = 40


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message carries the tail of every component's log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # If the test runner is killed outright, take the control plane down with it instead of leaking processes.
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


@dataclass
class _Component:
    name: str
    args: list[str]
    log_path: Path
    process: subprocess.Popen | None = None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


@dataclass
class LocalControlPlane:
    """etcd + kube-apiserver (+ scheduler, controller-manager) on loopback. Use as a context manager."""

    binaries: KubeBinaries | None = None
    with_scheduler: bool = True
    with_controller_manager: bool = True
    startup_timeout: float = 90.0
    #: RBAC, so tests can act as a less privileged identity; the admin user is in system:masters, which RBAC
    #: lets do anything, so for everything else this behaves like AlwaysAllow.
    authorization_mode: str = "RBAC"
    #: Extra users for the static token file, {user name: groups}; see kubeconfig_for().
    extra_users: dict[str, list[str]] = field(default_factory=dict)
    #: More kube-apiserver flags (e.g. ``--watch-cache-sizes=pods#0``: watches of pods go to etcd itself, so an
    #: etcd compaction expires them, tests/kube/test_watch_cache.py).
    apiserver_args: list[str] = field(default_factory=list)
    #: Keep the temporary directory (logs, etcd data) after stop(); it is always kept when start() fails.
    keep_workdir: bool = field(default_factory=lambda: os.environ.get("PORTAL_KUBE_KEEP_WORKDIR") == "1")

    workdir: Path | None = field(default=None, init=False)
    server: str = field(default="", init=False)
    token: str = field(default="", init=False)
    kubeconfig_path: Path | None = field(default=None, init=False)
    ca_path: Path | None = field(default=None, init=False)
    startup_seconds: float = field(default=0.0, init=False)
    _user_kubeconfigs: dict[str, Path] = field(default_factory=dict, init=False)
    _components: list[_Component] = field(default_factory=list, init=False)

    def __enter__(self) -> LocalControlPlane:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        began = time.monotonic()
        binaries = self.binaries or ensure_binaries(allow_build=False)
        self.workdir = Path(tempfile.mkdtemp(prefix="portal-kube-"))
        atexit.register(self.stop)
        try:
            self._start_etcd(binaries)
            self._start_apiserver(binaries)
            if self.with_scheduler:
                self._start_scheduler(binaries)
            if self.with_controller_manager:
                self._start_controller_manager(binaries)
        except BaseException as error:
            report = self._failure_report(error)
            self._stop_processes()
            if isinstance(error, ControlPlaneError):
                raise ControlPlaneError(report) from None
            raise ControlPlaneError(report) from error
        self.startup_seconds = time.monotonic() - began

    def stop(self) -> None:
        self._stop_processes()
        if self.workdir is not None and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        atexit.unregister(self.stop)

    # Components -----------------------------------------------------------------------------------
    def _start_etcd(self, binaries: KubeBinaries) -> None:
        assert self.workdir is not None
        client_port, peer_port = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        self._etcd_url = client_url
        self._spawn(
            "etcd",
            [
                str(binaries.etcd),
                "--name=portal-test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=portal-test={peer_url}",
                "--logger=zap",
                "--log-level=warn",
            ],
        )
        self._wait_healthy("etcd", f"{client_url}/health", expect='"health":"true"')

    def _start_apiserver(self, binaries: KubeBinaries) -> None:
        assert self.workdir is not None
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        self.token = secrets.token_hex(16)
        user_tokens = {user: secrets.token_hex(16) for user in self.extra_users}
        token_file = self.workdir / "tokens.csv"
        lines = [f"{self.token},{ADMIN_USER},{ADMIN_USER},system:masters"]
        for user, groups in self.extra_users.items():
            all_groups = ",".join([*groups, "system:authenticated"])
            lines.append(f'{user_tokens[user]},{user},{user},"{all_groups}"')
        token_file.write_text("\n".join(lines) + "\n")
        token_file.chmod(0o600)
        sa_key = self._service_account_key()
        cert_dir = self.workdir / "certs"
        self.ca_path = cert_dir / "apiserver.crt"
        self._spawn(
            "kube-apiserver",
            [
                str(binaries.kube_apiserver),
                f"--etcd-servers={self._etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                # v1.20 accepts only --insecure-port=0, so serve TLS with a self-signed cert and a static token.
                f"--cert-dir={cert_dir}",
                f"--token-auth-file={token_file}",
                f"--authorization-mode={self.authorization_mode}",
                # No serviceaccount controllers and no kubelets: these two plugins would block every Pod and
                # taint every new Node not-ready.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                # The kubernetes Service endpoints would point at 127.0.0.1, which the reconciler rejects.
                "--endpoint-reconciler-type=none",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Required flags since v1.20 (TokenRequest is GA); nothing here mints tokens.
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa_key}",
                f"--service-account-signing-key-file={sa_key}",
                "--allow-privileged=true",
                "--v=1",
                *self.apiserver_args,
            ],
        )
        self._wait_healthy("kube-apiserver", f"{self.server}/readyz", expect="ok", token=self.token)
        self.kubeconfig_path = self._write_kubeconfig("kubeconfig", ADMIN_USER, self.token)
        for index, (user, token) in enumerate(user_tokens.items()):
            self._user_kubeconfigs[user] = self._write_kubeconfig(f"kubeconfig-user-{index}", user, token)

    @property
    def etcd_url(self) -> str:
        """etcd's client URL (its JSON gateway answers /v3/... too)."""
        return self._etcd_url

    def kubeconfig_for(self, user: str) -> Path:
        """The kubeconfig of one of ``extra_users`` (the admin's is ``kubeconfig_path``)."""
        return self._user_kubeconfigs[user]

    def _start_scheduler(self, binaries: KubeBinaries) -> None:
        assert self.kubeconfig_path is not None
        port = free_port()
        self._spawn(
            "kube-scheduler",
            [
                str(binaries.kube_scheduler),
                f"--kubeconfig={self.kubeconfig_path}",
                "--leader-elect=false",
                "--port=0",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
            ],
        )
        self._wait_healthy("kube-scheduler", f"https://127.0.0.1:{port}/healthz", expect="ok")

    def _start_controller_manager(self, binaries: KubeBinaries) -> None:
        assert self.kubeconfig_path is not None and self.workdir is not None
        port = free_port()
        self._spawn(
            "kube-controller-manager",
            [
                str(binaries.kube_controller_manager),
                f"--kubeconfig={self.kubeconfig_path}",
                "--leader-elect=false",
                "--port=0",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                # Nodes have no kubelet (node-lifecycle would mark them NotReady) and no token signer is set up.
                f"--controllers={CONTROLLERS}",
                "--use-service-account-credentials=false",
                # Otherwise it creates /usr/libexec/kubernetes/kubelet-plugins/volume/exec on the host.
                f"--flex-volume-plugin-dir={self.workdir / 'flexvolume'}",
                # The volume binder resyncs claims every 15 s by default; the tests wait on each binding.
                "--pvclaimbinder-sync-period=1s",
            ],
        )
        self._wait_healthy("kube-controller-manager", f"https://127.0.0.1:{port}/healthz", expect="ok")

    def stop_apiserver(self) -> None:
        """Kill kube-apiserver alone (etcd, the scheduler and the controller-manager keep running): clients are
        refused as they would be by an API server that went away (abruptly: no graceful shutdown)."""
        component = self._component("kube-apiserver")
        assert component.process is not None
        component.process.kill()
        component.process.wait(timeout=60)

    def start_apiserver_again(self) -> None:
        """Start kube-apiserver again with the same flags, port and certificates, and wait until it is ready."""
        old = self._component("kube-apiserver")
        self._components.remove(old)
        self._spawn("kube-apiserver", old.args)
        self._wait_healthy("kube-apiserver", f"{self.server}/readyz", expect="ok", token=self.token)

    # Helpers --------------------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> None:
        assert self.workdir is not None
        component = _Component(name=name, args=args, log_path=self.workdir / f"{name}.log")
        log = component.log_path.open("wb")
        try:
            component.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only sets the parent-death signal
            )
        finally:
            log.close()
        self._components.append(component)

    def _component(self, name: str) -> _Component:
        return next(c for c in self._components if c.name == name)

    def _wait_healthy(self, name: str, url: str, expect: str, token: str | None = None) -> None:
        component = self._component(name)
        deadline = time.monotonic() + self.startup_timeout
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the components serve self-signed certs; this only polls health
        last = "no answer yet"
        while time.monotonic() < deadline:
            assert component.process is not None
            code = component.process.poll()
            if code is not None:
                raise ControlPlaneError(f"{name} exited with status {code} while starting")
            request = urllib.request.Request(url)
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=2, context=context) as response:
                    body = response.read().decode(errors="replace")
                if expect in body:
                    return
                last = f"HTTP {response.status}: {body[:200]}"
            except urllib.error.HTTPError as error:
                last = f"HTTP {error.code}: {error.read()[:300].decode(errors='replace')}"
            except (OSError, ssl.SSLError) as error:
                last = str(error)
            time.sleep(0.2)
        raise ControlPlaneError(f"{name} was not healthy at {url} after {self.startup_timeout:.0f}s (last: {last})")

    def _service_account_key(self) -> Path:
        assert self.workdir is not None
        key = self.workdir / "service-account.key"
        if shutil.which("openssl") is None:
            raise ControlPlaneError("openssl is needed to make the service-account signing key; install openssl")
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        return key

    def _write_kubeconfig(self, file_name: str, user: str, token: str) -> Path:
        assert self.workdir is not None and self.ca_path is not None
        path = self.workdir / file_name
        # The apiserver's self-signed bundle (serving cert + its CA) is a valid CA file for clients.
        path.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: portal-test\n"
            "  cluster:\n"
            f"    server: {self.server}\n"
            f"    certificate-authority: {self.ca_path}\n"
            "users:\n"
            f"- name: {user}\n"
            "  user:\n"
            f"    token: {token}\n"
            "contexts:\n"
            "- name: portal-test\n"
            "  context:\n"
            "    cluster: portal-test\n"
            f"    user: {user}\n"
            "current-context: portal-test\n"
        )
        path.chmod(0o600)
        return path

    def _stop_processes(self) -> None:
        # Reverse start order: clients of the apiserver first, etcd last.
        running = [c for c in reversed(self._components) if c.process is not None and c.process.poll() is None]
        for component in running:
            assert component.process is not None
            component.process.terminate()
            try:
                component.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                component.process.kill()
                component.process.wait(timeout=10)

    def _failure_report(self, error: BaseException) -> str:
        lines = [f"The local Kubernetes control plane did not start: {error}", f"Work directory: {self.workdir}"]
        for component in self._components:
            lines.append(f"--- {component.name} ({component.log_path}), last {LOG_TAIL_LINES} lines ---")
            lines.append(component.log_tail())
        self.keep_workdir = True
        return "\n".join(lines)

    def logs(self) -> dict[str, Path]:
        return {component.name: component.log_path for component in self._components}


def main() -> int:
    """Start the control plane, print how to reach it, and keep it up until Ctrl-C."""
    with LocalControlPlane(keep_workdir=True) as plane:
        print(f"control plane ready in {plane.startup_seconds:.1f}s")
        print(f"export KUBECONFIG={plane.kubeconfig_path}")
        print(f"logs in {plane.workdir}")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
