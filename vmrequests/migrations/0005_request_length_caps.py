"""Cap a request's justification (2,000 characters) and SSH public key (8,192) in the database.

Rows stored before the caps may be longer (the form once accepted 50,000 characters). Django's
``ALTER COLUMN ... TYPE varchar(n) USING col::varchar(n)`` would not fail on PostgreSQL: an
explicit cast to ``varchar(n)`` silently cuts longer values, so text would vanish without a
trace and a key could lose part of its body. So the data step runs first and makes every row
fit, losing nothing:

- a justification over 2,000 characters is cut to 1,999 and "…";
- an SSH key line over 8,192 characters keeps its type and key body and has its comment cut
  (the comment is only a label: the key stays the same key);
- each cut row gets a "note" timeline entry (actor "system") whose data holds the full original.

A key whose type and body alone are longer than 8,192 characters cannot be made to fit without
changing the key: the migration then stops before changing anything, naming the requests.
The numbers are written out here, not imported: a migration must not change when the code does.
"""

from typing import Any

from django.db import migrations, models
from django.db.models.functions import Length

JUSTIFICATION_CAP = 2000
KEY_CAP = 8192


def _cut_key(key: str) -> str | None:
    """``key`` with its comment cut to fit ``KEY_CAP``; None when type + body alone do not fit."""
    tokens = key.split()
    head = " ".join(tokens[:2])
    if len(head) > KEY_CAP:
        return None
    room = KEY_CAP - len(head) - 1
    comment = " ".join(tokens[2:])[:room].strip() if room > 0 else ""
    return f"{head} {comment}" if comment else head


def _note(event_model: Any, req: Any, field: str, original: str, kept: int) -> None:
    event_model.objects.create(
        request=req,
        actor=None,
        actor_label="system",
        action="note",
        from_status=req.status,
        to_status=req.status,
        message=(
            f"The {field.replace('_', ' ')} had {len(original)} characters, more than the database now "
            f"holds; {kept} were kept. The full text is in this entry's data."
        ),
        data={"field": field, "original_length": len(original), "original": original},
    )


def fit_long_rows(apps: Any, schema_editor: Any) -> None:
    """Make every justification and SSH key fit the new caps (module docstring)."""
    request_model = apps.get_model("vmrequests", "VMRequest")
    event_model = apps.get_model("vmrequests", "VMRequestEvent")
    long_keys = request_model.objects.annotate(n=Length("ssh_public_key")).filter(n__gt=KEY_CAP)
    unfixable = sorted(
        r.pk for r in long_keys.only("pk", "ssh_public_key") if _cut_key(r.ssh_public_key) is None
    )
    if unfixable:
        raise RuntimeError(
            f"VM requests {', '.join(f'#{pk}' for pk in unfixable)} have an SSH public key whose type and "
            f"key body alone are longer than {KEY_CAP} characters, so it cannot be shortened without "
            "changing the key. Replace those keys (or delete the requests), then run the migration again."
        )
    for req in long_keys.order_by("pk"):
        original = req.ssh_public_key
        req.ssh_public_key = _cut_key(original)
        req.save(update_fields=["ssh_public_key"])
        _note(event_model, req, "ssh_public_key", original, len(req.ssh_public_key))
    long_texts = request_model.objects.annotate(n=Length("justification")).filter(n__gt=JUSTIFICATION_CAP)
    for req in long_texts.order_by("pk"):
        original = req.justification
        req.justification = original[: JUSTIFICATION_CAP - 1] + "…"
        req.save(update_fields=["justification"])
        _note(event_model, req, "justification", original, JUSTIFICATION_CAP - 1)
    if schema_editor.connection.vendor == "postgresql":
        # The timeline rows' deferred foreign-key checks must not be pending when the next
        # operations ALTER the table ("cannot ALTER TABLE ... because it has pending trigger events").
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("vmrequests", "0004_webhooks"),
    ]

    operations = [
        migrations.RunPython(fit_long_rows, migrations.RunPython.noop, elidable=False),
        migrations.AlterField(
            model_name="vmrequest",
            name="justification",
            field=models.CharField(max_length=2000, verbose_name="justification"),
        ),
        migrations.AlterField(
            model_name="vmrequest",
            name="ssh_public_key",
            field=models.CharField(max_length=8192, verbose_name="SSH public key"),
        ),
    ]
