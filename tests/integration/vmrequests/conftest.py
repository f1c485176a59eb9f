"""Fixtures and builders of the VM-request integration tests.

``demo`` and ``portal_cluster`` are the inventory tier's (``tests/integration/inventory``): the
session dev cluster with ``devcluster/specs/demo.yaml`` applied on top of ``specs/test.yaml``,
and the portal's Kubernetes adapter pointed at it. The builders below write a team, an image
and submitted requests through the real service (``vmrequests.approval.submit``).
"""

from __future__ import annotations

import importlib
from typing import Any

from tests.integration.inventory.conftest import demo, portal_cluster
from vmrequests.approval import RequestSpec, submit
from vmrequests.choices import VMMode
from vmrequests.models import GpuQuota, Team, VmImage, VMRequest
from vmrequests.roles import ANALYSTS_GROUP, APPROVERS_GROUP

__all__ = ["demo", "portal_cluster"]

#: An Ed25519 public key (format only; never used to log in).
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGz5oq0Z1gkQ0v7mB0nqVtK1mXoQ7F6b8v9cS2pL4dQe analyst@laptop"


def create_roles() -> None:
    """Re-create the groups and permission of migration ``vmrequests.0001_roles`` (idempotent).

    A transactional test empties every table afterwards, data-migration rows included, so the
    groups may be gone when a test runs after one.
    """
    from django.apps import apps

    importlib.import_module("vmrequests.migrations.0001_roles").create_roles(apps, None)


def make_team(
    namespace: str, slug: str = "quant", *, quotas: dict[tuple[str, str], int] | None = None
) -> Team:
    """A team whose VMs go to ``namespace``, with ``quotas`` ``{(mode, gpu): max devices}``."""
    team = Team.objects.create(name=f"Team {slug}", slug=slug, namespace=namespace)
    for (mode, gpu), limit in (quotas or {}).items():
        GpuQuota.objects.create(team=team, mode=mode, gpu=gpu, max_devices=limit)
    return team


def make_image() -> VmImage:
    """An enabled Ubuntu containerDisk image."""
    return VmImage.objects.create(
        name="Ubuntu 22.04", image="quay.io/containerdisks/ubuntu:22.04", os="Ubuntu 22.04"
    )


def make_user(username: str, groups: list[str]) -> Any:
    """A user in ``groups`` with no usable password (tests log in with ``force_login``; hashing
    a password costs most of a second per user)."""
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(username)
    user.groups.set(Group.objects.filter(name__in=groups))
    return user


def make_approver(team: Team, username: str = "approver") -> Any:
    """A user in the analysts and approvers groups who approves ``team``'s requests."""
    user = make_user(username, [ANALYSTS_GROUP, APPROVERS_GROUP])
    team.approvers.add(user)
    return user


def make_analyst(team: Team, username: str) -> Any:
    """A member of ``team`` in the analysts group."""
    user = make_user(username, [ANALYSTS_GROUP])
    team.members.add(user)
    return user


def submit_request(
    team: Team,
    requester: Any,
    image: VmImage,
    *,
    mode: str = VMMode.PASSTHROUGH,
    resource_name: str = "",
    vgpu_type: str = "",
    gpu_model: str = "",
    count: int = 1,
    name: str = "",
) -> VMRequest:
    """A submitted request (4 cores, 16 GiB, 7-day lease) through ``vmrequests.approval.submit``."""
    spec = RequestSpec(
        team=team,
        mode=mode,
        resource_name=resource_name,
        vgpu_type=vgpu_type,
        gpu_model=gpu_model,
        device_count=count,
        cpu_cores=4,
        memory_gib=16,
        image=image,
        ssh_public_key=SSH_KEY,
        lease_days=7,
        justification="Backtest of the risk model.",
        name=name,
    )
    return submit(spec, requester)
