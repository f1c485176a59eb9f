"""Builders of request-side test data: teams, images, requests, SSH keys (CONVENTIONS "Tests").

Inventory rows come from ``tests/factories.py`` (``stored_node``, ``stored_resource``, ...).
Other test modules may append their own builders here; keep each one small and explicit.
"""

from __future__ import annotations

from typing import Any


def stored_team(
    slug: str = "quant", *, members: tuple[Any, ...] = (), approvers: tuple[Any, ...] = (), **fields: Any
) -> Any:
    """A ``Team`` named after ``slug`` with namespace ``team-<slug>``, default lease 7 days,
    maximum 30, and the given members and approvers."""
    from vmrequests.models import Team

    fields.setdefault("name", slug.capitalize())
    fields.setdefault("namespace", f"team-{slug}")
    team = Team.objects.create(slug=slug, **fields)
    team.members.set(members)
    team.approvers.set(approvers)
    return team


def stored_image(name: str = "Ubuntu 22.04", **fields: Any) -> Any:
    """An enabled ``VmImage``: minimum 8 GiB, defaults 4 cores / 16 GiB unless given."""
    from vmrequests.models import VmImage

    values: dict[str, Any] = {
        "image": "quay.io/containerdisks/ubuntu:22.04",
        "os": "Ubuntu 22.04",
        "min_memory_gib": 8,
        "default_cpu_cores": 4,
        "default_memory_gib": 16,
    }
    values.update(fields)
    return VmImage.objects.create(name=name, **values)


def stored_request(team: Any, requester: Any, image: Any, **fields: Any) -> Any:
    """A ``VMRequest`` row written directly (no event), status submitted unless given; one
    passthrough A100 by default. Use ``approval.submit`` when the test is about submission."""
    from vmrequests.models import VMRequest

    values: dict[str, Any] = {
        "mode": "passthrough",
        "resource_name": "nvidia.com/GA100_A100_PCIE_40GB",
        "gpu_model": "A100 PCIe 40GB",
        "device_count": 1,
        "cpu_cores": 4,
        "memory_gib": 16,
        "ssh_public_key": "ssh-ed25519 AAAA test",
        "lease_days": 7,
        "justification": "a test request",
        "vmi_namespace": team.namespace,
    }
    values.update(fields)
    req = VMRequest.objects.create(team=team, requester=requester, image=image, **values)
    if not req.vmi_name:
        req.vmi_name = f"{requester.get_username()}-vm-{req.pk}"
        req.save(update_fields=["vmi_name"])
    return req


