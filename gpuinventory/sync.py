"""Inventory sync: one snapshot of the cluster → derive → diff against the stored rows → apply.

``run_sync`` is the only writer of the inventory tables (gpuinventory/models.py). Design
(docs/inventory.md §3):

1. **Lock.** A ``SyncRun`` row with status ``running`` is the lock: a partial unique constraint
   (``syncrun_single_running``) lets only one such row exist, in SQLite and PostgreSQL alike, so
   Celery beat, the "Sync now" button and ``manage.py sync_inventory`` in any process never
   overlap. The loser returns the winner's row untouched and logs it. A ``running`` row older
   than :func:`lock_ttl_seconds` (a worker killed by the hard time limit) is taken over.
   No cache is needed (the default cache is per process, so a cache ``add`` lock would not lock).
2. **Snapshot.** ``GET /version`` and every LIST (nodes, non-terminal pods, VMIs, ClusterPolicy,
   KubeVirt CRs) plus the vGPU ConfigMap the ClusterPolicy names, read from
   ``PORTAL_GPU_OPERATOR_NAMESPACE``. Any Kubernetes error → the run fails with the reason and no
   inventory row is touched (the last good data stays, with its age on the dashboard).
3. **Derive** each GPU node with ``gpuinventory.nodeview.derive_node``.
4. **Diff and apply** in one transaction, writing only rows whose derived fields differ. A sync
   with no cluster change writes zero rows (``counts["rows_written"] == 0``).

``GpuNode.last_seen`` is written together with the row: when a node is added or changes, and
when it vanishes (then it becomes the start of the last successful sync, which listed it). A
present node is therefore "seen" as of the latest successful ``SyncRun``; bumping ``last_seen``
on every run would rewrite every row every 30 s.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from gpuinventory.choices import SyncStatus
from gpuinventory.flags import FLAG_TYPES, Flag, flag
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, PermittedDevice, SyncRun, VgpuConfig
from gpuinventory.naming import ModelSource
from gpuinventory.nodeview import (
    DerivedConsumer,
    DerivedNode,
    DerivedResource,
    derive_node,
    vgpu_reconfiguring,
)
from gpuinventory.permitted import kubevirt_flags
from gpuinventory.vgpuconfig import (
    CONFIG_KEY,
    ConfigEntry,
    VgpuConfigError,
    parse_config_file,
    parse_config_map_data,
)
from portal import k8s

logger = logging.getLogger(__name__)

TRIGGERS = frozenset({"beat", "manual", "command"})
_BATCH = 500


def lock_ttl_seconds() -> int:
    """Age (s) after which a ``running`` SyncRun counts as abandoned: the Celery hard time limit
    plus a minute (a worker killed there never marks its row)."""
    return int(settings.CELERY_TASK_TIME_LIMIT) + 60


def _warning(code: str, **params: str | int) -> Flag:
    """A ``SyncRun.warnings`` item; uses ``flags.flag`` for registered codes (validated)."""
    if code in FLAG_TYPES:
        return flag(code, **params)
    return {"code": code, "params": dict(params)}


# --- snapshot ----------------------------------------------------------------------------------


@dataclass
class Snapshot:
    """Everything one sync reads from the cluster (plain adapter dataclasses)."""

    version: str
    nodes: list[k8s.NodeInfo]
    pods: list[k8s.PodInfo]
    vmis: list[k8s.VmiInfo]
    policy: k8s.ClusterPolicyInfo | None
    kubevirts: list[k8s.KubeVirtInfo]
    config_map_name: str
    config_map_data: dict[str, str] | None


def take_snapshot() -> Snapshot:
    """Read the cluster once: version, every LIST, and the vGPU ConfigMap.

    Raises:
        k8s.K8sError: any adapter error (not configured, forbidden, unreachable, ...).
    """
    version = k8s.server_version().git_version
    nodes = k8s.list_nodes()
    pods = k8s.list_pods()
    vmis = k8s.list_vmis()
    policy = k8s.get_cluster_policy()
    kubevirts = k8s.list_kubevirts()
    cm_name = policy.vgpu_config_name if policy else k8s.ClusterPolicyInfo(name="").vgpu_config_name
    cm_data = k8s.read_config_map_data(settings.PORTAL_GPU_OPERATOR_NAMESPACE, cm_name)
    return Snapshot(version, nodes, pods, vmis, policy, kubevirts, cm_name, cm_data)


# --- derive ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _parse_configs_text(text: str) -> dict[str, list[ConfigEntry]]:
    return parse_config_file(text)


def _parse_configs(text: str | None) -> dict[str, list[ConfigEntry]]:
    """Parse the ConfigMap's ``config.yaml``, cached by content: the operator's default file has
    711 configs and takes most of a second to parse, and it rarely changes between syncs.

    Raises:
        VgpuConfigError: the key is missing or the file is invalid.
    """
    if text is None:
        return parse_config_map_data({})  # raises "the ConfigMap has no key 'config.yaml'"
    return _parse_configs_text(text)


@dataclass
class Derived:
    """The snapshot turned into what the tables should hold."""

    nodes: dict[str, DerivedNode]
    vgpu_configs: dict[str, list[ConfigEntry]] | None  # None: keep the stored rows (file invalid)
    config_map: str  # "namespace/name"
    permitted: dict[tuple[str, str, str], dict[str, Any]]  # (kind, resource, selector) -> fields
    warnings: list[Flag] = field(default_factory=list)


# Memo of derive_node across syncs in this process: node name -> (inputs key, result). derive_node
# is pure, so an unchanged key (same node resourceVersion, same GPU pods, same policy, KubeVirt CR
# and parsed config file) gives the same result; a long-lived beat worker skips most of the work.
_DERIVED: dict[str, tuple[Hashable, DerivedNode | None]] = {}


def _derive_key(
    node: k8s.NodeInfo,
    pods: Sequence[k8s.PodInfo],
    policy: k8s.ClusterPolicyInfo | None,
    kubevirt: k8s.KubeVirtInfo | None,
    configs_key: Hashable,
) -> Hashable:
    pod_key = tuple(
        (
            p.namespace,
            p.name,
            p.uid,
            p.phase,
            tuple(sorted(p.requests.items())),
            tuple(sorted(p.labels.items())),
        )
        for p in pods
    )
    # resourceVersion changes with every change of the Node; uid guards against a re-created node.
    node_key = (node.uid, node.resource_version) if node.resource_version else (node.uid, repr(node))
    return (node_key, pod_key, policy, kubevirt, configs_key)


def derive(snapshot: Snapshot) -> Derived:
    """Derive every GPU node, the vGPU configs and the permitted devices; collect warnings.

    Warnings (``SyncRun.warnings``): ``vgpu_config_map_missing``, ``vgpu_config_file_invalid``,
    ``no_cluster_policy``, ``kubevirt_multiple``, ``pod_quantity_fractional`` and the KubeVirt
    CR's own entry problems (``permitted.kubevirt_flags``).
    """
    warnings: list[Flag] = []
    namespace = settings.PORTAL_GPU_OPERATOR_NAMESPACE
    config_map = f"{namespace}/{snapshot.config_map_name}"
    configs, configs_for_nodes = _derive_configs(snapshot, warnings)
    if snapshot.policy is None:
        warnings.append(_warning("no_cluster_policy", value="-"))
    kubevirt = snapshot.kubevirts[0] if snapshot.kubevirts else None
    if len(snapshot.kubevirts) > 1:
        warnings.append(
            _warning(
                "kubevirt_multiple",
                used=f"{kubevirt.namespace}/{kubevirt.name}" if kubevirt else "",
                count=len(snapshot.kubevirts),
            )
        )
    if kubevirt is not None:
        warnings.extend(kubevirt_flags(kubevirt))

    pods_by_node = _pods_by_node(snapshot.pods, warnings)
    nodes = _derive_nodes(snapshot, pods_by_node, kubevirt, configs_for_nodes)
    permitted = _derive_permitted(snapshot.kubevirts)
    return Derived(nodes, configs, config_map, permitted, warnings)


def _derive_configs(
    snapshot: Snapshot, warnings: list[Flag]
) -> tuple[dict[str, list[ConfigEntry]] | None, dict[str, list[ConfigEntry]] | None]:
    """``(configs to store, configs for the nodes)`` from the vGPU devices ConfigMap: ``({}, None)``
    when it is missing (every stored config becomes absent), ``(None, None)`` when its file does
    not parse (stored ones kept); a warning says which."""
    configs: dict[str, list[ConfigEntry]] | None = None
    configs_for_nodes: dict[str, list[ConfigEntry]] | None = None
    if snapshot.config_map_data is None:
        warnings.append(_warning("vgpu_config_map_missing", config_map=snapshot.config_map_name))
        configs = {}  # the ConfigMap is gone: every stored config becomes absent
    else:
        try:
            configs = _parse_configs(snapshot.config_map_data.get(CONFIG_KEY))
            configs_for_nodes = configs
        except VgpuConfigError as exc:
            warnings.append(
                _warning("vgpu_config_file_invalid", config_map=snapshot.config_map_name, error=str(exc))
            )
    return configs, configs_for_nodes


def _pods_by_node(pods: Iterable[k8s.PodInfo], warnings: list[Flag]) -> dict[str, list[k8s.PodInfo]]:
    """The pods holding GPU requests, by node; a warning per fractional ``nvidia.com/*`` quantity."""
    pods_by_node: dict[str, list[k8s.PodInfo]] = defaultdict(list)
    for pod in pods:
        if pod.bad_quantities:
            for resource, value in sorted(pod.bad_quantities.items()):
                warnings.append(
                    _warning(
                        "pod_quantity_fractional",
                        pod=f"{pod.namespace}/{pod.name}",
                        pod_namespace=pod.namespace,
                        pod_name=pod.name,
                        resource=resource,
                        value=value,
                    )
                )
        if pod.node_name and pod.requests:
            pods_by_node[pod.node_name].append(pod)
    return pods_by_node


def _derive_nodes(
    snapshot: Snapshot,
    pods_by_node: Mapping[str, list[k8s.PodInfo]],
    kubevirt: k8s.KubeVirtInfo | None,
    configs_for_nodes: dict[str, list[ConfigEntry]] | None,
) -> dict[str, DerivedNode]:
    """``derive_node`` of every node, reusing last run's result for a node whose inputs did not
    change (``_DERIVED``, keyed by ``_derive_key``)."""
    text = (snapshot.config_map_data or {}).get(CONFIG_KEY)
    configs_key = (configs_for_nodes is not None, len(text), hash(text)) if text is not None else None
    nodes: dict[str, DerivedNode] = {}
    seen: dict[str, tuple[Hashable, DerivedNode | None]] = {}
    for node in snapshot.nodes:
        pods = pods_by_node.get(node.name, [])
        key = _derive_key(node, pods, snapshot.policy, kubevirt, configs_key)
        cached = _DERIVED.get(node.name)
        if cached is not None and cached[0] == key:
            derived = cached[1]
        else:
            derived = derive_node(node, pods, snapshot.policy, kubevirt, configs_for_nodes)
        seen[node.name] = (key, derived)
        if derived is not None:
            nodes[derived.name] = derived
    _DERIVED.clear()
    _DERIVED.update(seen)
    return nodes


def _derive_permitted(kubevirts: Iterable[k8s.KubeVirtInfo]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The permitted host devices of every KubeVirt CR, keyed ``(kind, resource, selector)``
    (the first CR naming one wins)."""
    permitted: dict[tuple[str, str, str], dict[str, Any]] = {}
    for kv in kubevirts:
        source = f"{kv.namespace}/{kv.name}"
        entries: Iterable[tuple[str, k8s.PermittedPci | k8s.PermittedMdev]] = [
            *((PermittedDevice.Kind.PCI.value, d) for d in kv.pci_host_devices),
            *((PermittedDevice.Kind.MDEV.value, d) for d in kv.mediated_devices),
        ]
        for kind, entry in entries:
            key = (kind, entry.resource_name[:253], entry.selector[:253])
            permitted.setdefault(
                key, {"external_resource_provider": entry.external_resource_provider, "source": source[:253]}
            )
    return permitted


# --- apply -------------------------------------------------------------------------------------

NODE_FIELDS = (
    "uid",
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
    "labels",
    "flags",
)
RESOURCE_FIELDS = (
    "kind",
    "model",
    "pci_device_id",
    "vgpu_type",
    "framebuffer_gb",
    "series",
    "capacity",
    "allocatable",
    "used",
    "stale",
    "permitted",
)
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


# --- the run -----------------------------------------------------------------------------------


def _acquire(trigger: str, now: datetime) -> tuple[SyncRun, bool]:
    """Insert the ``running`` row (the lock). Returns ``(row, won)``; on loss, the winner's row."""
    for _attempt in range(2):
        try:
            with transaction.atomic():
                return SyncRun.objects.create(started=now, trigger=trigger, status=SyncStatus.RUNNING), True
        except IntegrityError:
            holder = SyncRun.objects.filter(status=SyncStatus.RUNNING).first()
            if holder is None:
                continue  # it finished between our insert and this read: try again
            age = (now - holder.started).total_seconds()
            if age <= lock_ttl_seconds():
                return holder, False
            taken = SyncRun.objects.filter(pk=holder.pk, status=SyncStatus.RUNNING).update(
                status=SyncStatus.FAILED,
                finished=now,
                error=f"abandoned: still running after {int(age)} s (worker killed?); taken over",
            )
            if taken:
                logger.warning("inventory sync %s was abandoned after %d s; taking over", holder.pk, int(age))
    holder = SyncRun.objects.filter(status=SyncStatus.RUNNING).first()
    if holder is None:  # pragma: no cover - only under a pathological race
        raise RuntimeError("could not take the inventory sync lock")
    return holder, False


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def run_sync(trigger: str = "beat") -> SyncRun:
    """Run one inventory sync (docs/inventory.md §3).

    Args:
        trigger: ``"beat"``, ``"manual"`` (the "Sync now" button) or ``"command"``.

    Returns:
        This run's ``SyncRun``: ``success`` or ``failed`` (``error`` says why; the inventory rows
        are then untouched). When another sync holds the lock, that sync's row (status
        ``running``, a different ``trigger``/``started``) is returned and nothing is done.
        ``counts`` = nodes, added, changed, absent, rows_written; ``timings`` (ms) = list_ms,
        derive_ms, apply_ms, total_ms; ``warnings`` = ``[{"code", "params"}]``.

    Raises:
        ValueError: unknown ``trigger``.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown sync trigger {trigger!r}; one of {sorted(TRIGGERS)}")
    started = timezone.now()
    run, won = _acquire(trigger, started)
    if not won:
        logger.info(
            "inventory sync (%s) skipped: sync %s (%s) running since %s",
            trigger,
            run.pk,
            run.trigger,
            run.started,
        )
        return run
    t0 = time.perf_counter()
    timings: dict[str, int] = {}
    try:
        return _sync(run, started, t0, timings)
    except Exception as exc:
        logger.exception("inventory sync failed unexpectedly")
        run.error = f"internal error: {exc.__class__.__name__}: {exc}"
        return _finish(run, SyncStatus.FAILED, t0, timings)


def _sync(run: SyncRun, started: datetime, t0: float, timings: dict[str, int]) -> SyncRun:
    """The work of :func:`run_sync` once it holds the lock: snapshot, derive, apply, finish."""
    try:
        snapshot = take_snapshot()
    except k8s.K8sError as exc:
        run.error = f"cannot read the cluster: {exc}"
        logger.warning("inventory sync failed: %s", run.error)
        return _finish(run, SyncStatus.FAILED, t0, timings)
    t1 = time.perf_counter()
    timings["list_ms"] = _ms(t1 - t0)
    run.cluster_version = snapshot.version[:40]
    derived = derive(snapshot)
    t2 = time.perf_counter()
    timings["derive_ms"] = _ms(t2 - t1)
    last_success = (
        SyncRun.objects.filter(status=SyncStatus.SUCCESS)
        .order_by("-started")
        .values_list("started", flat=True)
        .first()
    )
    with transaction.atomic():
        result = apply(derived, started, last_success)
    timings["apply_ms"] = _ms(time.perf_counter() - t2)
    run.warnings = derived.warnings
    run.counts = {
        "nodes": len(derived.nodes),
        "added": result.added,
        "changed": result.changed,
        "absent": result.absent,
        "rows_written": result.rows_written,
    }
    return _finish(run, SyncStatus.SUCCESS, t0, timings)


def _finish(run: SyncRun, status: str, t0: float, timings: dict[str, int]) -> SyncRun:
    timings["total_ms"] = _ms(time.perf_counter() - t0)
    run.status = status
    run.timings = timings
    run.finished = timezone.now()
    run.save(
        update_fields=["status", "timings", "finished", "error", "counts", "warnings", "cluster_version"]
    )
    if status == SyncStatus.SUCCESS:
        logger.info("inventory %s", summary_line(run))
    # Signal the start and the end of a failure streak only (one webhook while the cluster is
    # unreachable, not one per beat).
    previous = (
        SyncRun.objects.filter(started__lt=run.started, status__in=[SyncStatus.SUCCESS, SyncStatus.FAILED])
        .order_by("-started")
        .values_list("status", flat=True)
        .first()
    )
    from gpuinventory.signals import sync_failed, sync_recovered

    if status == SyncStatus.FAILED and previous != SyncStatus.FAILED:
        sync_failed.send_robust(sender=SyncRun, run=run)
    elif status == SyncStatus.SUCCESS and previous == SyncStatus.FAILED:
        sync_recovered.send_robust(sender=SyncRun, run=run)
    return run


def summary_line(run: SyncRun) -> str:
    """One line about a finished run, e.g.
    ``sync ok: 9 nodes (2 added, 1 changed, 0 absent), 14 rows written in 412 ms``, or
    ``sync failed: <reason>``."""
    if run.status == SyncStatus.SUCCESS:
        c = run.counts
        return (
            f"sync ok: {c.get('nodes', 0)} nodes ({c.get('added', 0)} added, {c.get('changed', 0)} changed, "
            f"{c.get('absent', 0)} absent), {c.get('rows_written', 0)} rows written in "
            f"{run.timings.get('total_ms', 0)} ms"
        )
    if run.status == SyncStatus.RUNNING:
        return (
            f"sync skipped: another sync ({run.trigger}, started {run.started:%Y-%m-%d %H:%M:%S}) is running"
        )
    return f"sync failed: {run.error}"
