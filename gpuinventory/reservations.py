"""The one writer of ``Reservation`` rows: reserve, release, and the re-profile marks.

A reservation promises ``count`` devices on a node to a *holder* (today a VM request) from its
approval until its VMI's launcher pod is bound (the capacity service then counts the pod in
``GpuResource.used`` instead, docs/inventory.md §4). Every write goes through this module:

- ``reserve(holder, node, ...)``: the approval service (``vmrequests/approval.py``), under its
  approval lock, after ``capacity`` said the devices are free;
- ``release(holder)``: a request reaching a terminal state (``vmrequests/models.py``);
- ``mark_reprofile_started`` / ``mark_reprofile_done``: the re-profile of a vGPU node
  (``vmrequests/provisioning.py``): when the ``nvidia.com/vgpu.config`` label was patched and
  what it was before, then the exact resource name read from allocatable (DOMAIN.md §3,
  pitfall 4: never derived from the config name).

The holder is typed (:class:`Holder`) instead of hand-built ``"vmrequest:<pk>"`` strings, and
this module does not import ``vmrequests`` (the app that holds reservations depends on the
inventory, never the other way round). ``Holder.key`` is the value stored in
``Reservation.holder``; its format (``"<kind>:<id>"``) is the one existing rows already have, so
no data migration is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpuinventory.models import GpuNode, Reservation

__all__ = ["Holder", "mark_reprofile_done", "mark_reprofile_started", "release", "reservation_of", "reserve"]


@dataclass(frozen=True)
class Holder:
    """Who holds a reservation: ``kind`` (e.g. ``"vmrequest"``) and the holder's primary key.

    ``key`` (= ``str(holder)``) is the stored ``Reservation.holder`` value, ``"vmrequest:42"``.
    """

    kind: str
    id: int

    def __post_init__(self) -> None:
        if not self.kind or ":" in self.kind:
            raise ValueError(f"holder kind must be a non-empty word without ':', not {self.kind!r}")

    @property
    def key(self) -> str:
        """The stored form, ``"<kind>:<id>"``."""
        return f"{self.kind}:{self.id}"

    def __str__(self) -> str:
        return self.key

    @classmethod
    def parse(cls, key: str) -> Holder:
        """The holder of a stored ``Reservation.holder`` value.

        Raises:
            ValueError: not ``"<kind>:<integer id>"``.
        """
        kind, sep, ident = key.partition(":")
        if not sep or not ident.isdigit():
            raise ValueError(f"not a reservation holder: {key!r}")
        return cls(kind, int(ident))


def reserve(
    holder: Holder,
    node: GpuNode,
    *,
    resource_name: str,
    vgpu_type: str,
    count: int,
    vmi_namespace: str,
    vmi_name: str,
    reprofile_config: str = "",
    reprofile_from: str = "",
) -> Reservation:
    """Promise ``count`` devices on ``node`` to ``holder``.

    Call it inside the caller's transaction, after the capacity check that found the devices
    free (the approval service holds its approval lock, so two approvals cannot both reserve the
    last device). A holder has at most one reservation (unique ``holder`` column).

    Args:
        holder: who holds it. node: where the devices are.
        resource_name: exact resource (``"nvidia.com/GRID_T4-8Q"``), or ``""`` when the node is to
            be re-profiled and the name is read from allocatable afterwards.
        vgpu_type: bare vGPU type (``"T4-8Q"``) for vGPU requests, else ``""``.
        count: devices, ≥ 1.
        vmi_namespace, vmi_name: the VMI whose launcher pod will consume them.
        reprofile_config: the ``nvidia.com/vgpu.config`` value to set (``""`` = no re-profile).
        reprofile_from: the node's config label when the re-profile was planned.

    Returns:
        The new ``Reservation``.

    Raises:
        ValueError: ``count`` < 1; neither ``resource_name`` nor (``vgpu_type`` and
            ``reprofile_config``) given.
        django.db.IntegrityError: ``holder`` already holds a reservation.
    """
    if count < 1:
        raise ValueError(f"a reservation needs at least one device, not {count}")
    if not resource_name and not (vgpu_type and reprofile_config):
        raise ValueError("a reservation names its resource, or a vGPU type and the config to re-profile to")
    return Reservation.objects.create(
        node=node,
        resource_name=resource_name,
        vgpu_type=vgpu_type,
        count=count,
        reprofile_config=reprofile_config,
        reprofile_from=reprofile_from if reprofile_config else "",
        holder=holder.key,
        vmi_namespace=vmi_namespace,
        vmi_name=vmi_name,
    )


def release(holder: Holder) -> int:
    """Free whatever ``holder`` holds (idempotent).

    Returns:
        Reservations deleted: 1, or 0 when it held none.
    """
    deleted, _ = Reservation.objects.filter(holder=holder.key).delete()
    return deleted


def reservation_of(holder: Holder) -> Reservation | None:
    """The reservation ``holder`` holds (its node loaded), None when it holds none."""
    return Reservation.objects.select_related("node").filter(holder=holder.key).first()


def mark_reprofile_started(reservation: Reservation, previous_config: str, when: datetime) -> None:
    """Record that the node's ``nvidia.com/vgpu.config`` label was patched at ``when``, and the value
    it had before (``""`` = none: the ClusterPolicy default applied); updates ``reservation`` too."""
    Reservation.objects.filter(pk=reservation.pk).update(
        reprofile_from=previous_config, reprofile_started=when
    )
    reservation.reprofile_from, reservation.reprofile_started = previous_config, when


def mark_reprofile_done(reservation: Reservation, resource_name: str) -> None:
    """Record that the node now advertises the type as ``resource_name`` (read from allocatable);
    from now on the reservation holds devices of that resource. Updates ``reservation`` too.

    Raises:
        ValueError: ``resource_name`` is empty.
    """
    if not resource_name:
        raise ValueError("a finished re-profile names the resource the node advertises")
    Reservation.objects.filter(pk=reservation.pk).update(resource_name=resource_name, reprofile_done=True)
    reservation.resource_name, reservation.reprofile_done = resource_name, True
