"""Migration ``vmrequests.0005_request_length_caps`` on a database holding over-long rows.

The rows are written at ``0004`` (unbounded text columns), then the database is migrated
forward. PostgreSQL's ``ALTER COLUMN ... USING col::varchar(n)`` would silently cut longer
values, so the data step must make them fit first (an ellipsis shows the cut), keep the
originals in the timeline, and refuse what it cannot fit without changing a key.
Runs on SQLite and, with ``DATABASE_URL=postgres://...``, on PostgreSQL (docs/testing.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.vmrequest_factories import ssh_public_key

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("vmrequests", "0004_webhooks")]
AFTER = [("vmrequests", "0005_request_length_caps")]


def _migrate(target: list[tuple[str, str]]) -> Any:
    """Migrate to ``target``; the historical apps of that state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.fixture
def old_apps() -> Iterator[Any]:
    """The apps at 0004; the database is migrated back to the latest state afterwards."""
    apps = _migrate(BEFORE)
    yield apps
    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def _old_request(apps: Any, **fields: Any) -> Any:
    user_model = apps.get_model("auth", "User")
    team_model = apps.get_model("vmrequests", "Team")
    image_model = apps.get_model("vmrequests", "VmImage")
    user, _ = user_model.objects.get_or_create(username="ana")
    team, _ = team_model.objects.get_or_create(
        slug="quant", defaults={"name": "Quant", "namespace": "team-quant"}
    )
    image, _ = image_model.objects.get_or_create(
        name="Ubuntu 22.04", defaults={"image": "quay.io/x:1", "os": "Ubuntu"}
    )
    values = {
        "mode": "passthrough",
        "device_count": 1,
        "cpu_cores": 4,
        "memory_gib": 16,
        "lease_days": 7,
        "vmi_namespace": "team-quant",
        "status": "running",
        **fields,
    }
    return apps.get_model("vmrequests", "VMRequest").objects.create(
        requester=user, team=team, image=image, **values
    )


def test_long_rows_are_cut_to_fit_and_the_originals_kept_in_the_timeline(old_apps: Any) -> None:
    key = ssh_public_key("ed25519", "analyst@laptop")
    long_key = key + " " + "c" * 9000
    long_text = "j" * 50_000
    fine = _old_request(old_apps, ssh_public_key=key, justification="Short and fine.")
    cut = _old_request(old_apps, ssh_public_key=long_key, justification=long_text)

    apps = _migrate(AFTER)

    request_model = apps.get_model("vmrequests", "VMRequest")
    kept, changed = request_model.objects.get(pk=fine.pk), request_model.objects.get(pk=cut.pk)
    assert (kept.ssh_public_key, kept.justification) == (key, "Short and fine.")
    assert changed.justification == "j" * 1999 + "…"
    assert len(changed.ssh_public_key) == 8192
    assert changed.ssh_public_key == (key + " " + "c" * 9000)[:8192]
    assert changed.ssh_public_key.split()[:2] == key.split()[:2]
    notes = apps.get_model("vmrequests", "VMRequestEvent").objects.filter(request_id=cut.pk).order_by("pk")
    assert [(n.actor_label, n.action, n.from_status, n.to_status) for n in notes] == [
        ("system", "note", "running", "running"),
        ("system", "note", "running", "running"),
    ]
    assert [n.data for n in notes] == [
        {"field": "ssh_public_key", "original_length": len(long_key), "original": long_key},
        {"field": "justification", "original_length": 50_000, "original": long_text},
    ]
    assert notes[1].message == (
        "The justification had 50000 characters, more than the database now holds; 1999 were kept. "
        "The full text is in this entry's data."
    )
    assert not apps.get_model("vmrequests", "VMRequestEvent").objects.filter(request_id=fine.pk).exists()


def test_a_key_whose_body_alone_does_not_fit_stops_the_migration_unchanged(old_apps: Any) -> None:
    req = _old_request(
        old_apps, ssh_public_key="ssh-rsa " + "A" * 9000 + " me@host", justification="j" * 3000
    )
    with pytest.raises(RuntimeError) as refused:
        _migrate(AFTER)
    assert str(refused.value) == (
        f"VM requests #{req.pk} have an SSH public key whose type and key body alone are longer than 8192 "
        "characters, so it cannot be shortened without changing the key. Replace those keys (or delete the "
        "requests), then run the migration again."
    )
    row = old_apps.get_model("vmrequests", "VMRequest").objects.get(pk=req.pk)
    assert (len(row.ssh_public_key), len(row.justification)) == (9016, 3000)
    assert not old_apps.get_model("vmrequests", "VMRequestEvent").objects.exists()
    old_apps.get_model("vmrequests", "VMRequest").objects.filter(pk=req.pk).delete()
