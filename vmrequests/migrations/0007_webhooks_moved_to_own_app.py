from django.db import migrations


class Migration(migrations.Migration):
    """The webhook models now belong to the app ``webhooks`` (its ``0001_initial`` took them over
    with the same tables): drop them from this app's migration state only. No table is
    touched."""

    dependencies = [
        ("vmrequests", "0006_vmrequest_lease_extended_days"),
        ("webhooks", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name="WebhookAttempt"),
                migrations.DeleteModel(name="WebhookDelivery"),
                migrations.DeleteModel(name="WebhookEndpoint"),
                migrations.DeleteModel(name="WebhookEvent"),
            ],
        ),
    ]
