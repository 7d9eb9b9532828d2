"""``KubernetesCacheMixin``: the watch caches of ``KubernetesBackend`` (cluster/kubernetes.py), from which its
``list_nodes``, ``list_pods`` and ``list_workloads`` answer once the setting PORTAL_K8S_WATCH_CACHE is on.

Four informers (cluster/informer.py), each made by the first read that needs it: every node; every pod (the
inventory sync and the node drain read all of them); the portal's pods (``MANAGED_SELECTOR``, what the job and
service passes read, taken from the every-pod cache instead when this process already keeps that one); the portal's
Jobs (batch/v1, ``MANAGED_SELECTOR``). Any other pod selector (a smoke test's, the DCGM exporter's) is filtered from
the every-pod cache when there is one and otherwise listed directly, as before. Lists and watches here read the API
server's JSON as it comes (``_preload_content=False``), not through the client's models: a watch delivering 20,000
Jobs would spend seconds building models only to turn them back into dicts.

Read-your-writes: the answer of the portal's own create (Job) or patch (node labels) goes into the cache at once, and
its own delete takes the object out (with a tombstone, so an older event cannot bring it back). The job pass marks a
job lost when its Job is missing, so a missing Job must mean missing: the resourceVersion of every write is noted
(``WriteMarks``; shared between processes through Django's cache when the backend is built by ``get_backend``), and a
read first waits until its watch has reached the newest one noted, listing again itself if it does not within a few
seconds. A watch that has been down longer than ``STALE_AFTER_SECONDS`` is not trusted either: the read lists.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from .base import MANAGED_SELECTOR, ClusterError, KubeObject
from .informer import Expired, Informer, rv_number
from .label_selectors import label_matcher

#: Page size for the caches' lists (as the backend's own LIST_PAGE_SIZE).
CACHE_PAGE_SIZE = 500


def _tidy(obj: KubeObject, api_version: str, kind: str) -> KubeObject:
    """An object as ``kubectl get -o json`` prints it: apiVersion and kind filled in (list items lack them),
    managedFields dropped (memory: they are often half the object)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", kind)
    return obj


class _WatchStream:
    """An open watch response: iterating yields its events, ``close()`` (from any thread) ends it."""

    def __init__(self, response: Any, api_version: str, kind: str) -> None:
        self.response, self.api_version, self.kind = response, api_version, kind

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in iter_resp_lines(self.response):
            if not line:
                continue
            event = json.loads(line)
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and isinstance(event.get("object"), dict):
                _tidy(event["object"], self.api_version, self.kind)
            yield event

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.response.shutdown()  # unblocks a read in another thread (urllib3 >= 2.3)
        with contextlib.suppress(Exception):
            self.response.close()
            self.response.release_conn()


class WriteMarks:
    """The newest resourceVersion the portal wrote, per cache ("jobs", "nodes"). This one is the process's own;
    ``SharedWriteMarks`` shares them between processes."""

    def __init__(self) -> None:
        self._marks: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, resource: str, resource_version: str | None) -> None:
        number = rv_number(resource_version)
        if number is None:
            return
        with self._lock:
            self._marks[resource] = max(number, self._marks.get(resource, 0))

    def newest(self, resource: str) -> str | None:
        with self._lock:
            number = self._marks.get(resource)
        return None if number is None else str(number)


