"""Length caps of a request (issue #13, "The form has no length caps where the API has them").

Reproduced first: the browser form accepted a 50,000-character justification (and mailed it in
full to the approvers), and a 2 MB SSH key comment went into the VMI manifest's cloud-init
user data. The caps are the model's ``max_length`` and apply to the form (``maxlength``
attributes and server-side errors) and to the API (schema ``maxLength`` and 400 field errors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core import mail
from django.test import Client

from tests.factories import portal_user
from tests.vmrequest_factories import (
    A100_PT,
    request_form_inventory,
    ssh_public_key,
    stored_image,
    stored_team,
)
from vmrequests.models import VMRequest
from vmrequests.validation import model_cap

pytestmark = pytest.mark.django_db

URL = "/requests/new/"
OPENAPI = Path(__file__).resolve().parents[3] / "docs" / "openapi.yaml"


@pytest.fixture
def world(django_capture_on_commit_callbacks: Any) -> dict[str, Any]:
    """Analyst ``ana`` in team quant, whose approver ``bob`` has an email address."""
    request_form_inventory()
    ana = portal_user("analyst", "ana")
    bob = portal_user("approver", "bob")
    bob.email = "bob@example.com"
    bob.save()
    team = stored_team("quant", members=(ana,), approvers=(bob,))
    image = stored_image("Ubuntu 22.04")
    client = Client()
    client.force_login(ana)
    return {"ana": ana, "team": team, "image": image, "client": client}


def post_data(world: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "team": world["team"].pk,
        "mode": "passthrough",
        "image": world["image"].pk,
        "gpu": A100_PT,
        "device_count": "1",
        "cpu_cores": "8",
        "memory_gib": "64",
        "lease_days": "10",
        "name": "",
        "ssh_public_key": ssh_public_key("ed25519"),
        "justification": "Fine-tune a model for the Q3 risk report.",
        "ticket_id": "",
    }
    values.update(overrides)
    return values


def test_a_50000_character_justification_is_refused_and_nothing_is_mailed(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = world["client"].post(URL, post_data(world, justification="x" * 50_000))
    assert response.status_code == 200
    assert response.context["form"].errors == {
        "justification": ["Ensure this value has at most 2000 characters (it has 50000)."]
    }
    assert VMRequest.objects.count() == 0
    assert mail.outbox == []


def test_a_justification_at_the_cap_is_mailed_whole(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    text = "y" * 2000
    with django_capture_on_commit_callbacks(execute=True):
        response = world["client"].post(URL, post_data(world, justification=text))
    assert response.status_code == 302
    (message,) = mail.outbox
    assert message.to == ["bob@example.com"]
    assert f"\n{text}\n" in message.body


def test_a_2mb_key_comment_never_reaches_a_vmi_manifest(world: dict[str, Any]) -> None:
    key = ssh_public_key("ed25519", "c" * 2_000_000)
    response = world["client"].post(URL, post_data(world, ssh_public_key=key))
    assert response.status_code == 200
    assert response.context["form"].errors == {
        "ssh_public_key": ["Ensure this value has at most 8192 characters (it has 2000081)."]
    }
    assert VMRequest.objects.count() == 0


def test_a_key_comment_over_1024_characters_is_refused_even_within_the_line_cap(
    world: dict[str, Any],
) -> None:
    key = ssh_public_key("ed25519", "c" * 1025)
    response = world["client"].post(URL, post_data(world, ssh_public_key=key))
    assert response.context["form"].errors == {
        "ssh_public_key": [
            "The key's comment has 1025 characters; at most 1024 are allowed. Shorten it: it is only a label."
        ]
    }


def test_the_manifest_of_a_key_with_a_1024_character_comment_stays_small(world: dict[str, Any]) -> None:
    from vmrequests.provisioning import vmi_manifest

    key = ssh_public_key("ed25519", "c" * 1024)
    response = world["client"].post(URL, post_data(world, ssh_public_key=key))
    assert response.status_code == 302
    req = VMRequest.objects.get()
    assert req.ssh_public_key == key
    user_data = vmi_manifest(req, A100_PT)["spec"]["volumes"][1]["cloudInitNoCloud"]["userData"]
    assert yaml.safe_load(user_data)["users"][0]["ssh_authorized_keys"] == [key]
    assert len(user_data) < 1300


def test_the_form_carries_the_caps_as_maxlength(world: dict[str, Any]) -> None:
    html = world["client"].get(URL).content.decode()
    for name, cap in (("justification", 2000), ("ssh_public_key", 8192), ("name", 40), ("ticket_id", 100)):
        assert f'maxlength="{cap}"' in _tag(html, name), name


def test_model_form_and_api_schema_share_the_caps() -> None:
    schema = yaml.safe_load(OPENAPI.read_text())
    body = schema["components"]["schemas"]["VMRequestCreateRequest"]["properties"]
    caps = {name: body[name].get("maxLength") for name in body if body[name].get("type") == "string"}
    assert caps == {
        "team": 50,
        "resource_name": 253,
        "vgpu_type": 40,
        "image": 100,
        "name": 40,
        "ssh_public_key": 8192,
        "justification": 2000,
        "ticket_source": 50,
        "ticket_id": 100,
        "requested_for": 150,
    }
    for name in (
        "justification",
        "ssh_public_key",
        "ticket_source",
        "ticket_id",
        "resource_name",
        "vgpu_type",
    ):
        assert model_cap(VMRequest, name) == caps[name], name


def _tag(html: str, name: str) -> str:
    """The opening tag of the form control called ``name``."""
    start = html.index(f'name="{name}"')
    return html[html.rindex("<", 0, start) : html.index(">", start) + 1]
