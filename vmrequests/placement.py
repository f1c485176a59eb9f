"""Where a request would run, whether the team's quota allows it, and what to offer instead.

Used by the request form (at submit), the approval queue (the verdict per pending request) and
approvals (re-checked under the approval lock, ``vmrequests/approval.py``). Everything reads one
``gpuinventory.capacity.CapacitySnapshot`` plus one ``QuotaBook``, so a page of N requests costs
the same number of queries as a page of one.

Rules:
- All devices of one VMI come from one node: a request for 2 passthrough GPUs fits only on a node
  with 2 free (KubeVirt puts one unit per ``gpus[]`` entry into the single virt-launcher pod's
  requests, DOMAIN.md §2 "Allocatable is not free").
- Placement now: the usable node with the *fewest* free devices that still fit (best fit keeps
  large holes for large requests), ties by name.
- vGPU with no free instance now: an idle node that could be re-profiled
  (``capacity.reprofile_offers``: no vGPU consumer, no reservation, state not pending/failed).
- A vGPU type KubeVirt does not permit (``mediatedDevices``) is never offered: the VMI would stay
  Pending with ``FailedCreate`` (DOMAIN.md §5.4).
- More than one vGPU per VM only for C- and Q-series types that take a whole GPU's frame buffer
  (NVIDIA Virtual GPU Software User Guide, "Virtual GPU Types That Support Multiple vGPUs per
  VM"); every other type: one per VM.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from gpuinventory.capacity import CapacitySnapshot, NodeFree, ReprofileCandidate, ResourceRow
from gpuinventory.choices import ResourceKind
from gpuinventory.models import PermittedDevice
from gpuinventory.naming import memory_gb_for_vgpu_family, parse_vgpu_type
from vmrequests.choices import OPEN_STATES, VMMode
from vmrequests.models import MAX_DEVICES, GpuQuota, Team, VMRequest

#: Form value prefix of a vGPU type that no node advertises yet (needs a re-profile).
REPROFILE_PREFIX = "vgpu-type:"

MODE_KIND = {VMMode.PASSTHROUGH: ResourceKind.PASSTHROUGH, VMMode.VGPU: ResourceKind.VGPU}


def vgpus_per_vm_limit(vgpu_type: str) -> int:
    """How many vGPUs of ``vgpu_type`` one VM may have: ``MAX_DEVICES`` for C/Q-series types
    with a whole GPU's frame buffer (e.g. ``A10-24Q``, ``T4-16Q``, ``A100-7-40C``), else 1
    (module docstring; GPU memory per vGPU family from ``PCI_MODELS``)."""
    parsed = parse_vgpu_type(vgpu_type)
    if parsed is None or parsed.series not in {"C", "Q"}:
        return 1
    whole = memory_gb_for_vgpu_family(parsed.gpu)
    return MAX_DEVICES if whole is not None and parsed.framebuffer_gb >= whole else 1


@dataclass(frozen=True)
class GpuOption:
    """One GPU choice of the request form.

    Attributes:
        mode: ``VMMode`` value. value: the form value (resource name, or ``"vgpu-type:<type>"``
            for a type only available after re-profiling).
        resource_name: ``""`` for a re-profile-only type. vgpu_type: bare type or ``""``.
        model: GPU model. free: requestable free devices now, cluster-wide.
        max_on_one_node: the most free devices on one node (the largest VM that fits now).
        per_vm_limit: most devices one VM may have. reprofile: idle nodes that could offer it.
    """

    mode: str
    value: str
    resource_name: str
    vgpu_type: str
    model: str
    free: int
    max_on_one_node: int
    per_vm_limit: int
    reprofile: tuple[ReprofileCandidate, ...] = ()

    @property
    def label(self) -> str:
        """``"A100 PCIe 40GB (nvidia.com/GA100_A100_PCIE_40GB): 3 free"`` and the re-profile hint."""
        name = self.vgpu_type or self.resource_name
        head = f"{self.model} · {name}" if self.model else name
        parts = [ngettext("%(n)s free", "%(n)s free", self.free) % {"n": self.free}]
        if self.reprofile:
            c = self.reprofile[0]
            parts.append(
                _("available after re-profiling node %(node)s (%(n)s instances)")
                % {"node": c.node, "n": c.instances}
            )
        return f"{head}: " + "; ".join(parts)

    @property
    def fits_now_or_later(self) -> bool:
        """True when at least one device is free now or after a re-profile."""
        return self.free > 0 or bool(self.reprofile)


def _permitted_vgpu_types() -> set[str] | None:
    """Bare vGPU types KubeVirt's ``mediatedDevices`` permit; None when the CR lists nothing
    (KubeVirt then skips the check, DOMAIN.md §5.1)."""
    rows = list(PermittedDevice.objects.filter(present=True).values_list("kind", "resource_name"))
    if not rows:
        return None
    out = set()
    for kind, name in rows:
        if kind == PermittedDevice.Kind.MDEV:
            parsed = parse_vgpu_type(name.rsplit("_", 1)[-1])
            if parsed is not None:
                out.add(parsed.name)
    return out


def gpu_options(mode: str, snapshot: CapacitySnapshot | None = None) -> list[GpuOption]:
    """The GPUs the form offers for ``mode``: resources that exist on usable nodes of that mode and
    that KubeVirt permits, with free counts; for vGPU also types idle nodes could offer after a
    re-profile (``value`` ``"vgpu-type:<type>"``). Sorted by model then name.

    Args:
        mode: ``VMMode`` value. snapshot: reuse a loaded snapshot.
    """
    snap = snapshot or CapacitySnapshot()
    kind = MODE_KIND[VMMode(mode)]
    rows: dict[str, list[ResourceRow]] = defaultdict(list)
    for row in snap.rows:
        if row.kind == kind and row.counts_for_requests and row.reason != "not_permitted":
            rows[row.resource_name].append(row)
    reprofile = snap.reprofile_offers() if mode == VMMode.VGPU else {}
    options = []
    for name, group in rows.items():
        vtype = group[0].vgpu_type
        options.append(
            GpuOption(
                mode=mode,
                value=name,
                resource_name=name,
                vgpu_type=vtype,
                model=group[0].model,
                free=sum(r.free for r in group),
                max_on_one_node=max((r.free for r in group), default=0),
                per_vm_limit=vgpus_per_vm_limit(vtype) if vtype else MAX_DEVICES,
                reprofile=tuple(reprofile.get(vtype, ())) if vtype else (),
            )
        )
    if mode == VMMode.VGPU:
        advertised = {o.vgpu_type for o in options}
        permitted = _permitted_vgpu_types()
        for vtype, candidates in reprofile.items():
            if vtype in advertised or (permitted is not None and vtype not in permitted):
                continue
            options.append(
                GpuOption(
                    mode=mode,
                    value=REPROFILE_PREFIX + vtype,
                    resource_name="",
                    vgpu_type=vtype,
                    model=candidates[0].gpu_model,
                    free=0,
                    max_on_one_node=0,
                    per_vm_limit=vgpus_per_vm_limit(vtype),
                    reprofile=tuple(candidates),
                )
            )
    return sorted(options, key=lambda o: (o.model, o.vgpu_type or o.resource_name))


@dataclass(frozen=True)
class Placement:
    """Where a request would run.

    Attributes:
        fits: True when it can run now or after a re-profile.
        node: the chosen node ("" when it does not fit).
        resource_name: the exact resource on that node ("" when a re-profile must create it).
        free: free devices of it on ``node`` now (0 with a re-profile).
        reprofile: the re-profile plan when no node has a free instance now.
        nodes_now: every usable node with enough free devices now (most free first).
        reason: why it does not fit, in the analyst's words ("" when it fits).
        free_in_cluster: requestable free devices of the asked resource (or of every resource of
            the asked vGPU type) across the cluster now: the snapshot's number, as the dashboard
            and the form show it.
    """

    fits: bool
    node: str = ""
    resource_name: str = ""
    free: int = 0
    reprofile: ReprofileCandidate | None = None
    nodes_now: tuple[NodeFree, ...] = ()
    reason: str = ""
    free_in_cluster: int = 0

    def describe(self) -> str:
        """One line for the queue and the timeline."""
        if not self.fits:
            return self.reason
        if self.reprofile is not None:
            c = self.reprofile
            return _(
                "Re-profile idle node %(node)s from vGPU config %(old)s to %(new)s (%(n)s instances), then run there."
            ) % {"node": c.node, "old": c.current_config or _("(default)"), "new": c.config, "n": c.instances}
        return _("Runs now on %(node)s (%(free)s free there).") % {"node": self.node, "free": self.free}

    def as_json(self) -> dict[str, Any]:
        """The placement for ``VMRequestEvent.data``."""
        out: dict[str, Any] = {"fits": self.fits, "node": self.node, "resource_name": self.resource_name}
        if self.reprofile is not None:
            out["reprofile"] = {
                "node": self.reprofile.node,
                "from": self.reprofile.current_config,
                "to": self.reprofile.config,
                "instances": self.reprofile.instances,
            }
        if not self.fits:
            out["reason"] = self.reason
        return out


def _gpu_words(resource_name: str, vgpu_type: str, snap: CapacitySnapshot) -> str:
    if vgpu_type:
        return _("%(type)s vGPU") % {"type": vgpu_type}
    model = next((r.model for r in snap.rows if r.resource_name == resource_name and r.model), "")
    return model or resource_name


def find_placement(
    mode: str, resource_name: str, vgpu_type: str, count: int, snapshot: CapacitySnapshot | None = None
) -> Placement:
    """Where ``count`` devices of ``resource_name`` (or vGPU ``vgpu_type``) would come from.

    Args:
        mode: ``VMMode`` value. resource_name: exact name, or ``""`` for a vGPU type no node
            advertises yet. vgpu_type: bare type for vGPU requests. count: devices for one VMI.

    Returns:
        A ``Placement``; ``fits`` False with ``reason`` when nothing fits now or by re-profiling.
    """
    snap = snapshot or CapacitySnapshot()
    names = [resource_name] if resource_name else snap.resource_names_for_type(vgpu_type) if vgpu_type else []
    nodes: list[NodeFree] = []
    for name in names:
        nodes.extend(snap.nodes_offering(name, count))
    in_cluster = sum(r.free for r in snap.rows if r.resource_name in names and r.counts_for_requests)
    if nodes:
        best = min(nodes, key=lambda n: (n.free, n.node))
        ordered = tuple(sorted(nodes, key=lambda n: (-n.free, n.node)))
        return Placement(
            True, best.node, best.resource_name, best.free, None, ordered, free_in_cluster=in_cluster
        )
    if mode == VMMode.VGPU and vgpu_type:
        for c in snap.reprofile_candidates(vgpu_type):
            if c.instances >= count:
                return Placement(True, c.node, "", 0, c, free_in_cluster=in_cluster)
    what = _gpu_words(resource_name, vgpu_type, snap)
    most = max((snap.max_free_on_one_node(n) for n in names), default=0)
    if most:
        reason = ngettext(
            "No single node has %(count)s free %(what)s; the most free on one node is %(most)s.",
            "No single node has %(count)s free %(what)s; the most free on one node is %(most)s.",
            count,
        ) % {"count": count, "what": what, "most": most}
    elif mode == VMMode.VGPU:
        reason = _("No node has a free %(what)s, and no idle node can be re-profiled to offer it.") % {
            "what": what
        }
    else:
        reason = _("All %(what)s GPUs are in use or reserved right now.") % {"what": what}
    return Placement(False, reason=reason, free_in_cluster=in_cluster)


@dataclass(frozen=True)
class QuotaUse:
    """One quota of a team against one request: ``used`` + ``requested`` ≤ ``limit``?"""

    quota_id: int
    scope: str
    limit: int
    used: int
    requested: int

    @property
    def after(self) -> int:
        """Devices the team would hold if the request were approved."""
        return self.used + self.requested

    @property
    def fits(self) -> bool:
        """True when the request stays within this quota."""
        return self.after <= self.limit

    def describe(self) -> str:
        """``"any GPU: 3 of 4 used, 5 after approval"``."""
        return _("%(scope)s: %(used)s of %(limit)s used, %(after)s after approval") % {
            "scope": self.scope,
            "used": self.used,
            "limit": self.limit,
            "after": self.after,
        }


class QuotaBook:
    """Quotas and open-request usage of some teams, loaded once (two queries)."""

    def __init__(self, team_ids: Iterable[int]) -> None:
        ids = sorted(set(team_ids))
        self.quotas: dict[int, list[GpuQuota]] = defaultdict(list)
        for q in GpuQuota.objects.filter(team_id__in=ids).order_by("mode", "gpu"):
            self.quotas[q.team_id].append(q)
        self.open: dict[int, list[tuple[int, str, str, str, int]]] = defaultdict(list)
        for pk, team_id, mode, name, vtype, count in VMRequest.objects.filter(
            team_id__in=ids, status__in=OPEN_STATES
        ).values_list("pk", "team_id", "mode", "resource_name", "vgpu_type", "device_count"):
            self.open[team_id].append((pk, mode, name, vtype, count))

    def usage(
        self,
        team_id: int,
        mode: str,
        resource_name: str,
        vgpu_type: str,
        count: int,
        *,
        exclude_pk: int | None = None,
    ) -> list[QuotaUse]:
        """Every quota of the team whose scope covers the request, with use before and after."""
        out = []
        for q in self.quotas.get(team_id, []):
            if not q.matches(mode, resource_name, vgpu_type):
                continue
            used = sum(
                n
                for pk, m, name, vt, n in self.open.get(team_id, [])
                if pk != exclude_pk and q.matches(m, name, vt)
            )
            out.append(QuotaUse(q.pk, q.scope_label, q.max_devices, used, count))
        return out


@dataclass(frozen=True)
class Alternative:
    """Something close to what was asked that fits now (capacity and quota)."""

    option: GpuOption
    count: int
    placement: Placement

    def describe(self) -> str:
        """``"2 × A100 PCIe 40GB (runs now on gpu-node-02)"``."""
        name = self.option.vgpu_type or self.option.model or self.option.resource_name
        return f"{self.count} × {name} — {self.placement.describe()}"


@dataclass
class Verdict:
    """The full check of one request: placement, quotas, and what to offer when it fails."""

    placement: Placement
    quotas: list[QuotaUse]
    alternatives: list[Alternative] = field(default_factory=list)

    @property
    def over_quota(self) -> list[QuotaUse]:
        """The quotas the request would exceed."""
        return [q for q in self.quotas if not q.fits]

    @property
    def ok(self) -> bool:
        """True when the request fits capacity and every quota."""
        return self.placement.fits and not self.over_quota

    def problems(self) -> list[str]:
        """Why it cannot be approved, in the analyst's words (``[]`` when ``ok``)."""
        out = [] if self.placement.fits else [self.placement.reason]
        for q in self.over_quota:
            out.append(
                _(
                    "Your team's quota for %(scope)s is %(limit)s devices and %(used)s are held; this request needs %(requested)s more."
                )
                % {"scope": q.scope, "limit": q.limit, "used": q.used, "requested": q.requested}
            )
        return out


