"""The one reservation writer (gpuinventory/reservations.py): typed holder, reserve, release, re-profile marks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction

from gpuinventory import reservations
from gpuinventory.models import Reservation
from gpuinventory.reservations import Holder
from tests.factories import stored_node

pytestmark = pytest.mark.django_db

T4_8Q = "nvidia.com/GRID_T4-8Q"


def test_holder_key_is_the_stored_format() -> None:
    h = Holder("vmrequest", 42)
    assert (h.key, str(h)) == ("vmrequest:42", "vmrequest:42")
    assert Holder.parse("vmrequest:42") == h
    for bad in ("vmrequest", "vmrequest:", "vmrequest:x", ":4"):
        with pytest.raises(ValueError):
            Holder.parse(bad)
    with pytest.raises(ValueError):
        Holder("a:b", 1)


def test_reserve_release_round_trip() -> None:
    node = stored_node("v1", "vm-vgpu")
    h = Holder("vmrequest", 7)
    res = reservations.reserve(
        h,
        node,
        resource_name=T4_8Q,
        vgpu_type="T4-8Q",
        count=2,
        vmi_namespace="team-a",
        vmi_name="alice-vm-7",
    )
    assert Reservation.objects.values_list("holder", "node__name", "resource_name", "count").get() == (
        "vmrequest:7",
        "v1",
        T4_8Q,
        2,
    )
    assert reservations.reservation_of(h) == res
    with pytest.raises(IntegrityError), transaction.atomic():
        reservations.reserve(
            h, node, resource_name=T4_8Q, vgpu_type="", count=1, vmi_namespace="a", vmi_name="b"
        )
    assert reservations.release(h) == 1
    assert reservations.release(h) == 0
    assert reservations.reservation_of(h) is None


def test_reserve_refuses_incomplete_promises() -> None:
    node = stored_node("v1", "vm-vgpu")
    h = Holder("vmrequest", 1)
    with pytest.raises(ValueError, match="at least one device"):
        reservations.reserve(
            h, node, resource_name=T4_8Q, vgpu_type="", count=0, vmi_namespace="a", vmi_name="b"
        )
    with pytest.raises(ValueError, match="names its resource"):
        reservations.reserve(
            h, node, resource_name="", vgpu_type="T4-8Q", count=1, vmi_namespace="a", vmi_name="b"
        )
    assert Reservation.objects.count() == 0


def test_reprofile_marks() -> None:
    node = stored_node("v1", "vm-vgpu", vgpu_config="T4-16Q")
    h = Holder("vmrequest", 3)
    res = reservations.reserve(
        h,
        node,
        resource_name="",
        vgpu_type="T4-8Q",
        count=1,
        vmi_namespace="a",
        vmi_name="b",
        reprofile_config="T4-8Q",
        reprofile_from="T4-16Q",
    )
    when = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
    reservations.mark_reprofile_started(res, "T4-16Q", when)
    assert (res.reprofile_from, res.reprofile_started) == ("T4-16Q", when)
    reservations.mark_reprofile_done(res, T4_8Q)
    stored = Reservation.objects.get()
    assert (stored.reprofile_from, stored.reprofile_started, stored.resource_name, stored.reprofile_done) == (
        "T4-16Q",
        when,
        T4_8Q,
        True,
    )
    with pytest.raises(ValueError):
        reservations.mark_reprofile_done(res, "")
