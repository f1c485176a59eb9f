"""A small informer: list + watch with resync, ``410 Gone`` recovery and a local cache of raw dicts.

Mirrors client-go's reflector (``k8s.io/client-go/tools/cache/reflector.go``): list (paginated), then
watch from the list's resourceVersion with bookmarks; on ``410`` (``ERROR`` event or HTTP status) or any
other failure, relist; every ``resync_seconds`` relist anyway and deliver a synthetic event for each
object so controllers converge even if they missed something. Objects stay plain JSON dicts (the
generated models are slow and lossy for CRs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Handler = Callable[[str, Obj], None]
"""Called with (event type ``ADDED``/``MODIFIED``/``DELETED``/``SYNC``, object)."""


def obj_key(obj: Obj) -> str:
    """``namespace/name`` or ``name`` for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def call_json(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a generated client method without model deserialisation and return the parsed JSON body.

    Raises:
        ApiException: for a non-2xx status (same as the normal client path).
    """
    resp = fn(*args, _preload_content=False, **kwargs)
    status = getattr(resp, "status", 200)
    data = resp.data
    if not 200 <= int(status) <= 299:
        raise ApiException(status=int(status), reason=getattr(resp, "reason", ""), http_resp=resp)
    return json.loads(data) if data else None


class Informer:
    """List+watch one resource type into ``store`` and call ``handler`` for every change.

    Args:
        name: For logs and the thread name.
        list_fn: A generated ``list_*`` method (core or ``CustomObjectsApi``), partially applied to its
            positional args; it must accept ``watch``, ``resource_version``, ``timeout_seconds``,
            ``allow_watch_bookmarks``, ``limit`` and ``_continue``.
        handler: Event callback (exceptions are logged, never kill the thread).
        stop: Set to stop the thread.
        resync_seconds: Relist period.
        watch_timeout: Server-side watch timeout; bounds how long :meth:`join` waits after ``stop``.
        label_selector: Optional label selector for list and watch.
    """

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        handler: Handler,
        stop: threading.Event,
        resync_seconds: float = 30.0,
        watch_timeout: int = 5,
        label_selector: str | None = None,
    ) -> None:
        self.name = name
        self._list_fn = list_fn
        self._handler = handler
        self._stop = stop
        self._resync = resync_seconds
        self._watch_timeout = watch_timeout
        self._selector = label_selector
        self._lock = threading.Lock()
        self._store: dict[str, Obj] = {}
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sim-{name}", daemon=True)
        self._resp: Any = None

    # -- cache access
    def get(self, key: str) -> Obj | None:
        """Cached object by :func:`obj_key`, or ``None``."""
        with self._lock:
            return self._store.get(key)

    def items(self) -> list[Obj]:
        """Snapshot of all cached objects."""
        with self._lock:
            return list(self._store.values())

    def put(self, obj: Obj) -> None:
        """Write-through after our own successful write (like the scheduler's assume cache)."""
        with self._lock:
            self._store[obj_key(obj)] = obj

    # -- lifecycle
    def start(self) -> None:
        """Start the background thread."""
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the thread after ``stop`` was set; closes an open watch response to speed it up."""
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):  # best effort, the thread exits on its own too
                resp.close()
        self._thread.join(timeout)

    def _emit(self, kind: str, obj: Obj) -> None:
        try:
            self._handler(kind, obj)
        except Exception:
            log.exception("%s: handler failed for %s %s", self.name, kind, obj_key(obj))

    def _selector_kw(self) -> dict[str, Any]:
        return {"label_selector": self._selector} if self._selector else {}

    def _list(self) -> str:
        items: list[Obj] = []
        cont: str | None = None
        rv = ""
        while True:
            kw: dict[str, Any] = {"limit": 500, **self._selector_kw()}
            if cont:
                kw["_continue"] = cont
            body = call_json(self._list_fn, **kw)
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or "")
            cont = meta.get("continue") or None
            if not cont:
                break
        fresh = {obj_key(o): o for o in items}
        with self._lock:
            gone = [o for k, o in self._store.items() if k not in fresh]
            self._store = fresh
        for obj in gone:
            self._emit("DELETED", obj)
        for obj in items:
            self._emit("SYNC", obj)
        self.synced.set()
        return rv

    def _watch(self, rv: str, until: float) -> str | None:
        """Stream events from ``rv``; return the last RV, or ``None`` when a relist is needed (410)."""
        from kubernetes.watch.watch import iter_resp_lines

        while not self._stop.is_set() and time.monotonic() < until:
            resp = self._list_fn(
                watch=True,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout,
                _preload_content=False,
                **self._selector_kw(),
            )
            self._resp = resp
            try:
                if int(getattr(resp, "status", 200)) == 410:
                    return None
                for line in iter_resp_lines(resp):
                    if not line:
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            return None
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if kind == "BOOKMARK":
                        continue
                    key = obj_key(obj)
                    with self._lock:
                        if kind == "DELETED":
                            self._store.pop(key, None)
                        else:
                            self._store[key] = obj
                    self._emit(str(kind), obj)
                    if self._stop.is_set():
                        return rv
            finally:
                self._resp = None
                resp.close()
                resp.release_conn()
        return rv

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                rv: str | None = self._list()
                backoff = 0.2
                until = time.monotonic() + self._resync
                while rv is not None and not self._stop.is_set() and time.monotonic() < until:
                    rv = self._watch(rv, until)
                if rv is None:
                    log.info("%s: watch expired (410), relisting", self.name)
            except Exception as exc:  # network errors, 5xx, server shutting down
                if self._stop.is_set():
                    break
                log.warning("%s: list/watch failed (%s), retrying in %.1fs", self.name, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
