"""The browser form and ``POST /api/v1/vm-requests/`` give the same field errors for the same bad
request, because both are adapters over ``vmrequests.validation.validate``; and no code path
feeds the API body to the form as a fake POST (``QueryDict``) any more (issue #13)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from django.http import QueryDict

from tests.unit.api.conftest import SSH_KEY, api, create_body, post, problem
from tests.vmrequest_factories import A10_PT, T4_8Q, ssh_public_key
from vmrequests.api import creation
from vmrequests.forms import VMRequestForm
from vmrequests.models import Team, VmImage, VMRequest

pytestmark = pytest.mark.django_db

URL = "/api/v1/vm-requests/"
ROOT = Path(__file__).resolve().parents[3]
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----"

#: name → (API body overrides, the (field, code) pairs both must answer; field None = non-field).
BAD_DRAFTS: dict[str, tuple[dict[str, Any], list[tuple[str | None, str]]]] = {
    "justification over the cap": ({"justification": "x" * 2001}, [("justification", "max_length")]),
    "justification too short": ({"justification": "why"}, [("justification", "min_length")]),
    "justification blank": ({"justification": ""}, [("justification", "required")]),
    "key over the cap": ({"ssh_public_key": f"{SSH_KEY} {'c' * 9000}"}, [("ssh_public_key", "max_length")]),
    "key comment too long": (
        {"ssh_public_key": f"{SSH_KEY} {'c' * 1011}"},
        [("ssh_public_key", "comment_too_long")],
    ),
    "private key": ({"ssh_public_key": PRIVATE_KEY}, [("ssh_public_key", "private")]),
    "no key": ({"ssh_public_key": ""}, [("ssh_public_key", "empty")]),
    "bad name": ({"name": "Not_A_Label"}, [("name", "invalid")]),
    "long name": ({"name": "n" * 41}, [("name", "max_length")]),
    "generated-looking name": ({"name": "ana-vm-3"}, [("name", "reserved")]),
    "memory below the image's": ({"memory_gib": 4}, [("memory_gib", "invalid")]),
    "memory over the maximum": ({"memory_gib": 1025}, [("memory_gib", "max_value")]),
    "no CPU": ({"cpu_cores": 0}, [("cpu_cores", "min_value")]),
    "too many CPUs": ({"cpu_cores": 65}, [("cpu_cores", "max_value")]),
    "too many devices": ({"device_count": 9}, [("device_count", "max_value")]),
    "no device": ({"device_count": 0}, [("device_count", "min_value")]),
    "lease over the team's": ({"lease_days": 31}, [("lease_days", "max_lease")]),
    "no lease": ({"lease_days": 0}, [("lease_days", "min_value")]),
    "unknown GPU": ({"resource_name": "nvidia.com/NOPE"}, [("resource_name", "unknown_gpu")]),
    "GPU KubeVirt does not permit": ({"resource_name": A10_PT}, [("resource_name", "not_permitted")]),
    "GPU of another mode": ({"resource_name": "nvidia.com/gpu"}, [("resource_name", "other_mode")]),
    "unknown vGPU type": (
        {"mode": "vgpu", "resource_name": None, "vgpu_type": "Z9-99Q", "device_count": 1},
        [("vgpu_type", "unknown_gpu")],
    ),
    "two vGPUs of a fractional type": (
        {"mode": "vgpu", "resource_name": T4_8Q},
        [("device_count", "per_vm_limit")],
    ),
    "more GPUs than free": ({"device_count": 4}, [(None, "invalid")]),
    "another team": ({"team": "research"}, [("team", "invalid_choice")]),
    "unknown image": ({"image": "Windows 95"}, [("image", "invalid_choice")]),
    "ticket ID over the cap": ({"ticket_id": "t" * 101}, [("ticket_id", "max_length")]),
    "several at once": (
        {"memory_gib": 4, "lease_days": 31, "name": "Bad_Name", "justification": "why"},
        [
            ("memory_gib", "invalid"),
            ("lease_days", "max_lease"),
            ("name", "invalid"),
            ("justification", "min_length"),
        ],
    ),
}


def _form_data(body: dict[str, Any]) -> dict[str, Any]:
    """The browser's POST for an API body: team and image by primary key, the GPU as one field
    (``vgpu-type:<type>`` for a bare type), no ticket source."""
    team = Team.objects.filter(slug=body["team"]).first()
    image = VmImage.objects.filter(name=body["image"]).first()
    data = {k: v for k, v in body.items() if k not in ("resource_name", "vgpu_type", "ticket_source")}
    data["team"] = team.pk if team else 999_999
    data["image"] = image.pk if image else 999_999
    data["gpu"] = body.get("resource_name") or f"vgpu-type:{body.get('vgpu_type', '')}"
    return data


def _form_errors(form: VMRequestForm, body: dict[str, Any]) -> dict[str | None, list[tuple[str, str]]]:
    gpu_field = "vgpu_type" if body.get("vgpu_type") else "resource_name"
    out: dict[str | None, list[tuple[str, str]]] = {}
    for name, items in form.errors.as_data().items():
        key = None if name == "__all__" else gpu_field if name == "gpu" else name
        out[key] = [(e.code or "", str(m)) for e in items for m in e.messages]
    return out


def _api_errors(body: dict[str, Any]) -> dict[str | None, list[tuple[str, str]]]:
    out: dict[str | None, list[tuple[str, str]]] = {}
    for error in body["errors"]:
        out.setdefault(error["field"], []).append((error["code"], error["detail"]))
    return out


@pytest.mark.parametrize("case", list(BAD_DRAFTS))
def test_form_and_api_give_the_same_field_errors(world: Any, case: str) -> None:
    overrides, expected = BAD_DRAFTS[case]
    body = create_body(**{"ticket_source": None, "ticket_id": None, **overrides})
    form = VMRequestForm(world.ana, data=_form_data(body))
    assert not form.is_valid()
    answer = problem(post(api(world.ana), URL, body), 400, "validation-error")
    from_api = _api_errors(answer)
    assert [(f, code) for f, items in from_api.items() for code, _message in items] == expected
    assert _form_errors(form, body) == from_api
    assert VMRequest.objects.count() == 3  # request_world's three, nothing new


def test_same_alternatives_in_the_form_and_the_api(world: Any) -> None:
    body = create_body(ticket_source=None, ticket_id=None, device_count=4)
    form = VMRequestForm(world.ana, data=_form_data(body))
    assert not form.is_valid()
    answer = problem(post(api(world.ana), URL, body), 400, "validation-error")
    assert [a.describe() for a in form.alternatives] == answer["alternatives"]
    assert answer["alternatives"] == ["3 × A100 PCIe 40GB — Runs now on p1 (3 free there)."]


def test_a_good_draft_gives_the_same_request_both_ways(world: Any) -> None:
    body = create_body(ticket_source=None, ticket_id=None, name="", ssh_public_key=ssh_public_key("ed25519"))
    form = VMRequestForm(world.ana, data=_form_data(body))
    assert form.is_valid(), form.errors
    response = post(api(world.ana), URL, body)
    assert response.status_code == 201, response.content
    req = VMRequest.objects.get(pk=response.json()["id"])
    spec = form.spec()
    stored = (
        req.team,
        req.mode,
        req.resource_name,
        req.device_count,
        req.cpu_cores,
        req.memory_gib,
        req.lease_days,
    )
    assert stored == (
        spec.team,
        spec.mode,
        spec.resource_name,
        spec.device_count,
        spec.cpu_cores,
        spec.memory_gib,
        spec.lease_days,
    )
    assert (req.ssh_public_key, req.justification) == (spec.ssh_public_key, spec.justification)


# --- no fake POST ----------------------------------------------------------------------------------


def _names_used(path: Path) -> set[str]:
    """Every imported module, imported name and referenced name in ``path``."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


@pytest.mark.parametrize(
    "module",
    [
        "vmrequests/validation.py",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "vmrequests" / "api").glob("*.py")),
    ],
)
def test_no_api_module_builds_a_querydict_or_uses_the_form(module: str) -> None:
    used = _names_used(ROOT / module)
    assert not used & {"QueryDict", "MultiValueDict", "VMRequestForm", "vmrequests.forms"}, module


def test_creating_through_the_api_builds_no_querydict_and_no_form(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The create path itself, with ``QueryDict`` and the form made to explode when built."""

    def explode(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the API built a QueryDict or a VMRequestForm")

    monkeypatch.setattr(QueryDict, "__init__", explode)
    monkeypatch.setattr(VMRequestForm, "__init__", explode)
    attrs = {**create_body(ticket_source=None, ticket_id=None), "device_count": 1}
    outcome = creation.create_request(world.ana, attrs)
    assert (outcome.created, outcome.request.requester, outcome.request.device_count) == (True, world.ana, 1)