def ssh_public_key(kind: str = "ed25519", comment: str = "analyst@laptop", *, bits: int = 3072) -> str:
    """A freshly generated OpenSSH public key line (never a committed key file).

    Args:
        kind: ``ed25519``, ``rsa`` (``bits``), ``ecdsa256``/``ecdsa384``/``ecdsa521``.
        comment: appended after the base64 body (``""`` for none).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    private: Any
    if kind == "ed25519":
        private = ed25519.Ed25519PrivateKey.generate()
    elif kind == "rsa":
        private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    else:
        curve = {"ecdsa256": ec.SECP256R1(), "ecdsa384": ec.SECP384R1(), "ecdsa521": ec.SECP521R1()}[kind]
        private = ec.generate_private_key(curve)
    line = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return f"{line.decode('ascii')} {comment}".strip()


# --- request pages (tests/unit/vmrequests/test_vmrequest_list_views.py, _detail_views.py, _queue.py)

A100_PT = "nvidia.com/GA100_A100_PCIE_40GB"


def a100_node(name: str = "p1", allocatable: int = 1, used: int = 0) -> Any:
    """A ready vm-passthrough node with ``allocatable`` A100 PCIe 40GB GPUs (``used`` in use),
    permitted by KubeVirt."""
    from tests.factories import stored_node, stored_resource

    node = stored_node(name, "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=allocatable)
    stored_resource(
        node, A100_PT, allocatable, used=used, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True
    )
    return node


def request_world() -> Any:
    """Two teams and one request per kind of viewer, for the request-page tests.

    Users (``tests.factories.portal_user``): ``ana`` and ``tim`` analysts of team ``quant``;
    ``apa`` approver of ``quant`` (member and approver); ``olga`` analyst of ``research``;
    ``bob`` approver of ``research``; ``root`` admin (superuser, in no team).
    Requests (status submitted, one A100 each, no events): ``r_ana`` and ``r_tim`` in ``quant``,
    ``r_olga`` in ``research``. Returns a namespace with every name above plus ``image``.
    """
    from types import SimpleNamespace

    from tests.factories import portal_user

    w = SimpleNamespace()
    w.ana = portal_user("analyst", "ana")
    w.tim = portal_user("analyst", "tim")
    w.apa = portal_user("approver", "apa")
    w.olga = portal_user("analyst", "olga")
    w.bob = portal_user("approver", "bob")
    w.root = portal_user("admin", "root")
    w.quant = stored_team("quant", members=(w.ana, w.tim, w.apa), approvers=(w.apa,))
    w.research = stored_team("research", members=(w.olga, w.bob), approvers=(w.bob,))
    w.image = stored_image()
    w.r_ana = stored_request(w.quant, w.ana, w.image)
    w.r_tim = stored_request(w.quant, w.tim, w.image)
    w.r_olga = stored_request(w.research, w.olga, w.image)
    return w


#: Resource names of ``request_form_inventory``.
A100_PT = "nvidia.com/GA100_A100_PCIE_40GB"
A10_PT = "nvidia.com/GA102GL_A10"
T4_8Q = "nvidia.com/GRID_T4-8Q"
T4_FILTER = ["0x1EB810DE"]


def request_form_inventory() -> list[Any]:
    """A small inventory for the request form, built with ``tests/factories.py``:

    - ``p1`` vm-passthrough: 4 × A100 PCIe 40GB, 1 used → 3 free (permitted);
    - ``p2`` vm-passthrough: 2 × A10, not permitted by KubeVirt;
    - ``c1`` container: 8 × ``nvidia.com/gpu``, 2 used;
    - ``v1`` vm-vgpu Tesla T4 × 2 under config T4-8Q: 4 × T4-8Q, 1 used by a VM → 3 free (busy:
      not a re-profile candidate);
    - ``v2`` vm-vgpu Tesla T4 × 2, idle, no vGPU advertised: re-profilable to T4-16Q (2 instances)
      or T4-8Q (4 instances) by the stored configs ``T4-16Q`` and ``T4-8Q``.
    """
    from tests.factories import stored_consumer, stored_node, stored_resource, stored_vgpu_config

    p1 = stored_node("p1", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=4)
    stored_resource(p1, A100_PT, 4, used=1, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    p2 = stored_node("p2", "vm-passthrough", gpu_model="A10", gpu_count=2)
    stored_resource(p2, A10_PT, 2, model="A10", pci_device_id="2236", permitted=False)
    c1 = stored_node("c1", "container", gpu_model="NVIDIA-B200", gpu_count=8)
    stored_resource(c1, "nvidia.com/gpu", 8, used=2)
    v1 = stored_node(
        "v1", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config="T4-8Q", vgpu_config_state="success"
    )
    stored_resource(v1, T4_8Q, 4, used=1, model="Tesla T4", vgpu_type="T4-8Q", series="Q", permitted=True)
    stored_consumer(v1, T4_8Q, "virt-launcher-vm-a-abcde", 1, vmi_name="vm-a", pod_namespace="team-quant")
    v2 = stored_node("v2", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config_state="success")
    stored_vgpu_config(
        "T4-8Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-8Q": 2}}]
    )
    stored_vgpu_config(
        "T4-16Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-16Q": 1}}]
    )
    return [p1, p2, c1, v1, v2]
