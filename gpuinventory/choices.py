"""Choices of the inventory: workload modes, how a mode was decided, resource kinds, sync states.

Sources: DOMAIN.md §1 (the three workload modes, the label ``nvidia.com/gpu.workload.config``
and how the GPU Operator falls back to ``sandboxWorkloads.defaultWorkload``), §2 (resource kinds).
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class WorkloadMode(models.TextChoices):
    """Value of ``nvidia.com/gpu.workload.config`` the GPU Operator acts on (DOMAIN.md §1)."""

    CONTAINER = "container", _("container")
    VM_PASSTHROUGH = "vm-passthrough", _("vm-passthrough")
    VM_VGPU = "vm-vgpu", _("vm-vgpu")


class ModeSource(models.TextChoices):
    """How the portal decided a node's workload mode (mirrors the operator's ``getWorkloadConfig``)."""

    LABEL = "label", _("node label")
    CLUSTER_DEFAULT = "cluster_default", _("cluster default (no label)")
    INVALID_LABEL = "invalid_label", _("invalid label value, cluster default used")
    SANDBOX_DISABLED = "sandbox_disabled", _("sandbox workloads disabled in the ClusterPolicy")


class ResourceKind(models.TextChoices):
    """What an ``nvidia.com/*`` extended resource is (DOMAIN.md §2)."""

    GPU = "gpu", _("GPU (container)")
    GPU_SHARED = "gpu_shared", _("shared GPU (time-slicing/MPS)")
    MIG = "mig", _("MIG device")
    PASSTHROUGH = "passthrough", _("passthrough GPU")
    VGPU = "vgpu", _("vGPU")


class SyncStatus(models.TextChoices):
    """State of one inventory sync run."""

    RUNNING = "running", _("running")
    SUCCESS = "success", _("succeeded")
    FAILED = "failed", _("failed")


MODE_BADGE = {
    WorkloadMode.CONTAINER: "mode-container",
    WorkloadMode.VM_PASSTHROUGH: "mode-passthrough",
    WorkloadMode.VM_VGPU: "mode-vgpu",
}
SYNC_BADGE = {SyncStatus.RUNNING: "info", SyncStatus.SUCCESS: "ok", SyncStatus.FAILED: "danger"}
