"""Destructive request actions ask before submitting (static/js/confirm.js, no inline script)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.vmrequest_factories import request_world

pytestmark = pytest.mark.django_db


def test_cancel_and_release_forms_ask_first() -> None:
    w = request_world()
    client = Client()
    client.force_login(w.ana)
    page = client.get(f"/requests/{w.r_ana.pk}/").content.decode()
    assert 'data-confirm="Cancel this request?"' in page
    assert '<script src="/static/js/confirm.js" defer></script>' in page
    w.r_ana.status = "running"
    w.r_ana.save(update_fields=["status"])
    page = client.get(f"/requests/{w.r_ana.pk}/").content.decode()
    assert f'data-confirm="Delete VM {w.r_ana.vmi_name} and its disk now?"' in page
