"""vGPU Device Manager config rules (DOMAIN.md §3) on the real ConfigMaps and example file."""

from __future__ import annotations

import pytest

from gpuinventory.naming import PCI_MODELS, parse_vgpu_type
from gpuinventory.vgpuconfig import (
    ConfigEntry,
    VgpuConfigError,
    config_types,
    configs_for_model,
    device_filter_for,
    instances_offered,
    is_label_safe,
    parse_config_file,
    parse_config_map_data,
    uniform_instances,
)
from tests.factories import config_map_data, sample_path

DEFAULT_CM = "gpu-operator-default-vgpu-devices-config.yaml"
CUSTOM_CM = "vgpu-custom-configmap-t4-openshift.yaml"
T4_EXAMPLE = "vgpu-device-manager-config-t4.yaml"


@pytest.fixture(scope="module")
def default_configs() -> dict[str, list[ConfigEntry]]:
    return parse_config_map_data(config_map_data(DEFAULT_CM))


def test_default_configmap_has_711_configs(default_configs: dict[str, list[ConfigEntry]]) -> None:
    assert len(default_configs) == 711
    assert "default" in default_configs
    assert default_configs["A10-12Q"] == [ConfigEntry(None, "all", {"A10-12Q": 2})]
    assert default_configs["A100-1-5CME"] == [ConfigEntry(None, "all", {"A100-1-5CME": 1})]
    assert default_configs["6000D-1-42CGFX"] == [ConfigEntry(None, "all", {"6000D-1-42CGFX": 2})]
    assert len(default_configs["default"]) == 56
    assert default_configs["default"][8] == ConfigEntry(("0x1EB810DE",), "all", {"T4-8Q": 2})


def test_default_config_t4(default_configs: dict[str, list[ConfigEntry]]) -> None:
    """T4 → T4-8Q: 2 per GPU under ``default`` (DOMAIN.md §3)."""
    assert uniform_instances(default_configs["default"], "1eb8") == {"T4-8Q": 2}
    assert instances_offered(default_configs["default"], ["1eb8"]) == {"T4-8Q": 2}
    assert instances_offered(default_configs["default"], ["1eb8"] * 8) == {"T4-8Q": 16}
    assert instances_offered(default_configs["default"], ["2236", "2236"]) == {"A10-12Q": 4}
    assert instances_offered(default_configs["default"], ["2571"]) == {}
    assert configs_for_model(default_configs, "1eb8", "T4") == [
        "T4-1Q",
        "T4-2Q",
        "T4-4C",
        "T4-4Q",
        "T4-8C",
        "T4-8Q",
        "T4-16C",
        "T4-16Q",
        "default",
    ]
    assert "default" not in configs_for_model(default_configs, "2571", "")


def test_default_config_agrees_with_the_pci_table(default_configs: dict[str, list[ConfigEntry]]) -> None:
    """PCI_MODELS' vGPU families and memory come from the ``default`` config: "half the GPU memory each"."""
    for model in PCI_MODELS.values():
        entries = [e for e in default_configs["default"] if e.matches_device(model.device_id)]
        families = tuple(
            sorted({p.gpu for e in entries for t in e.vgpu_devices if (p := parse_vgpu_type(t))})
        )
        assert families == tuple(sorted(model.vgpu_families)), model.device_id
        if entries:
            sizes = {
                p.framebuffer_gb * n
                for e in entries
                for t, n in e.vgpu_devices.items()
                if (p := parse_vgpu_type(t))
            }
            assert sizes == {model.vgpu_memory_gb}, model.device_id


def test_a2_and_a16_share_a_device_id(default_configs: dict[str, list[ConfigEntry]]) -> None:
    """10de:25b6 is both A2 and A16; ``default`` lists A16-8Q then A2-8Q for it: neither family
    supports both, so ``default`` is offered to neither (the manager would fail on the other type)."""
    assert "default" not in configs_for_model(default_configs, "25b6", "A2")
    assert "A2-8Q" in configs_for_model(default_configs, "25b6", "A2")
    assert instances_offered(default_configs["default"], ["25b6"]) == {"A2-8Q": 2}  # the last match wins


def test_custom_t4_configmap() -> None:
    configs = parse_config_map_data(config_map_data(CUSTOM_CM))
    assert list(configs) == ["T4-custom"]
    entries = configs["T4-custom"]
    assert entries == [
        ConfigEntry(None, (0,), {"T4-16C": 1}),
        ConfigEntry(None, (1,), {"T4-8C": 2}),
        ConfigEntry(None, (2,), {"T4-8Q": 2}),
        ConfigEntry(None, (3,), {"T4-8Q": 2}),
    ]
    assert config_types(entries) == ["T4-16C", "T4-8C", "T4-8Q"]
    assert uniform_instances(entries, "1eb8") is None
    # On the 8×T4 node this config creates 1 + 2 + 4; the node shows GRID_T4-8Q: 12 because GPUs 4-7
    # keep the 2×T4-8Q each of the earlier default config (the manager only touches matched GPUs).
    assert instances_offered(entries, ["1eb8"] * 8) == {"T4-16C": 1, "T4-8C": 2, "T4-8Q": 4}
    assert configs_for_model(configs, "1eb8", "T4") == ["T4-custom"]
    assert configs_for_model(configs, "2236", "A10") == []
    assert entries[0].as_json() == {"device_filter": None, "devices": [0], "vgpu_devices": {"T4-16C": 1}}


