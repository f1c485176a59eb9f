"""The Celery app loads its configuration from Django settings (CONVENTIONS "Background work")."""

from __future__ import annotations

import os
from typing import Any

import pytest

from portal.celery import app


def test_reliability_settings() -> None:
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_soft_time_limit == 300
    assert conf.task_time_limit == 330
    assert conf.task_serializer == "json"
    assert conf.accept_content == ["json"]
    assert conf.task_ignore_result is True


def test_broker_follows_the_environment() -> None:
    expected = os.environ.get("CELERY_BROKER_URL") or "portalfs://localhost/"
    assert app.conf.broker_url == expected


@pytest.mark.django_db
def test_static_beat_schedule_and_registered_tasks() -> None:
    app.loader.import_default_modules()
    assert app.conf.beat_schedule["portal-heartbeat"] == {"task": "portal.heartbeat", "schedule": 60.0}
    assert {"portal.heartbeat", "portal.ping"} <= set(app.tasks)


def test_the_embedded_broker_writes_messages_atomically(tmp_path: Any) -> None:
    """A message file appears complete under its final name (portal/kombu_fs.py); no partial
    file is left behind, and kombu reads it back."""
    from kombu import Connection

    from portal import kombu_fs

    kombu_fs.register()
    folder = tmp_path / "q"
    folder.mkdir()
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder), "store_processed": False}
    with Connection("portalfs://localhost/", transport_options=options) as conn:
        queue = conn.SimpleQueue("atomic-test")
        queue.put({"hello": "world"})
        names = sorted(p.name for p in folder.iterdir())
        assert len(names) == 1 and names[0].endswith(".atomic-test.msg")
        message = queue.get(timeout=5)
        assert message.payload == {"hello": "world"}
        message.ack()
        queue.close()
    assert sorted(p.name for p in folder.iterdir()) == []
