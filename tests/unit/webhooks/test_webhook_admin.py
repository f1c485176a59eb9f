"""Django admin of webhooks: pages render, the secret is hidden on the change form and shown
(and rotated) only on its own page, the delivery log is view-only with its attempts, and
"Redeliver" makes a new, webhook_enqueued delivery."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.utils import timezone

from tests.factories import portal_user
from tests.webhook_factories import SECRET, stored_delivery, stored_endpoint, stored_event
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> Any:
    from types import SimpleNamespace

    w = SimpleNamespace()
    w.client = Client()
    w.client.force_login(portal_user("admin"))
    w.endpoint = stored_endpoint("ticketing", event_types=["vm_request.approved"])
    w.event = stored_event()
    w.delivery = stored_delivery(
        w.endpoint, w.event, status="failed", attempts=2, last_status_code=400, last_error="HTTP 400"
    )
    for number, code in ((1, 500), (2, 400)):
        WebhookAttempt.objects.create(
            delivery=w.delivery,
            number=number,
            started_at=timezone.now(),
            duration_ms=41,
            status_code=code,
            response_excerpt=f"answer {number}",
        )
    return w


def test_pages_render_for_a_superuser(world: Any) -> None:
    pages = [
        "/admin/webhooks/webhookendpoint/",
        "/admin/webhooks/webhookendpoint/add/",
        f"/admin/webhooks/webhookendpoint/{world.endpoint.pk}/change/",
        f"/admin/webhooks/webhookendpoint/{world.endpoint.pk}/secret/",
        "/admin/webhooks/webhookdelivery/",
        "/admin/webhooks/webhookdelivery/?status__exact=failed",
        f"/admin/webhooks/webhookdelivery/{world.delivery.pk}/change/",
        "/admin/webhooks/webhookevent/",
        f"/admin/webhooks/webhookevent/{world.event.pk}/change/",
    ]
    for page in pages:
        assert world.client.get(page).status_code == 200, page


def test_endpoint_list_shows_filter_and_last_delivery_status(world: Any) -> None:
    stored_endpoint("audit", "https://audit.example.com/")
    html = world.client.get("/admin/webhooks/webhookendpoint/").content.decode()
    assert "vm_request.approved" in html
    assert "all events" in html
    # ticketing's latest delivery failed; audit has none
    row = html[html.index("ticketing") :]
    assert "failed" in row[: row.index("</tr>")]
    audit = html[html.index(">audit<") :]
    assert "—" in audit[: audit.index("</tr>")]


def test_change_form_hides_the_secret_and_links_to_its_page(world: Any) -> None:
    html = world.client.get(f"/admin/webhooks/webhookendpoint/{world.endpoint.pk}/change/").content.decode()
    assert SECRET not in html
    assert "••••••••" + SECRET[-4:] in html
    assert f"/admin/webhooks/webhookendpoint/{world.endpoint.pk}/secret/" in html
    assert 'name="event_types"' in html and 'value="vm_request.*"' in html


def test_secret_page_shows_it_uncached(world: Any) -> None:
    response = world.client.get(f"/admin/webhooks/webhookendpoint/{world.endpoint.pk}/secret/")
    assert "no-store" in response["Cache-Control"].split(", ")
    assert SECRET in response.content.decode()


def test_rotate_replaces_the_secret_and_logs_it(world: Any) -> None:
    url = f"/admin/webhooks/webhookendpoint/{world.endpoint.pk}/secret/"
    response = world.client.post(url, {"rotate": "1"})
    assert (response.status_code, response["Location"]) == (302, url)
    world.endpoint.refresh_from_db()
    assert world.endpoint.secret != SECRET and len(world.endpoint.secret) == 43
    entry = LogEntry.objects.get(object_id=str(world.endpoint.pk))
    assert entry.get_change_message() == "Changed secret."
    assert world.endpoint.secret in world.client.get(url).content.decode()


def test_secret_page_needs_the_change_permission(world: Any) -> None:
    from django.contrib.auth.models import Permission

    staff = portal_user("staff", "viewer")
    staff.user_permissions.add(Permission.objects.get(codename="view_webhookendpoint"))
    client = Client()
    client.force_login(staff)
    url = f"/admin/webhooks/webhookendpoint/{world.endpoint.pk}/secret/"
    assert client.get(url).status_code == 403
    assert client.post(url, {"rotate": "1"}).status_code == 403
    world.endpoint.refresh_from_db()
    assert world.endpoint.secret == SECRET
    assert world.client.get("/admin/webhooks/webhookendpoint/999/secret/").status_code == 404
    assert Client().get(url).status_code == 302  # anonymous: to the login page


def test_adding_an_endpoint_generates_a_secret_and_shows_it(world: Any) -> None:
    response = world.client.post(
        "/admin/webhooks/webhookendpoint/add/",
        {
            "name": "jira",
            "url": "https://jira.example.com/hook",
            "event_types": ["vm_request.*"],
            "active": "on",
        },
    )
    endpoint = WebhookEndpoint.objects.get(name="jira")
    assert response.status_code == 302
    assert response["Location"] == f"/admin/webhooks/webhookendpoint/{endpoint.pk}/secret/"
    assert endpoint.event_types == ["vm_request.*"]
    assert len(endpoint.secret) == 43


def test_add_form_refuses_a_non_http_url(world: Any) -> None:
    response = world.client.post(
        "/admin/webhooks/webhookendpoint/add/",
        {"name": "ftp", "url": "ftp://x.example.com/", "active": "on"},
    )
    assert response.status_code == 200
    assert not WebhookEndpoint.objects.filter(name="ftp").exists()


def test_delivery_page_shows_the_attempts_read_only(world: Any) -> None:
    url = f"/admin/webhooks/webhookdelivery/{world.delivery.pk}/change/"
    html = world.client.get(url).content.decode()
    assert "answer 1" in html and "answer 2" in html
    assert 'name="status"' not in html  # read-only
    assert world.client.post(url, {"status": "succeeded"}).status_code == 403
    assert world.client.get("/admin/webhooks/webhookdelivery/add/").status_code == 403
    world.delivery.refresh_from_db()
    assert world.delivery.status == "failed"


def test_redeliver_action(
    world: Any, webhook_enqueued: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    off = stored_endpoint("off", "https://off.example.com/", active=False)
    to_off = stored_delivery(off, world.event, status="failed")
    with django_capture_on_commit_callbacks(execute=True):
        response = world.client.post(
            "/admin/webhooks/webhookdelivery/",
            {"action": "redeliver", "_selected_action": [world.delivery.pk, to_off.pk]},
            follow=True,
        )
    new = WebhookDelivery.objects.get(redelivery_of=world.delivery)
    assert (new.endpoint_id, new.event_id, new.status, new.attempts) == (
        world.endpoint.pk,
        world.event.pk,
        "pending",
        0,
    )
    assert webhook_enqueued == [new.pk]
    assert not WebhookDelivery.objects.filter(redelivery_of=to_off).exists()
    html = response.content.decode()
    assert "1 redelivery queued." in html
    assert "1 delivery skipped: its endpoint is inactive." in html


def test_redeliver_needs_the_change_permission(world: Any, webhook_enqueued: list[int]) -> None:
    from django.contrib.auth.models import Permission

    staff = portal_user("staff", "viewer")
    staff.user_permissions.add(Permission.objects.get(codename="view_webhookdelivery"))
    client = Client()
    client.force_login(staff)
    html = client.get("/admin/webhooks/webhookdelivery/").content.decode()
    assert 'value="redeliver"' not in html
    client.post(
        "/admin/webhooks/webhookdelivery/", {"action": "redeliver", "_selected_action": [world.delivery.pk]}
    )
    assert WebhookDelivery.objects.count() == 1 and webhook_enqueued == []


def test_the_admin_urls_of_before_the_move_redirect(world: Any) -> None:
    """Links to ``/admin/vmrequests/webhook…/`` (bookmarks, old mails) land on the same page."""
    old = f"/admin/vmrequests/webhookendpoint/{world.endpoint.pk}/change/"
    response = world.client.get(old)
    assert (response.status_code, response["Location"]) == (
        301,
        f"/admin/webhooks/webhookendpoint/{world.endpoint.pk}/change/",
    )
    listing = world.client.get("/admin/vmrequests/webhookdelivery/?status__exact=failed")
    assert listing["Location"] == "/admin/webhooks/webhookdelivery/?status__exact=failed"
    # The requests app's own admin pages are not redirected.
    assert world.client.get("/admin/vmrequests/team/").status_code == 200


def test_models_content_types_and_permissions_belong_to_the_webhooks_app() -> None:
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent

    models = (WebhookEndpoint, WebhookEvent, WebhookDelivery, WebhookAttempt)
    assert [m._meta.db_table for m in models] == [
        "vmrequests_webhookendpoint",
        "vmrequests_webhookevent",
        "vmrequests_webhookdelivery",
        "vmrequests_webhookattempt",
    ]
    assert {ContentType.objects.get_for_model(m).app_label for m in models} == {"webhooks"}
    assert not ContentType.objects.filter(app_label="vmrequests", model__startswith="webhook").exists()
    codenames = Permission.objects.filter(content_type__app_label="webhooks").values_list(
        "codename", flat=True
    )
    assert "change_webhookdelivery" in set(codenames) and len(codenames) == 16