def test_vdm_t4_example_file() -> None:
    configs = parse_config_file(sample_path(T4_EXAMPLE).read_text(encoding="utf-8"))
    assert list(configs) == [
        "T4-1Q",
        "T4-2Q",
        "T4-4Q",
        "T4-8Q",
        "T4-16Q",
        "T4-small",
        "T4-medium",
        "T4-large",
    ]
    assert instances_offered(configs["T4-small"], ["1eb8", "1eb8"]) == {"T4-1Q": 16, "T4-2Q": 8}
    assert instances_offered(configs["T4-large"], ["1eb8", "1eb8"]) == {"T4-8Q": 2, "T4-16Q": 1}
    assert instances_offered(configs["T4-1Q"], ["1eb8", "1eb8"]) == {"T4-1Q": 32}
    assert all(is_label_safe(n) for n in configs)


def test_device_filter_list_and_format() -> None:
    text = """
version: v1
vgpu-configs:
  a10s:
    - device-filter: ["0x223610DE", "0x223510de"]
      devices: all
      vgpu-devices:
        A10-12Q: 2
"""
    entry = parse_config_file(text)["a10s"][0]
    assert entry.device_filter == ("0x223610DE", "0x223510DE")
    assert entry.matches_device("2235") and entry.matches_device("2236") and not entry.matches_device("1eb8")
    assert device_filter_for("1eb8") == "0x1EB810DE"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must be a mapping"),
        (
            "version: v2\nvgpu-configs: {a: [{devices: all, vgpu-devices: {T4-8Q: 2}}]}",
            "unknown version: 'v2'",
        ),
        ("vgpu-configs: {a: [{devices: all, vgpu-devices: {T4-8Q: 2}}]}", "missing 'version'"),
        ("version: v1", "at least one entry in 'vgpu-configs'"),
        ("version: v1\nvgpu-configs: {}", "at least one entry in 'vgpu-configs'"),
        ("version: v1\nvgpu-configs: {a: []}", "config 'a': at least one entry"),
        (
            "version: v1\nprofiles: {}\nvgpu-configs: {a: [{devices: all, vgpu-devices: {}}]}",
            "unexpected field 'profiles'",
        ),
        (
            "version: v1\nvgpu-configs: {a: [{device: A100, devices: all, vgpu-devices: {}}]}",
            "unexpected field 'device'",
        ),
        ("version: v1\nvgpu-configs: {a: [{vgpu-devices: {T4-8Q: 2}}]}", "missing required field 'devices'"),
        ("version: v1\nvgpu-configs: {a: [{devices: all}]}", "missing required field 'vgpu-devices'"),
        (
            "version: v1\nvgpu-configs: {a: [{devices: some, vgpu-devices: {}}]}",
            "invalid string input for 'devices'",
        ),
        (
            "version: v1\nvgpu-configs: {a: [{devices: [a], vgpu-devices: {}}]}",
            "devices must be 'all' or a list",
        ),
        (
            "version: v1\nvgpu-configs: {a: [{devices: all, vgpu-devices: {2x20GB: 2}}]}",
            "invalid format for vGPU type",
        ),
        (
            "version: v1\nvgpu-configs: {a: [{devices: all, vgpu-devices: {T4-8Q: 0}}]}",
            "invalid count for 'T4-8Q'",
        ),
        (
            "version: v1\nvgpu-configs: {a: [{devices: all, vgpu-devices: {A100-20C: 1, A100-1-5C: 1}}]}",
            "cannot mix time-sliced and MIG-backed",
        ),
        (
            "version: v1\nvgpu-configs: {a: [{device-filter: T4, devices: all, vgpu-devices: {T4-8Q: 2}}]}",
            "device-filter 'T4' is not a 32-bit PCI ID",
        ),
        (
            "version: v1\nvgpu-configs: {a: [{devices: all, vgpu-devices: [T4-8Q]}]}",
            "vgpu-devices must be a mapping",
        ),
        ("version: [v1", "not valid YAML"),
    ],
)
def test_invalid_files(text: str, message: str) -> None:
    with pytest.raises(VgpuConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_config_file(text)


def test_seed_article_format_is_rejected() -> None:
    """The seed article's ``profiles: ... partitions: 2x20GB`` format is not the real one."""
    with pytest.raises(VgpuConfigError, match="unexpected field 'profiles'"):
        parse_config_file("profiles:\n  default:\n    - device: A100\n      partitions: 2x20GB\n")


def test_config_map_without_key() -> None:
    with pytest.raises(VgpuConfigError, match=r"no key 'config\.yaml'"):
        parse_config_map_data({"other.yaml": "version: v1"})


def test_label_safe_names() -> None:
    assert is_label_safe("T4-custom") and is_label_safe("A100-1-5CME")
    assert not is_label_safe("") and not is_label_safe("my config") and not is_label_safe("x" * 64)
