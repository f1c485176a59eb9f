"""Serializers of the read-only inventory API (``/api/v1/inventory/``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from gpuinventory.choices import SyncStatus, WorkloadMode
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


# --- /api/v1/inventory/summary/ (documentation of ``InventorySummary.as_dict``) -------------------


class DeviceGroupSerializer(serializers.Serializer[Any]):
    """Devices of one mode grouped by GPU model or by resource (``gpuinventory.summary.DeviceGroup``)."""

    label = serializers.CharField(  # type: ignore[assignment]  # a field, not Field.label
        help_text="What people call it: GPU model, vGPU type, short resource name."
    )
    nodes = serializers.IntegerField(help_text="Present nodes with this model / resource.")
    gpus = serializers.IntegerField(
        allow_null=True, help_text="Physical GPUs of these nodes (by model); null by resource."
    )
    total = serializers.IntegerField(help_text="Σ allocatable devices (stale entries not counted).")
    used = serializers.IntegerField(help_text="Σ devices requested by non-terminal pods.")
    free = serializers.IntegerField(help_text="Free devices a request can get now.")
    resource = serializers.CharField(help_text='Extended resource name (by resource), else "".')
    kind = serializers.CharField(
        help_text='Resource kind (gpu, gpu_shared, mig, passthrough, vgpu) by resource, else "".'
    )
    model = serializers.CharField(help_text='GPU model; "" when a resource spans several models.')
    free_unusable = serializers.IntegerField(help_text="Free devices that cannot be requested now.")
    free_unusable_reasons = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="{reason: devices}; reasons: node_absent, node_not_ready, node_cordoned, "
        "vgpu_reconfiguring, transitioning, other_mode, not_permitted.",
    )


class ModeSummarySerializer(serializers.Serializer[Any]):
    """Nodes and devices of one workload mode (``gpuinventory.summary.ModeSummary``)."""

    mode = serializers.ChoiceField(choices=WorkloadMode.choices)
    nodes = serializers.IntegerField(help_text="Present nodes of the mode.")
    nodes_ready = serializers.IntegerField()
    nodes_in_use = serializers.IntegerField(help_text="Nodes where at least one device is used.")
    nodes_idle = serializers.IntegerField(help_text="nodes − nodes_in_use.")
    nodes_flagged = serializers.IntegerField(help_text="Nodes with at least one diagnostic.")
    nodes_transitioning = serializers.IntegerField()
    total = serializers.IntegerField()
    used = serializers.IntegerField()
    free = serializers.IntegerField(help_text="Requestable free devices.")
    free_unusable = serializers.IntegerField(help_text="free + free_unusable = Σ max(0, allocatable − used).")
    free_unusable_reasons = serializers.DictField(child=serializers.IntegerField())
    by_model = DeviceGroupSerializer(many=True)
    by_resource = DeviceGroupSerializer(many=True)


class SummaryModesSerializer(serializers.Serializer[Any]):
    """``modes``: one entry per workload mode, keyed by the mode value (every mode is present)."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        """The keys are mode values (``vm-passthrough`` is no Python identifier)."""
        return {mode.value: ModeSummarySerializer() for mode in WorkloadMode}


class SyncRunSummarySerializer(serializers.Serializer[Any]):
    """A sync run as ``SyncRun.as_summary`` shows it."""

    started = serializers.DateTimeField()
    finished = serializers.DateTimeField(allow_null=True)
    status = serializers.ChoiceField(choices=SyncStatus.choices)
    error = serializers.CharField(allow_blank=True, help_text='Why the run failed; "" otherwise.')
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="nodes, added, changed, absent, rows_written."
    )
    warnings = serializers.ListField(
        child=serializers.DictField(),
        help_text='Cluster-level diagnostics: {"code": ..., "params": {...}}.',
    )


@extend_schema_serializer(many=False)  # a list action that answers one object
class InventorySummarySerializer(serializers.Serializer[Any]):
    """The dashboard's numbers (``gpuinventory.summary.InventorySummary.as_dict``).

    Only present nodes count; stale resources never count; ``free`` is requestable devices only.
    """

    modes = SummaryModesSerializer()
    absent_nodes = serializers.IntegerField(help_text="Nodes that disappeared from the cluster.")
    last_sync = SyncRunSummarySerializer(
        allow_null=True, help_text="The latest sync run; null before the first."
    )
    last_success = SyncRunSummarySerializer(allow_null=True, help_text="The latest successful sync run.")
    data_age_seconds = serializers.IntegerField(
        allow_null=True, help_text="Seconds since the data shown was read; null before the first success."
    )
