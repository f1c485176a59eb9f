"""Serializers of the read-only inventory API (``/api/v1/inventory/``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from gpuinventory.capacity import Tally
from gpuinventory.choices import SyncStatus, WorkloadMode
from gpuinventory.diagnostics import describe_flags
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, PermittedDevice, VgpuConfig


def _row(obj: GpuResource, context: Mapping[str, Any]) -> Any:
    """The ``CapacitySnapshot`` row of a resource (None when stale or not counted)."""
    snap = context.get("capacity")
    return snap.row(obj.node_id, obj.name) if snap is not None else None


class GpuResourceSerializer(serializers.ModelSerializer[GpuResource]):
    """One extended resource of a node with the capacity snapshot's numbers (docs/inventory.md §4):
    ``reserved`` (active reservations), ``free`` (requestable now, reservations subtracted; 0 when
    stale or not requestable), ``free_unusable`` and ``free_unusable_reason`` (why, one of
    ``capacity.UNUSABLE_REASONS``, ``""`` when none)."""

    reserved = serializers.SerializerMethodField()
    free = serializers.SerializerMethodField()
    free_unusable = serializers.SerializerMethodField()
    free_unusable_reason = serializers.SerializerMethodField()

    class Meta:
        model = GpuResource
        fields = [
            "name",
            *GpuResource.OBSERVED_FIELDS,
            "reserved",
            "free",
            "free_unusable",
            "free_unusable_reason",
            "stale",
            "permitted",
        ]

    def get_reserved(self, obj: GpuResource) -> int:
        """Devices held by active reservations."""
        row = _row(obj, self.context)
        return row.reserved if row else 0

    def get_free(self, obj: GpuResource) -> int:
        """Requestable free devices now (reservations subtracted)."""
        row = _row(obj, self.context)
        return row.free if row else 0

    def get_free_unusable(self, obj: GpuResource) -> int:
        """Free devices that cannot be requested now."""
        row = _row(obj, self.context)
        return row.unusable if row else 0

    def get_free_unusable_reason(self, obj: GpuResource) -> str:
        """Why ``free_unusable`` devices cannot be requested (``""`` when there are none)."""
        row = _row(obj, self.context)
        return row.reason if row else ""


class GpuConsumerSerializer(serializers.ModelSerializer[GpuConsumer]):
    """A pod (a virt-launcher pod for a VMI) holding GPU devices on the node."""

    class Meta:
        model = GpuConsumer
        fields = ["pod_namespace", "pod_name", "vmi_name", "resource_name", "count"]


class GpuNodeSerializer(serializers.ModelSerializer[GpuNode]):
    """A GPU node in lists: mode, model, readiness and device totals of the capacity snapshot
    (non-stale resources): ``devices_free`` = requestable free devices, reservations subtracted."""

    url = serializers.HyperlinkedIdentityField(view_name="api:inventory:gpunode-detail", lookup_field="name")
    devices_total = serializers.SerializerMethodField()
    devices_used = serializers.SerializerMethodField()
    devices_reserved = serializers.SerializerMethodField()
    devices_free = serializers.SerializerMethodField()
    devices_free_unusable = serializers.SerializerMethodField()
    flag_count = serializers.SerializerMethodField()

    class Meta:
        model = GpuNode
        fields = [
            "url",
            "name",
            "present",
            "first_seen",
            "last_seen",
            *GpuNode.OBSERVED_FIELDS,
            "devices_total",
            "devices_used",
            "devices_reserved",
            "devices_free",
            "devices_free_unusable",
            "flag_count",
        ]

    def _tally(self, obj: GpuNode) -> Tally:
        snap = self.context.get("capacity")
        return snap.node(obj.pk) if snap is not None else Tally()

    def get_devices_total(self, obj: GpuNode) -> int:
        """Σ allocatable devices (stale entries not counted)."""
        return self._tally(obj).allocatable

    def get_devices_used(self, obj: GpuNode) -> int:
        """Σ devices requested by non-terminal pods."""
        return self._tally(obj).used

    def get_devices_reserved(self, obj: GpuNode) -> int:
        """Devices held by active reservations (approved requests whose VM has not started)."""
        return self._tally(obj).reserved

    def get_devices_free(self, obj: GpuNode) -> int:
        """Requestable free devices now (the same number the dashboard, form and queue use)."""
        return self._tally(obj).free

    def get_devices_free_unusable(self, obj: GpuNode) -> int:
        """Free devices that cannot be requested now (cordoned, not ready, ...)."""
        return self._tally(obj).unusable

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


class GpuEquivalentsSerializer(serializers.Serializer[Any]):
    """Devices in whole GPUs: one device = its frame buffer ÷ the board's memory (a T4-8Q instance
    on a 16 GB T4 = 0.5; passthrough and full container GPUs = 1; MIG profiles by memory fraction)."""

    total = serializers.FloatField(help_text="GPU-equivalents of the allocatable devices.")
    used = serializers.FloatField(help_text="GPU-equivalents in use (per node at most its allocatable).")
    reserved = serializers.FloatField(help_text="GPU-equivalents held by active reservations.")
    free = serializers.FloatField(help_text="GPU-equivalents of the requestable free devices.")
    unsized_devices = serializers.IntegerField(
        help_text="Allocatable devices left out: no known size (time-sliced nvidia.com/gpu.shared, "
        "a MIG profile on a node of unknown memory, an unparsable vGPU type)."
    )


#: The reasons free devices cannot be requested now (``capacity.UNUSABLE_REASONS``).
REASONS_HELP = (
    "{reason: devices}; reasons: node_absent, node_not_ready, node_cordoned, vgpu_reconfiguring, "
    "reprofile_promised, transitioning, other_mode, not_permitted."
)


class DeviceGroupSerializer(serializers.Serializer[Any]):
    """Devices of one mode grouped by GPU model, resource or vGPU type (``gpuinventory.summary.DeviceGroup``)."""

    label = serializers.CharField(  # type: ignore[assignment]  # a field, not Field.label
        help_text="What people call it: GPU model, vGPU type, short resource name."
    )
    nodes = serializers.IntegerField(help_text="Present nodes with this model / resource / type.")
    gpus = serializers.IntegerField(
        allow_null=True, help_text="Physical GPUs of these nodes (by model); null otherwise."
    )
    total = serializers.IntegerField(help_text="Σ allocatable devices (stale entries not counted).")
    used = serializers.IntegerField(help_text="Σ devices requested by non-terminal pods.")
    reserved = serializers.IntegerField(
        help_text="Devices held by active reservations (approved requests whose VM has not started)."
    )
    free = serializers.IntegerField(help_text="Free devices a request can get now (reservations subtracted).")
    resource = serializers.CharField(help_text='Extended resource name (by resource), else "".')
    kind = serializers.CharField(
        help_text='Resource kind (gpu, gpu_shared, mig, passthrough, vgpu) by resource / type, else "".'
    )
    model = serializers.CharField(help_text='GPU model; "" when a resource spans several models.')
    vgpu_type = serializers.CharField(help_text='Bare vGPU type (by resource / type), else "".')
    nodes_with_free = serializers.IntegerField(help_text="Nodes with at least one requestable free device.")
    max_free_on_one_node = serializers.IntegerField(
        help_text="The most requestable free devices on one node (a VM's devices come from one node)."
    )
    free_unusable = serializers.IntegerField(help_text="Free devices that cannot be requested now.")
    free_unusable_reasons = serializers.DictField(child=serializers.IntegerField(), help_text=REASONS_HELP)
    gpu_equivalents = GpuEquivalentsSerializer()


class ModeSummarySerializer(serializers.Serializer[Any]):
    """Nodes and devices of one workload mode (``gpuinventory.summary.ModeSummary``).

    ``total``/``used``/``reserved``/``free`` add devices of every resource of the mode; when
    ``uniform`` is false (vGPU types or MIG profiles of different sizes) that sum means little:
    read ``by_vgpu_type``/``by_resource`` per type and ``gpu_equivalents``.
    """

    mode = serializers.ChoiceField(choices=WorkloadMode.choices)
    nodes = serializers.IntegerField(help_text="Present nodes of the mode.")
    nodes_ready = serializers.IntegerField()
    nodes_in_use = serializers.IntegerField(help_text="Nodes where at least one device is used.")
    nodes_idle = serializers.IntegerField(help_text="nodes − nodes_in_use.")
    nodes_flagged = serializers.IntegerField(help_text="Nodes with at least one diagnostic.")
    nodes_transitioning = serializers.IntegerField()
    total = serializers.IntegerField()
    used = serializers.IntegerField()
    reserved = serializers.IntegerField(help_text="Devices held by active reservations.")
    free = serializers.IntegerField(help_text="Requestable free devices (reservations subtracted).")
    free_unusable = serializers.IntegerField(
        help_text="free + free_unusable = Σ max(0, allocatable − used − reserved)."
    )
    free_unusable_reasons = serializers.DictField(child=serializers.IntegerField(), help_text=REASONS_HELP)
    uniform = serializers.BooleanField(help_text="Every device of the mode is a whole GPU.")
    gpu_equivalents = GpuEquivalentsSerializer()
    by_model = DeviceGroupSerializer(many=True)
    by_resource = DeviceGroupSerializer(many=True)
    by_vgpu_type = DeviceGroupSerializer(many=True, help_text="vm-vgpu: one entry per vGPU type.")


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

    Only present nodes count; stale resources never count; ``free`` is requestable devices only,
    reservations subtracted: the same numbers as the node list, the nodes API, the request form
    and the approval queue (one ``CapacitySnapshot``, docs/inventory.md §4).
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
