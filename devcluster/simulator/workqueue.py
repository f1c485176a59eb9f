"""A delaying, de-duplicating work queue with one worker thread (client-go ``workqueue`` in small)."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class WorkQueue:
    """Keys are processed one at a time by ``reconcile``; a key is queued at most once (earliest due wins).

    ``reconcile(key)`` returns ``None`` when done or a number of seconds after which to run it again.

    Args:
        name: Thread name suffix.
        reconcile: The controller's level-based reconcile function.
        stop: Set to stop the worker.
    """

    def __init__(self, name: str, reconcile: Callable[[str], float | None], stop: threading.Event) -> None:
        self.name = name
        self._reconcile = reconcile
        self._stop = stop
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}
        self._seq = 0
        self._thread = threading.Thread(target=self._run, name=f"sim-{name}", daemon=True)

    def add(self, key: str, delay: float = 0.0) -> None:
        """Queue ``key`` to run after ``delay`` seconds (kept earlier if already queued sooner)."""
        due = time.monotonic() + max(0.0, delay)
        with self._cond:
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, key))
            self._cond.notify()

    def start(self) -> None:
        """Start the worker thread."""
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wake and wait for the worker (after ``stop`` was set)."""
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout)

    def _next(self) -> str | None:
        with self._cond:
            while not self._stop.is_set():
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded entry
                if self._heap and self._heap[0][0] <= now:
                    _, _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    return key
                timeout = (self._heap[0][0] - now) if self._heap else 1.0
                self._cond.wait(min(timeout, 1.0))
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            key = self._next()
            if key is None:
                return
            try:
                again = self._reconcile(key)
            except Exception:
                log.exception("%s: reconcile %s failed; retrying", self.name, key)
                again = 1.0
            if again is not None:
                self.add(key, again)
