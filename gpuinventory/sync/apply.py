"""Diff and apply: write only the inventory rows whose derived fields differ (docs/inventory.md
§3, step 4)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, PermittedDevice, VgpuConfig
from gpuinventory.naming import ModelSource
from gpuinventory.nodeview import (
    DerivedConsumer,
    DerivedNode,
    DerivedResource,
    vgpu_reconfiguring,
)
from gpuinventory.sync.derive import Derived

_BATCH = 500


NODE_FIELDS = ("uid", *GpuNode.OBSERVED_FIELDS, "labels", "flags")
RESOURCE_FIELDS = (*GpuResource.OBSERVED_FIELDS, "stale", "permitted")
CONSUMER_FIELDS = ("count", "vmi_name")


@dataclass
class ApplyResult:
    """What :func:`apply` changed. ``rows_written`` = rows inserted + updated + deleted."""

    added: int = 0
    changed: int = 0
    absent: int = 0
    rows_written: int = 0


def _differs(obj: models.Model, values: Mapping[str, Any], names: Sequence[str]) -> bool:
    return any(getattr(obj, name) != values[name] for name in names)


def _assign(obj: models.Model, values: Mapping[str, Any], names: Sequence[str]) -> None:
    for name in names:
        setattr(obj, name, values[name])


class _Writer:
    """Collects row writes per model and flushes them in batches, counting rows."""

    def __init__(self) -> None:
        self.rows = 0

    def create(self, model: type[models.Model], objs: list[Any]) -> list[Any]:
        if objs:
            model.objects.bulk_create(objs, batch_size=_BATCH)  # type: ignore[attr-defined]
            self.rows += len(objs)
        return objs

    def update(self, model: type[models.Model], objs: list[Any], names: Sequence[str]) -> None:
        if objs:
            model.objects.bulk_update(objs, list(names), batch_size=_BATCH)  # type: ignore[attr-defined]
            self.rows += len(objs)

    def delete(self, model: type[models.Model], ids: list[int]) -> None:
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start : start + _BATCH]
            model.objects.filter(pk__in=chunk).delete()  # type: ignore[attr-defined]
            self.rows += len(chunk)


def _sync_children(
    stored: Mapping[Any, Any],
    wanted: Mapping[Any, Mapping[str, Any]],
    names: Sequence[str],
    node: GpuNode,
    make: Callable[[GpuNode, Mapping[str, Any]], Any],
    create: list[Any],
    update: list[Any],
    delete: list[int],
) -> bool:
    """Plan the child rows of one node; returns whether anything differs."""
    changed = False
    for key, values in wanted.items():
        obj = stored.get(key)
        if obj is None:
            create.append(make(node, values))
            changed = True
        elif _differs(obj, values, names):
            _assign(obj, values, names)
            update.append(obj)
            changed = True
    gone = [obj.pk for key, obj in stored.items() if key not in wanted]
    delete.extend(gone)
    return changed or bool(gone)


def _resource_values(r: DerivedResource) -> dict[str, Any]:
    return r.model_fields()


def _consumer_values(c: DerivedConsumer) -> dict[str, Any]:
    return c.model_fields()


def _keep_identity(dn: DerivedNode, stored: GpuNode | None) -> dict[str, Any]:
    """``dn.model_fields()``, except that a vGPU node being reconfigured keeps its stored GPU
    model, count and memory where the new derivation is unknown.

    During a vGPU re-profiling (``nvidia.com/vgpu.config.state=pending`` or deploy labels
    ``paused-for-vgpu-change``, DOMAIN.md §3 step 3) every vGPU resource vanishes for a while,
    so ``identify_gpus`` cannot tell the GPUs; the hardware did not change, so the last known
    values (and their ``model_source``) stay until the devices are advertised again. A model
    derived only from the vGPU config being applied (``ModelSource.VGPU_CONFIG``) counts as unknown
    then: a shared config lists every GPU family it covers.
    """
    values = dn.model_fields()
    if stored is None or stored.workload_mode != str(dn.workload_mode):
        return values
    if not vgpu_reconfiguring(dn.workload_mode, dn.labels):
        return values
    # A model guessed from the config being applied (every family a shared config such as
    # "default" covers, e.g. "V100X + ... + Tesla T4 + A10") is no better than unknown here.
    guessed = values["model_source"] in (ModelSource.UNKNOWN, ModelSource.VGPU_CONFIG)
    if (not values["gpu_model"] or guessed) and stored.gpu_model:
        values["gpu_model"], values["model_source"] = stored.gpu_model, stored.model_source
        values["gpu_memory_mib"] = stored.gpu_memory_mib
    for key in ("gpu_count", "gpu_memory_mib"):
        if values[key] is None and getattr(stored, key) is not None:
            values[key] = getattr(stored, key)
    return values


def apply(derived: Derived, now: datetime, last_success: datetime | None) -> ApplyResult:
    """Write the difference between ``derived`` and the stored rows (call inside a transaction).

    Args:
        derived: from :func:`derive`.
        now: this run's start; ``first_seen``/``last_seen`` of added or changed nodes.
        last_success: start of the previous successful sync (``last_seen`` of vanished nodes).

    Returns:
        Counts: nodes added (new or back from absent), changed, newly absent; rows written.
    """
    result = ApplyResult()
    writer = _Writer()
    stored_nodes = {n.name: n for n in GpuNode.objects.all()}
    new_nodes, updated_names = _apply_nodes(derived, stored_nodes, now, last_success, writer, result)
    all_nodes = {**stored_nodes, **{n.name: n for n in new_nodes}}
    _apply_children(derived, all_nodes, stored_nodes, updated_names, writer, result)
    _apply_vgpu_configs(writer, derived)
    _apply_permitted(writer, derived)
    result.rows_written = writer.rows
    return result


def _apply_nodes(
    derived: Derived,
    stored_nodes: dict[str, GpuNode],
    now: datetime,
    last_success: datetime | None,
    writer: _Writer,
    result: ApplyResult,
) -> tuple[list[GpuNode], set[str]]:
    """Add, update and mark absent the ``GpuNode`` rows (counted in ``result``).

    Returns:
        The new nodes (with primary keys) and the names of the updated ones.
    """
    new_nodes: list[GpuNode] = []
    node_updates: list[GpuNode] = []
    for name, dn in derived.nodes.items():
        obj = stored_nodes.get(name)
        values = _keep_identity(dn, obj)
        if obj is None:
            new_nodes.append(GpuNode(present=True, first_seen=now, last_seen=now, updated=now, **values))
            result.added += 1
        elif not obj.present or _differs(obj, values, NODE_FIELDS):
            if obj.present:
                result.changed += 1
            else:
                result.added += 1
            _assign(obj, values, NODE_FIELDS)
            obj.present, obj.last_seen, obj.updated = True, now, now
            node_updates.append(obj)
    absent_updates = []
    for name, obj in stored_nodes.items():
        if name not in derived.nodes and obj.present:
            obj.present, obj.updated = False, now
            if last_success is not None and last_success > obj.last_seen:
                obj.last_seen = last_success
            absent_updates.append(obj)
    result.absent = len(absent_updates)
    writer.create(GpuNode, new_nodes)
    writer.update(GpuNode, node_updates, (*NODE_FIELDS, "present", "last_seen", "updated"))
    writer.update(GpuNode, absent_updates, ("present", "last_seen", "updated"))
    updated_names = {n.name for n in node_updates}
    if not all(n.pk for n in new_nodes):  # a backend that returns no primary keys
        by_name = dict(GpuNode.objects.filter(name__in=[n.name for n in new_nodes]).values_list("name", "pk"))
        for n in new_nodes:
            n.pk = by_name[n.name]
    return new_nodes, updated_names


def _apply_children(
    derived: Derived,
    all_nodes: dict[str, GpuNode],
    stored_nodes: dict[str, GpuNode],
    updated_names: set[str],
    writer: _Writer,
    result: ApplyResult,
) -> None:
    """Write each node's ``GpuResource`` and ``GpuConsumer`` rows; a present node whose only
    change is in them counts as changed."""
    resources: dict[int, dict[str, GpuResource]] = defaultdict(dict)
    for r in GpuResource.objects.all():
        resources[r.node_id][r.name] = r
    consumers: dict[int, dict[tuple[str, str, str], GpuConsumer]] = defaultdict(dict)
    for c in GpuConsumer.objects.all():
        consumers[c.node_id][(c.resource_name, c.pod_namespace, c.pod_name)] = c

    res_create: list[GpuResource] = []
    res_update: list[GpuResource] = []
    res_delete: list[int] = []
    con_create: list[GpuConsumer] = []
    con_update: list[GpuConsumer] = []
    con_delete: list[int] = []
    for name, dn in derived.nodes.items():
        node = all_nodes[name]
        children_changed = _sync_children(
            resources.get(node.pk, {}),
            {r.name: _resource_values(r) for r in dn.resources},
            RESOURCE_FIELDS,
            node,
            lambda n, v: GpuResource(node=n, **v),
            res_create,
            res_update,
            res_delete,
        )
        children_changed |= _sync_children(
            consumers.get(node.pk, {}),
            {(c.resource_name, c.pod_namespace, c.pod_name): _consumer_values(c) for c in dn.consumers},
            CONSUMER_FIELDS,
            node,
            lambda n, v: GpuConsumer(node=n, **v),
            con_create,
            con_update,
            con_delete,
        )
        if (
            children_changed
            and name in stored_nodes
            and name not in updated_names
            and stored_nodes[name].present
        ):
            result.changed += 1
    writer.delete(GpuConsumer, con_delete)
    writer.delete(GpuResource, res_delete)
    writer.create(GpuResource, res_create)
    writer.update(GpuResource, res_update, RESOURCE_FIELDS)
    writer.create(GpuConsumer, con_create)
    writer.update(GpuConsumer, con_update, CONSUMER_FIELDS)


def _upsert_present(
    writer: _Writer,
    model: type[models.Model],
    stored: dict[Any, Any],
    wanted: dict[Any, dict[str, Any]],
    build: Callable[[Any, dict[str, Any]], models.Model],
    fields: tuple[str, ...],
) -> None:
    """Create missing rows, update changed ones and mark vanished ones ``present=False``.

    Args:
        stored: existing rows by key; wanted: the derived field values by the same key (without
            ``present``); build: makes a new row from a key and its values; fields: the columns
            ``wanted`` sets (``present`` and ``updated`` are added). Rows are never deleted.
    """
    create, update = [], []
    for key, fields_now in wanted.items():
        values = {**fields_now, "present": True}
        obj = stored.get(key)
        if obj is None:
            create.append(build(key, values))
        elif _differs(obj, values, tuple(values)):
            _assign(obj, values, tuple(values))
            update.append(obj)
    for key, obj in stored.items():
        if key not in wanted and obj.present:
            obj.present = False
            update.append(obj)
    now = timezone.now()
    for obj in update:
        obj.updated = now
    writer.create(model, create)
    writer.update(model, update, (*fields, "present", "updated"))


def _apply_vgpu_configs(writer: _Writer, derived: Derived) -> None:
    if derived.vgpu_configs is None:  # the file does not parse: keep what was stored
        return
    wanted = {
        name[:63]: {"config_map": derived.config_map, "entries": [e.as_json() for e in entries]}
        for name, entries in derived.vgpu_configs.items()
    }
    _upsert_present(
        writer,
        VgpuConfig,
        {c.name: c for c in VgpuConfig.objects.all()},
        wanted,
        lambda name, values: VgpuConfig(name=name, **values),
        ("config_map", "entries"),
    )


def _apply_permitted(writer: _Writer, derived: Derived) -> None:
    _upsert_present(
        writer,
        PermittedDevice,
        {(p.kind, p.resource_name, p.selector): p for p in PermittedDevice.objects.all()},
        dict(derived.permitted),
        lambda key, values: PermittedDevice(kind=key[0], resource_name=key[1], selector=key[2], **values),
        ("external_resource_provider", "source"),
    )
