"""``VMRequest.lease_extended_days``: the days granted extensions added, so that the team's
maximum lease caps the lease in total. Existing rows are filled from their timeline (the
``days`` of every ``extension_approve`` event)."""

from typing import Any

from django.db import migrations, models


def fill_from_timeline(apps: Any, schema_editor: Any) -> None:
    event_model = apps.get_model("vmrequests", "VMRequestEvent")
    request_model = apps.get_model("vmrequests", "VMRequest")
    granted: dict[int, int] = {}
    for request_id, data in event_model.objects.filter(action="extension_approve").values_list(
        "request_id", "data"
    ):
        days = data.get("days") if isinstance(data, dict) else None
        if isinstance(days, int) and days > 0:
            granted[request_id] = granted.get(request_id, 0) + days
    for request_id, days in granted.items():
        request_model.objects.filter(pk=request_id).update(lease_extended_days=days)


class Migration(migrations.Migration):
    dependencies = [
        ("vmrequests", "0005_request_length_caps"),
    ]

    operations = [
        migrations.AddField(
            model_name="vmrequest",
            name="lease_extended_days",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Days added to the lease by granted extensions, in total.",
                verbose_name="lease extended by (days)",
            ),
        ),
        migrations.RunPython(fill_from_timeline, migrations.RunPython.noop),
    ]
