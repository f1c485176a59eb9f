"""Fixtures of the security tests (#14): the API tests' ``world``, empty cache and recorded
task sends (``tests/unit/api/conftest.py``) apply here too."""

from __future__ import annotations

from tests.unit.api.conftest import _empty_cache, enqueued, world

__all__ = ["_empty_cache", "enqueued", "world"]