class SharedWriteMarks(WriteMarks):
    """Write marks kept in Django's cache as well, so a worker process's read waits for what another one wrote
    (a shared cache such as Redis, CACHE_URL; with the default per-process cache this is ``WriteMarks``). Raising the
    shared mark is a read then a write, not atomic: two processes writing at once may leave the lower of their two
    marks, which the next write of either corrects; each process's own mark is always kept in full."""

    KEY = "gpuportal:kubernetes-write-rv:{}"

    def __init__(self, scope: str = "") -> None:
        super().__init__()
        #: The cluster the marks belong to: resourceVersions of two clusters are not comparable. The settings
        #: cluster keeps the unscoped key it always had.
        self.key = f"gpuportal:kubernetes-write-rv:{scope}:{{}}" if scope else self.KEY

    def note(self, resource: str, resource_version: str | None) -> None:
        super().note(resource, resource_version)
        number = rv_number(resource_version)
        if number is None:
            return
        from django.core.cache import cache  # noqa: PLC0415 - the backend itself needs no Django

        with contextlib.suppress(Exception):  # a cache outage must not fail a write that was made
            if number > int(cache.get(self.key.format(resource)) or 0):
                cache.set(self.key.format(resource), number, timeout=None)

    def newest(self, resource: str) -> str | None:
        from django.core.cache import cache  # noqa: PLC0415

        own = rv_number(super().newest(resource)) or 0
        try:
            shared = int(cache.get(self.key.format(resource)) or 0)
        except Exception:  # noqa: BLE001 - without the cache, this process's own mark still holds
            shared = 0
        best = max(own, shared)
        return str(best) if best else None


