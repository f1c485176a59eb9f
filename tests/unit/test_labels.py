"""The label and annotation keys have one owner, ``portal/labels.py`` (docs/labels.md).

Checked here: the simulator's copy (``devcluster/labels.py``, which may not import the portal)
agrees with it key for key; no other app module spells a key as a string; the deploy manifests and
the VMI manifest use the same keys; and the deprecated ``gpu-vm-portal/`` annotations still read.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from devcluster import labels as devcluster_labels
from portal import labels
from tests.factories import portal_user
from tests.vmrequest_factories import stored_image, stored_request, stored_team
from vmrequests.provisioning import vmi_manifest

ROOT = Path(__file__).resolve().parents[2]
APP_CODE = ("portal", "gpuinventory", "vmrequests", "webhooks")


def test_the_simulator_uses_the_portals_keys() -> None:
    shared = {name: getattr(devcluster_labels, name) for name in devcluster_labels.SHARED}
    assert shared == {name: getattr(labels, name) for name in devcluster_labels.SHARED}
    # Every upper-case key of the simulator's copy is in SHARED (no unchecked key).
    assert {n for n in vars(devcluster_labels) if n.isupper() and n != "SHARED"} == set(shared)


def test_portal_keys_share_one_dns_prefix() -> None:
    own = [labels.REQUEST_ID, labels.TEAM, labels.REQUESTER, labels.TICKET, labels.TEAMS]
    own += [labels.GPU_MODEL, labels.GPU_COUNT]
    assert labels.PREFIX == "gpu-vm-portal.io/"
    assert all(key.startswith(labels.PREFIX) for key in own)
    assert labels.DEPRECATED_KEYS == {
        "gpu-vm-portal.io/gpu-model": ("gpu-vm-portal/gpu-model",),
        "gpu-vm-portal.io/gpu-count": ("gpu-vm-portal/gpu-count",),
    }


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, ("", "gpu-vm-portal.io/gpu-model")),
        ({"gpu-vm-portal.io/gpu-model": " L40S "}, ("L40S", "gpu-vm-portal.io/gpu-model")),
        ({"gpu-vm-portal/gpu-model": "L40"}, ("L40", "gpu-vm-portal/gpu-model")),
        (
            {"gpu-vm-portal.io/gpu-model": "L40S", "gpu-vm-portal/gpu-model": "L40"},
            ("L40S", "gpu-vm-portal.io/gpu-model"),
        ),
        (
            {"gpu-vm-portal.io/gpu-model": "  ", "gpu-vm-portal/gpu-model": "L40"},
            ("L40", "gpu-vm-portal/gpu-model"),
        ),
    ],
)
def test_read_annotation_prefers_the_current_key(
    annotations: dict[str, str], expected: tuple[str, str]
) -> None:
    assert labels.read_annotation(annotations, labels.GPU_MODEL) == expected


def _key_literals(path: Path, keys: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in keys and id(node) not in docstrings
    ]


def test_no_app_module_spells_a_key_itself() -> None:
    """A key written as a string outside portal/labels.py would be a second owner (values such as
    ``virt-launcher`` and the bare ``kubevirt.io`` label, common words elsewhere, are not checked)."""
    keys = {v for n, v in vars(labels).items() if n.isupper() and isinstance(v, str)}
    keys -= {labels.MANAGED_BY_VALUE, labels.VIRT_LAUNCHER, labels.KUBEVIRT_APP}
    keys |= {old for olds in labels.DEPRECATED_KEYS.values() for old in olds}
    found = [
        hit
        for pkg in APP_CODE
        for path in sorted((ROOT / pkg).rglob("*.py"))
        if "migrations" not in path.parts and path != ROOT / "portal" / "labels.py"
        for hit in _key_literals(path, keys)
    ]
    assert found == []


def test_deploy_node_label_policy_guards_the_vgpu_config_label() -> None:
    docs = yaml.safe_load_all((ROOT / "deploy" / "base" / "node-label-policy.yaml").read_text())
    (policy,) = [d for d in docs if d and d["kind"] == "ValidatingAdmissionPolicy"]
    assert policy["spec"]["variables"][0] == {"name": "label", "expression": f"'{labels.VGPU_CONFIG}'"}
    # The other variables (the label's new and old value, #14 finding 11) go through this one.
    assert all("variables.label" in v["expression"] for v in policy["spec"]["variables"][1:])


@pytest.mark.django_db
def test_vmi_manifest_carries_the_portal_keys() -> None:
    alice = portal_user("analyst", "alice")
    req = stored_request(stored_team("quant", members=(alice,)), alice, stored_image())
    manifest = vmi_manifest(req, "nvidia.com/GA100_A100_PCIE_40GB", pin_node="gpu-node-01")
    assert manifest["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpu-vm-portal",
        "gpu-vm-portal.io/request-id": str(req.pk),
        "gpu-vm-portal.io/team": "quant",
    }
    assert manifest["metadata"]["annotations"] == {"gpu-vm-portal.io/requester": "alice"}
    assert manifest["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-01"}
