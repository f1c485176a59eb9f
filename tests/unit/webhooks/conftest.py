"""Fixtures shared by the request unit tests."""

from __future__ import annotations

import pytest

from webhooks import tasks


@pytest.fixture
def webhook_enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Delivery IDs handed to the broker (``vmrequests.webhook_deliver`` messages)."""
    sent: list[int] = []
    monkeypatch.setattr(tasks.webhook_deliver, "apply_async", lambda args, **kw: sent.append(args[0]))
    return sent
