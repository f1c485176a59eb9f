"""Flag registry (gpuinventory/flags.py): every code renders, in English and Chinese."""

from __future__ import annotations

import json
import re

import pytest
from django.utils import translation

from gpuinventory.flags import FLAG_TYPES, Severity, describe, flag, sort_flags


def test_flag_is_json_serialisable() -> None:
    f = flag("stale_resource", resource="nvidia.com/gpu")
    assert json.loads(json.dumps(f)) == {"code": "stale_resource", "params": {"resource": "nvidia.com/gpu"}}
    with pytest.raises(KeyError):
        flag("no_such_code")


@pytest.mark.parametrize("code", sorted(FLAG_TYPES))
def test_every_code_renders_without_missing_params(code: str) -> None:
    ftype = FLAG_TYPES[code]
    names = set(re.findall(r"%\((\w+)\)s", f"{ftype.title} {ftype.detail} {' '.join(ftype.commands)}"))
    params: dict[str, str | int] = {n: f"P-{n}" for n in names}
    d = describe({"code": code, "params": params}, node="gpu-node-01")
    assert "<" not in d.title and "<P-" not in d.detail
    for text in (d.title, d.detail, *d.commands):
        assert "%(" not in text
    assert isinstance(d.severity, Severity)


def test_describe_passthrough_no_devices_gives_seed_commands() -> None:
    d = describe(
        {"code": "passthrough_no_devices", "params": {}},
        node="gpu-node-01",
        operator_namespace="nvidia-gpu-operator",
    )
    assert d.severity == Severity.ERROR
    assert d.commands[:2] == ("ls /sys/kernel/iommu_groups/*/devices", "lspci -nnk -d 10de:")
    assert "kubectl logs -n nvidia-gpu-operator -l app=nvidia-vfio-manager --tail=200" in d.commands


def test_describe_vgpu_failed_and_not_permitted() -> None:
    failed = describe({"code": "vgpu_config_failed", "params": {"config": "T4-custom"}}, node="n1")
    assert failed.commands[0] == "kubectl logs -n gpu-operator -l app=nvidia-vgpu-device-manager --tail=200"
    assert "T4-custom" in failed.detail
    np = describe(
        {
            "code": "not_permitted",
            "params": {"resource": "nvidia.com/GRID_T4-8Q", "section": "mediatedDevices"},
        }
    )
    assert np.commands == ("kubectl edit kubevirt -n kubevirt kubevirt",)
    assert "permittedHostDevices.mediatedDevices" in np.detail


def test_missing_params_and_unknown_codes_do_not_raise() -> None:
    d = describe({"code": "stale_resource"})
    assert "<resource>" in d.detail and d.commands == (
        "kubectl get node <node> -o jsonpath='{.status.allocatable}'",
    )
    u = describe({"code": "gone", "params": {}})
    assert (u.severity, u.code) == (Severity.WARNING, "gone")


def test_sort_flags() -> None:
    flags = [
        flag("stale_resource", resource="x"),
        flag("transitioning", mode="m", labels="l"),
        flag("not_permitted"),
    ]
    assert [f["code"] for f in sort_flags(flags)] == ["not_permitted", "transitioning", "stale_resource"]


def test_chinese_catalog_covers_every_string() -> None:
    """Every flag title and detail has a Simplified Chinese translation with the same placeholders."""
    for flag_type in FLAG_TYPES.values():
        for text in (flag_type.title, flag_type.detail):
            with translation.override("en"):
                english = str(text)
            with translation.override("zh-hans"):
                chinese = str(text)
            assert chinese != english, english
            assert set(re.findall(r"%\(\w+\)s", english)) == set(re.findall(r"%\(\w+\)s", chinese)), english