def _closeness(vgpu_type: str, model: str, o: GpuOption) -> tuple[Any, ...]:
    want_parsed = parse_vgpu_type(vgpu_type) if vgpu_type else None
    want_fb = want_parsed.framebuffer_gb if want_parsed else None
    o_parsed = parse_vgpu_type(o.vgpu_type) if o.vgpu_type else None
    fb_gap = abs(o_parsed.framebuffer_gb - want_fb) if (o_parsed and want_fb is not None) else 0
    return (o.model != model, fb_gap, -o.free, o.value)


def check_request(
    team: Team,
    mode: str,
    resource_name: str,
    vgpu_type: str,
    count: int,
    *,
    exclude_pk: int | None = None,
    snapshot: CapacitySnapshot | None = None,
    book: QuotaBook | None = None,
    with_alternatives: bool = True,
    max_alternatives: int = 3,
) -> Verdict:
    """Check capacity (now or by re-profiling) and the team's quotas for one request.

    Args:
        team: the requesting team. mode/resource_name/vgpu_type/count: what is asked.
        exclude_pk: a request not to count in quota usage (the one being approved).
        snapshot, book: reuse loaded state (the queue checks many requests at once).
        with_alternatives: when it does not fit, look for up to ``max_alternatives`` options of
            the same mode that fit both capacity and quota, closest first (same model, then the
            nearest vGPU frame buffer, then the most free); the same GPU with fewer devices
            comes first when that fits.

    Returns:
        A ``Verdict``.
    """
    snap = snapshot or CapacitySnapshot()
    quotas = book or QuotaBook([team.pk])
    placement = find_placement(mode, resource_name, vgpu_type, count, snap)
    verdict = Verdict(
        placement, quotas.usage(team.pk, mode, resource_name, vgpu_type, count, exclude_pk=exclude_pk)
    )
    if verdict.ok or not with_alternatives:
        return verdict
    options = gpu_options(mode, snap)
    want = next((o for o in options if o.resource_name == resource_name and resource_name), None)
    model = want.model if want else next((o.model for o in options if o.vgpu_type == vgpu_type), "")
    found: list[Alternative] = []
    for o in sorted(options, key=lambda o: _closeness(vgpu_type, model, o)):
        same = (o.resource_name and o.resource_name == resource_name) or (
            not resource_name and o.vgpu_type == vgpu_type
        )
        counts = range(min(count - 1, o.per_vm_limit), 0, -1) if same else [min(count, o.per_vm_limit)]
        for n in counts:
            p = find_placement(mode, o.resource_name, o.vgpu_type, n, snap)
            if p.fits and all(
                q.fits
                for q in quotas.usage(team.pk, mode, o.resource_name, o.vgpu_type, n, exclude_pk=exclude_pk)
            ):
                found.append(Alternative(o, n, p))
                break
        if len(found) >= max_alternatives:
            break
    verdict.alternatives = found
    return verdict
