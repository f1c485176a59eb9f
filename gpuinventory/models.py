"""Inventory tables: what the last sync saw in the cluster.

The sync (``gpuinventory/sync/``) is the only writer. Rows are never hard-deleted when a node
disappears: ``present`` turns false and ``last_seen`` keeps the time it was last listed
(CONVENTIONS "Models, state and audit").
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from gpuinventory.choices import ModeSource, ResourceKind, SyncStatus, WorkloadMode


class GpuNode(models.Model):
    """A Kubernetes node the GPU Operator marks ``nvidia.com/gpu.present=true`` (DOMAIN.md §1).

    ``flags`` is a list of ``{"code": str, "params": {...}}`` diagnostics (see
    ``gpuinventory/flags.py``); ``labels`` keeps only the GPU-related labels
    (``nvidia.com/*``, ``feature.node.kubernetes.io/pci-10de*``, ``kubernetes.io/hostname``).
    """

    name = models.CharField(_("name"), max_length=253, unique=True)
    uid = models.CharField(max_length=64, blank=True)
    present = models.BooleanField(_("present"), default=True, db_index=True)
    first_seen = models.DateTimeField(_("first seen"))
    last_seen = models.DateTimeField(_("last seen"))
    workload_mode = models.CharField(
        _("workload mode"), max_length=20, choices=WorkloadMode.choices, db_index=True
    )
    mode_source = models.CharField(_("mode decided by"), max_length=20, choices=ModeSource.choices)
    mode_label_value = models.CharField(max_length=63, blank=True, help_text="raw label value, if any")
    transitioning = models.BooleanField(_("transitioning"), default=False)
    gpu_model = models.CharField(_("GPU model"), max_length=100, blank=True)
    gpu_count = models.PositiveIntegerField(_("GPU count"), null=True, blank=True)
    gpu_memory_mib = models.PositiveIntegerField(_("GPU memory (MiB)"), null=True, blank=True)
    model_source = models.CharField(max_length=40, blank=True, help_text="where the model came from")
    ready = models.BooleanField(_("ready"), null=True)
    unschedulable = models.BooleanField(_("cordoned"), default=False)
    vgpu_config = models.CharField(_("vGPU config"), max_length=63, blank=True)
    vgpu_config_state = models.CharField(_("vGPU config state"), max_length=20, blank=True)
    labels = models.JSONField(default=dict)
    flags = models.JSONField(default=list)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    #: The fields each sync derives from the cluster that the API shows too (besides ``uid``,
    #: ``labels`` and ``flags``, which the sync writes and the list API leaves out), in API order.
    OBSERVED_FIELDS = (
        "workload_mode",
        "mode_source",
        "mode_label_value",
        "transitioning",
        "gpu_model",
        "gpu_count",
        "gpu_memory_mib",
        "model_source",
        "ready",
        "unschedulable",
        "vgpu_config",
        "vgpu_config_state",
    )

    class Meta:
        ordering = ["name"]
        verbose_name = _("GPU node")
        verbose_name_plural = _("GPU nodes")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("gpuinventory:gpunode", args=[self.name])


class GpuResource(models.Model):
    """One ``nvidia.com/*`` extended resource of a node, with its counts (DOMAIN.md §2).

    ``used`` = Σ requests of non-terminal pods bound to the node (virt-launcher pods included);
    ``free`` = max(0, allocatable − used). A ``stale`` entry (allocatable 0) is shown, never counted.
    ``permitted`` is None for container resources (KubeVirt does not apply) and when the KubeVirt CR
    has no ``permittedHostDevices`` (then KubeVirt permits everything, DOMAIN.md §5.1).
    """

    node = models.ForeignKey(GpuNode, on_delete=models.CASCADE, related_name="resources")
    name = models.CharField(_("resource"), max_length=253)
    kind = models.CharField(_("kind"), max_length=20, choices=ResourceKind.choices)
    model = models.CharField(_("model"), max_length=100, blank=True)
    pci_device_id = models.CharField(max_length=4, blank=True)
    vgpu_type = models.CharField(_("vGPU type"), max_length=40, blank=True)
    framebuffer_gb = models.DecimalField(max_digits=6, decimal_places=1, null=True, blank=True)
    series = models.CharField(max_length=1, blank=True)
    capacity = models.PositiveIntegerField(_("capacity"), default=0)
    allocatable = models.PositiveIntegerField(_("allocatable"), default=0)
    used = models.PositiveIntegerField(_("used"), default=0)
    stale = models.BooleanField(_("stale"), default=False)
    permitted = models.BooleanField(_("permitted"), null=True)

    #: The fields each sync derives from node capacity/allocatable and the pods' requests
    #: (besides ``stale`` and ``permitted``), in API order.
    OBSERVED_FIELDS = (
        "kind",
        "model",
        "pci_device_id",
        "vgpu_type",
        "framebuffer_gb",
        "series",
        "capacity",
        "allocatable",
        "used",
    )

    class Meta:
        ordering = ["node__name", "name"]
        constraints = [models.UniqueConstraint(fields=["node", "name"], name="gpuresource_unique_per_node")]

    def __str__(self) -> str:
        return f"{self.node.name}: {self.name}"

    def get_absolute_url(self) -> str:
        return self.node.get_absolute_url()

    @property
    def free(self) -> int:
        """Devices that can still be requested: ``max(0, allocatable − used)``; 0 when stale."""
        return 0 if self.stale else max(0, self.allocatable - self.used)


class GpuConsumer(models.Model):
    """A non-terminal pod bound to a node that requests GPU devices (a virt-launcher pod for a VMI)."""

    node = models.ForeignKey(GpuNode, on_delete=models.CASCADE, related_name="consumers")
    resource_name = models.CharField(max_length=253)
    count = models.PositiveIntegerField()
    pod_namespace = models.CharField(max_length=63)
    pod_name = models.CharField(max_length=253)
    vmi_name = models.CharField(max_length=253, blank=True, help_text="set for virt-launcher pods")

    class Meta:
        ordering = ["node__name", "resource_name", "pod_namespace", "pod_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "resource_name", "pod_namespace", "pod_name"], name="gpuconsumer_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name} → {self.resource_name} x{self.count}"

    def get_absolute_url(self) -> str:
        return self.node.get_absolute_url()


class VgpuConfig(models.Model):
    """A named config of the vGPU Device Manager file (DOMAIN.md §3).

    ``entries`` is the parsed list ``[{"device_filter": [..]|None, "devices": "all"|[..],
    "vgpu_devices": {"T4-8Q": 2}}]``.
    """

    name = models.CharField(max_length=63, unique=True)
    config_map = models.CharField(max_length=253, help_text="namespace/name of the ConfigMap")
    entries = models.JSONField(default=list)
    present = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("gpuinventory:vgpuconfig_list") + f"#{self.name}"


class PermittedDevice(models.Model):
    """An entry of the KubeVirt CR's ``spec.configuration.permittedHostDevices`` (DOMAIN.md §5.1)."""

    class Kind(models.TextChoices):
        PCI = "pci", _("PCI host device")
        MDEV = "mdev", _("mediated device")

    kind = models.CharField(max_length=4, choices=Kind.choices)
    resource_name = models.CharField(max_length=253)
    selector = models.CharField(max_length=253, help_text="pciVendorSelector or mdevNameSelector")
    external_resource_provider = models.BooleanField(default=False)
    source = models.CharField(max_length=253, help_text="namespace/name of the KubeVirt CR")
    present = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["kind", "resource_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "resource_name", "selector"], name="permitteddevice_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.resource_name} ({self.selector})"

    def get_absolute_url(self) -> str:
        return reverse("gpuinventory:permitteddevice_list")


class SyncRun(models.Model):
    """One inventory sync: status, timings (ms) and what changed.

    ``counts`` = ``{"nodes": n, "added": a, "changed": c, "absent": x, "rows_written": w}``;
    ``timings`` = ``{"list_ms": .., "apply_ms": .., "total_ms": ..}``; ``warnings`` = list of
    ``{"code": str, "params": {...}}`` (e.g. a vGPU config file that does not parse).
    """

    started = models.DateTimeField(_("started"), db_index=True)
    finished = models.DateTimeField(_("finished"), null=True, blank=True)
    status = models.CharField(
        _("status"), max_length=10, choices=SyncStatus.choices, default=SyncStatus.RUNNING
    )
    trigger = models.CharField(max_length=20, default="beat", help_text="beat, manual, command")
    error = models.TextField(blank=True)
    counts = models.JSONField(default=dict)
    timings = models.JSONField(default=dict)
    warnings = models.JSONField(default=list)
    cluster_version = models.CharField(max_length=40, blank=True)

    class Meta:
        ordering = ["-started"]
        get_latest_by = "started"
        constraints = [
            # The sync's overlap lock: at most one run is "running" (gpuinventory/sync/run.py).
            models.UniqueConstraint(
                fields=["status"], condition=models.Q(status="running"), name="syncrun_single_running"
            )
        ]

    def __str__(self) -> str:
        return f"sync {self.started:%Y-%m-%d %H:%M:%S} {self.status}"

    def get_absolute_url(self) -> str:
        return reverse("gpuinventory:dashboard")

    def as_summary(self) -> dict[str, Any]:
        """The fields the dashboard and the API show about a run."""
        return {
            "started": self.started,
            "finished": self.finished,
            "status": self.status,
            "error": self.error,
            "counts": self.counts,
            "warnings": self.warnings,
        }


class Reservation(models.Model):
    """Devices promised to an approved request whose VMI's launcher pod is not bound yet.

    Written only through ``gpuinventory/reservations.py`` (reserved by the approval service under
    its lock, released when the request ends, re-profile marks by the worker). The capacity
    service (``gpuinventory/capacity/``) counts ``count``
    devices of ``resource_name`` on ``node`` as used while the reservation is *active*: no
    ``GpuConsumer`` (a bound, non-terminal pod) yet carries ``vmi_name`` in ``vmi_namespace``.
    Once the launcher pod is bound, the sync records it as a consumer and the devices are counted
    through ``GpuResource.used`` instead, so they are never counted twice.

    ``resource_name`` is ``""`` for a vGPU type that no node advertises yet: the node is to be
    re-profiled to ``reprofile_config`` (the ``nvidia.com/vgpu.config`` value) and the exact
    resource name is read from allocatable afterwards (DOMAIN.md pitfall 4); ``vgpu_type`` then
    identifies the devices. A node with any active reservation is never a re-profile candidate.
    """

    node = models.ForeignKey(GpuNode, on_delete=models.CASCADE, related_name="reservations")
    resource_name = models.CharField(_("resource"), max_length=253, blank=True)
    vgpu_type = models.CharField(_("vGPU type"), max_length=40, blank=True)
    count = models.PositiveIntegerField(_("devices"))
    reprofile_config = models.CharField(
        _("vGPU config to set"), max_length=63, blank=True, help_text="blank: no re-profiling"
    )
    reprofile_from = models.CharField(
        _("previous vGPU config"), max_length=63, blank=True, help_text="label value before re-profiling"
    )
    reprofile_started = models.DateTimeField(null=True, blank=True, help_text="when the label was patched")
    reprofile_done = models.BooleanField(default=False, help_text="the node offers the type now")
    holder = models.CharField(max_length=100, unique=True, help_text='e.g. "vmrequest:42"')
    vmi_namespace = models.CharField(max_length=63)
    vmi_name = models.CharField(max_length=63)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node__name", "created"]
        verbose_name = _("reservation")
        verbose_name_plural = _("reservations")

    def __str__(self) -> str:
        what = self.resource_name or self.vgpu_type
        return f"{self.holder}: {what} x{self.count} on {self.node.name}"

    def get_absolute_url(self) -> str:
        return self.node.get_absolute_url()

    @property
    def key(self) -> str:
        """What the reserved devices are: the resource name, else ``"vgpu:<type>"``."""
        return self.resource_name or f"vgpu:{self.vgpu_type}"