class KubernetesCacheMixin:
    """The watch caches; needs the backend's ``core``, ``batch``, ``_call``, ``request_timeout``."""

    watch_cache: bool = False
    #: (shortest, longest) watch in seconds, before the server ends it and the informer resumes.
    watch_timeout: tuple[int, int] = (240, 480)
    write_marks: WriteMarks

    def _init_cache(self, watch_cache: bool, watch_timeout: tuple[int, int] | None, write_marks) -> None:
        self.watch_cache = watch_cache
        if watch_timeout is not None:
            self.watch_timeout = watch_timeout
        self.write_marks = write_marks or WriteMarks()
        self._informers: dict[str, Informer] = {}
        self._informers_pid = os.getpid()
        self._informers_lock = threading.Lock()

    # The informers --------------------------------------------------------------------------------------------------
    def _sources(self, name: str) -> tuple[str, Callable[..., Any], str, str, dict[str, Any]]:
        """(what, client function listing all namespaces, apiVersion, kind, extra arguments) of each cache."""
        return {
            "nodes": ("List nodes", self.core.list_node, "v1", "Node", {}),
            "pods": ("List pods in all namespaces", self.core.list_pod_for_all_namespaces, "v1", "Pod", {}),
            "pods-managed": (
                "List the portal's pods in all namespaces", self.core.list_pod_for_all_namespaces, "v1", "Pod",
                {"label_selector": MANAGED_SELECTOR},
            ),
            "jobs": (
                "List portal jobs in all namespaces", self.batch.list_job_for_all_namespaces, "batch/v1", "Job",
                {"label_selector": MANAGED_SELECTOR},
            ),
        }[name]  # fmt: skip

    def informer(self, name: str, *, create: bool = True) -> Informer | None:
        """This process's informer ``name`` (made, not started, when missing and ``create``). After a fork the
        parent's informers are dropped: their threads did not come along."""
        if self._informers_pid != os.getpid():
            self._informers, self._informers_pid, self._informers_lock = {}, os.getpid(), threading.Lock()
        with self._informers_lock:
            found = self._informers.get(name)
            if found is None and create:
                what, func, api_version, kind, extra = self._sources(name)
                found = self._informers[name] = Informer(
                    name,
                    lambda: self._raw_list(what, func, api_version, kind, **extra),
                    lambda rv, timeout: self._open_watch(what, func, api_version, kind, rv, timeout, **extra),
                    watch_timeout=self.watch_timeout,
                )
            return found

    def _drop(self, name: str) -> None:
        with self._informers_lock:
            dropped = self._informers.pop(name, None)
        if dropped is not None:
            dropped.stop()

    def stop_informers(self) -> None:
        """Stop every watch thread and forget the caches (tests; a process that shuts down)."""
        with self._informers_lock:
            informers, self._informers = list(self._informers.values()), {}
        for informer in informers:
            informer.stop()

    def _raw_list(
        self, what: str, func: Callable[..., Any], api_version: str, kind: str, **kwargs: Any
    ) -> tuple[list[KubeObject], str]:
        items: list[KubeObject] = []
        resource_version, continue_token = "", None
        while True:
            page_kwargs = dict(kwargs, limit=CACHE_PAGE_SIZE, _preload_content=False)
            if continue_token:
                page_kwargs["_continue"] = continue_token
            response = self._call(what, func, **page_kwargs)
            try:
                page = json.loads(response.data)
            finally:
                response.release_conn()
            metadata = page.get("metadata") or {}
            resource_version = resource_version or metadata.get("resourceVersion", "")
            items.extend(_tidy(item, api_version, kind) for item in page.get("items") or [])
            continue_token = metadata.get("continue")
            if not continue_token:
                return items, resource_version

    def _open_watch(
        self, what: str, func: Callable[..., Any], api_version: str, kind: str, rv: str, timeout: int, **kwargs: Any
    ) -> _WatchStream:
        try:
            response = func(
                watch=True,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                # The server ends the watch at timeout_seconds; the read timeout is only a backstop.
                _request_timeout=(self.request_timeout, timeout + self.request_timeout),
                **kwargs,
            )
        except ApiException as error:
            if error.status == 410:
                raise Expired(f"{what}: resourceVersion {rv} is gone (410)") from error
            raise ClusterError(f"Watch ({what}) from resourceVersion {rv} failed with HTTP {error.status}") from error
        return _WatchStream(response, api_version, kind)

    # Answers ---------------------------------------------------------------------------------------------------------
    def _fresh(self, name: str, *, create: bool = True) -> Informer | None:
        informer = self.informer(name, create=create)
        if informer is not None:
            # Only the caches the portal writes to wait for its writes (a pod cache has no event to reach a Job's).
            informer.fresh(at_least=self.write_marks.newest(name) if name in ("nodes", "jobs") else None)
        return informer

    def _cached_nodes(self, label_selector: str | None) -> tuple[list[KubeObject], str]:
        informer = self._fresh("nodes")
        matches = label_matcher(label_selector)
        items = informer.items((lambda node: matches(node["metadata"].get("labels"))) if label_selector else None)
        return items, informer.resource_version

    def _cached_pods(self, namespace: str | None, label_selector: str | None) -> list[KubeObject] | None:
        """The pods from a cache, or None when no cache serves that selector (the caller lists directly)."""
        every = self.informer("pods", create=label_selector is None)
        if every is None and label_selector == MANAGED_SELECTOR:
            informer = self._fresh("pods-managed")
            matches = None
        elif every is not None:
            informer = self._fresh("pods")
            matches = label_matcher(label_selector) if label_selector else None
            self._drop("pods-managed")  # the every-pod cache holds them too
        else:
            return None
        if namespace is None and matches is None:
            return informer.items()
        return informer.items(
            lambda pod: (namespace is None or pod["metadata"].get("namespace") == namespace)
            and (matches is None or matches(pod["metadata"].get("labels")))
        )

    def _cached_workloads(self, namespace: str | None) -> list[KubeObject]:
        informer = self._fresh("jobs")
        if namespace is None:
            return informer.items()
        return informer.items(lambda job: job["metadata"].get("namespace") == namespace)

    # The portal's own writes -----------------------------------------------------------------------------------------
    def _wrote(self, name: str, obj: KubeObject) -> None:
        """A create or patch answered ``obj``: note its resourceVersion and put it in the cache."""
        if not self.watch_cache:
            return
        self.write_marks.note(name, (obj.get("metadata") or {}).get("resourceVersion"))
        informer = self.informer(name, create=False)
        if informer is not None:
            informer.wrote(copy.deepcopy(obj))  # the caller keeps its answer; the cache keeps its own

    def _deleted(self, name: str, namespace: str | None, object_name: str) -> None:
        """A delete was made (or found the object gone): out of the cache now."""
        if not self.watch_cache:
            return
        informer = self.informer(name, create=False)
        if informer is not None:
            informer.deleted(namespace, object_name)
