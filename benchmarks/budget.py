"""A wall-clock budget for benchmark scripts, so a stuck run stops by itself."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


class BudgetExceeded(Exception):
    """The ``--budget`` watchdog fired."""


@contextlib.contextmanager
def watchdog(seconds: int) -> Iterator[None]:
    """Raise :class:`BudgetExceeded` in the main thread after ``seconds`` (``SIGALRM``).

    Args:
        seconds: the budget; the previous SIGALRM handler is restored on exit.
    """

    def fire(signum: int, frame: FrameType | None) -> None:
        raise BudgetExceeded(f"the benchmark ran longer than --budget {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
