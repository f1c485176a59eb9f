"""Serializers of the read-only inventory API (``/api/v1/inventory/``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from gpuinventory.diagnostics import describe_flags
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, PermittedDevice, VgpuConfig


class GpuResourceSerializer(serializers.ModelSerializer[GpuResource]):
    """One extended resource of a node; ``free`` = max(0, allocatable − used), 0 when stale (DOMAIN.md §2)."""

    free = serializers.IntegerField(read_only=True)

    class Meta:
        model = GpuResource
        fields = [
            "name",
            "kind",
            "model",
            "pci_device_id",
            "vgpu_type",
            "framebuffer_gb",
            "series",
            "capacity",
            "allocatable",
            "used",
            "free",
            "stale",
            "permitted",
        ]


class GpuConsumerSerializer(serializers.ModelSerializer[GpuConsumer]):
    """A pod (a virt-launcher pod for a VMI) holding GPU devices on the node."""

    class Meta:
        model = GpuConsumer
        fields = ["pod_namespace", "pod_name", "vmi_name", "resource_name", "count"]


class GpuNodeSerializer(serializers.ModelSerializer[GpuNode]):
    """A GPU node in lists: mode, model, readiness and device totals (non-stale resources)."""

    url = serializers.HyperlinkedIdentityField(view_name="api:inventory:gpunode-detail", lookup_field="name")
    devices_total = serializers.IntegerField(read_only=True)
    devices_used = serializers.IntegerField(read_only=True)
    devices_free = serializers.IntegerField(read_only=True)
    flag_count = serializers.SerializerMethodField()

    class Meta:
        model = GpuNode
        fields = [
            "url",
            "name",
            "present",
            "first_seen",
            "last_seen",
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
            "devices_total",
            "devices_used",
            "devices_free",
            "flag_count",
        ]

    def get_flag_count(self, obj: GpuNode) -> int:
        """Number of stored diagnostics."""
        return len(obj.flags or [])


class GpuNodeDetailSerializer(GpuNodeSerializer):
    """A GPU node with its labels, resources, consumers and diagnostics in plain words."""

    resources = GpuResourceSerializer(many=True, read_only=True)
    consumers = GpuConsumerSerializer(many=True, read_only=True)
    flags = serializers.SerializerMethodField()

    class Meta(GpuNodeSerializer.Meta):
        fields = [*GpuNodeSerializer.Meta.fields, "labels", "resources", "consumers", "flags"]

    def get_flags(self, obj: GpuNode) -> list[dict[str, Any]]:
        """Stored flags (most severe first) with translated title, detail and the admin's commands."""
        return [
            {
                "code": d.code,
                "params": d.params,
                "severity": d.severity,
                "title": d.title,
                "detail": d.detail,
                "commands": list(d.commands),
            }
            for d in describe_flags(obj.flags or [], obj.name)
        ]


class VgpuConfigSerializer(serializers.ModelSerializer[VgpuConfig]):
    """A named config of the vGPU Device Manager file (DOMAIN.md §3)."""

    class Meta:
        model = VgpuConfig
        fields = ["name", "config_map", "entries", "present", "updated"]


class PermittedDeviceSerializer(serializers.ModelSerializer[PermittedDevice]):
    """An entry of the KubeVirt CR's ``permittedHostDevices`` (DOMAIN.md §5.1)."""

    class Meta:
        model = PermittedDevice
        fields = ["kind", "resource_name", "selector", "external_resource_provider", "source", "present"]
