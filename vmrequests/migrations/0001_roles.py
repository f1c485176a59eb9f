"""Create the analysts/approvers groups and the approve_vmrequest permission.

The permission's content type is ``vmrequests.vmrequest``; the VMRequest model arrives with
the requests issue and will declare the same permission in ``Meta.permissions``, so
``post_migrate`` then finds this row instead of creating a second one.
"""

from django.db import migrations


def create_roles(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.get_or_create(app_label="vmrequests", model="vmrequest")
    approve, _ = Permission.objects.get_or_create(
        content_type=content_type,
        codename="approve_vmrequest",
        defaults={"name": "Can approve or reject VM requests"},
    )
    Group.objects.get_or_create(name="analysts")
    approvers, _ = Group.objects.get_or_create(name="approvers")
    approvers.permissions.add(approve)


def remove_roles(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    Group.objects.filter(name__in=["analysts", "approvers"]).delete()
    Permission.objects.filter(content_type__app_label="vmrequests", codename="approve_vmrequest").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
