"""The VirtualMachineInstance manifest of a request (DOMAIN.md §5.3), its cloud-init, and how to
connect to the VM."""

from __future__ import annotations

from typing import Any

import yaml

from portal.labels import HOSTNAME as HOSTNAME_LABEL
from portal.labels import MANAGED_BY as MANAGED_BY_LABEL
from portal.labels import MANAGED_BY_VALUE as MANAGED_BY
from portal.labels import REQUEST_ID as REQUEST_LABEL
from portal.labels import REQUESTER as REQUESTER_ANNOTATION
from portal.labels import TEAM as TEAM_LABEL
from portal.labels import TICKET as TICKET_ANNOTATION
from vmrequests.choices import VMMode
from vmrequests.models import VMRequest


def cloud_init_user_data(login_user: str, ssh_public_key: str) -> str:
    """``#cloud-config`` creating ``login_user`` with sudo and the SSH key (DOMAIN.md §5.3 example).

    Dumped with a YAML library, so a key comment can never inject YAML.
    """
    doc = {
        "users": [
            {
                "name": login_user,
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "shell": "/bin/bash",
                "ssh_authorized_keys": [ssh_public_key.strip()],
            }
        ]
    }
    return "#cloud-config\n" + yaml.safe_dump(doc, default_flow_style=False, sort_keys=False)


def vmi_manifest(req: VMRequest, resource_name: str, pin_node: str | None = None) -> dict[str, Any]:
    """The VirtualMachineInstance for ``req`` (kubevirt.io/v1, DOMAIN.md §5.3).

    ``spec.domain.devices.gpus[]`` holds ``device_count`` entries of the exact ``resource_name``
    (read from allocatable, never computed: pitfall 4); vGPUs get ``display.enabled: false``
    (only one ramfb display per VMI, pitfall 12; the portal's VMs are headless compute VMs).
    ``pin_node`` adds ``nodeSelector: {kubernetes.io/hostname: <node>}``: provisioning pins every
    VMI to the node its devices were reserved on at approval.

    Returns:
        The manifest as a dict (sent with ``fieldValidation=Strict``).
    """
    spec: dict[str, Any] = {
        "domain": {
            "cpu": {"cores": req.cpu_cores},
            "resources": {"requests": {"memory": f"{req.memory_gib}Gi"}},
            "devices": {
                "disks": [
                    {"name": "containerdisk", "disk": {"bus": "virtio"}},
                    {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                ],
                "gpus": _gpus(req, resource_name),
                "interfaces": [{"name": "default", "masquerade": {}}],
            },
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [
            {"name": "containerdisk", "containerDisk": {"image": req.image.image}},
            {
                "name": "cloudinitdisk",
                "cloudInitNoCloud": {
                    "userData": cloud_init_user_data(req.image.login_user, req.ssh_public_key)
                },
            },
        ],
    }
    if pin_node:
        spec = {"nodeSelector": {HOSTNAME_LABEL: pin_node}, **spec}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": req.vmi_name,
            "namespace": req.vmi_namespace,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                REQUEST_LABEL: str(req.pk),
                TEAM_LABEL: req.team.slug,
            },
            "annotations": _annotations(req),
        },
        "spec": spec,
    }


def _gpus(req: VMRequest, resource_name: str) -> list[dict[str, Any]]:
    """``spec.domain.devices.gpus[]``: ``device_count`` entries ``gpu1``.. (``vgpu1``.. with the
    display off for vGPUs, pitfall 12), each of the exact ``resource_name``."""
    gpus: list[dict[str, Any]] = []
    for i in range(req.device_count):
        gpu: dict[str, Any] = {
            "name": f"{'vgpu' if req.mode == VMMode.VGPU else 'gpu'}{i + 1}",
            "deviceName": resource_name,
        }
        if req.mode == VMMode.VGPU:
            gpu["virtualGPUOptions"] = {"display": {"enabled": False}}
        gpus.append(gpu)
    return gpus


def _annotations(req: VMRequest) -> dict[str, str]:
    """The VMI's annotations: the requester, and the ticket (``<source>:<id>``) when there is one."""
    annotations = {REQUESTER_ANNOTATION: req.requester.get_username()}
    if req.ticket_id:
        annotations[TICKET_ANNOTATION] = (
            f"{req.ticket_source}:{req.ticket_id}" if req.ticket_source else req.ticket_id
        )
    return annotations


def connect_instructions(req: VMRequest) -> str:
    """How to reach the VM: ``VMRequest.virtctl_commands``, one per line."""
    return "\n".join(req.virtctl_commands)
