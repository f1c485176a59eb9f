"""vGPU Device Manager config matching and apply semantics (no cluster)."""

import pytest
import yaml

from devcluster.naming import GPU_MODELS
from devcluster.server import default_shared_dir
from devcluster.vgpuconfig import (
    VgpuConfigError,
    apply_config,
    is_applied,
    max_instances,
    parse_config_file,
    pci_id_value,
    walk,
)


def _cm_text(name: str) -> str:
    doc = yaml.safe_load((default_shared_dir() / "samples" / name).read_text())
    return str(doc["data"]["config.yaml"])


@pytest.fixture(scope="module")
def default_configs() -> dict:
    return parse_config_file(_cm_text("gpu-operator-default-vgpu-devices-config.yaml"))


def test_default_config_file_is_parsed(default_configs: dict) -> None:
    assert len(default_configs) == 711
    limits = max_instances(default_configs)
    assert limits["T4-8Q"] == 2
    assert limits["T4-1Q"] == 16
    assert limits["A10-12Q"] == 2


def test_device_filter_values() -> None:
    assert pci_id_value("1eb8") == 0x1EB810DE
    assert GPU_MODELS["T4"].pci_device_filter == "0x1EB810DE"


def test_default_config_matches_t4_by_device_filter(default_configs: dict) -> None:
    t4 = pci_id_value("1eb8")
    visits = walk(default_configs["default"], [t4, t4])
    assert [(e.vgpu_devices, i) for e, i in visits] == [({"T4-8Q": 2}, 0), ({"T4-8Q": 2}, 1)]
    a100 = pci_id_value("20f1")
    assert [(e.vgpu_devices, i) for e, i in walk(default_configs["default"], [a100])] == [
        ({"A100-20C": 2}, 0)
    ]


def test_apply_default_then_custom_reproduces_the_t4_custom_sample(default_configs: dict) -> None:
    """8x T4: default, then T4-custom -> 16C:1, 8C:2, 8Q:12 (real README figures)."""
    custom = parse_config_file(_cm_text("vgpu-custom-configmap-t4-openshift.yaml"))
    limits = max_instances(default_configs)
    models = [GPU_MODELS["T4"]] * 8
    first = apply_config(default_configs["default"], models, [{} for _ in range(8)], limits)
    assert first.error is None and first.cleared == list(range(8))
    second = apply_config(custom["T4-custom"], models, first.mdevs, limits)
    assert second.error is None
    assert second.cleared == [0, 1]  # GPUs 2 and 3 already had 2x T4-8Q: skipped, not recreated
    totals: dict[str, int] = {}
    for m in second.mdevs:
        for t, n in m.items():
            totals[t] = totals.get(t, 0) + n
    assert totals == {"T4-16C": 1, "T4-8C": 2, "T4-8Q": 12}
    # A config that leaves GPUs untouched never asserts as applied (assert visits every GPU).
    assert not is_applied(custom["T4-custom"], [pci_id_value("1eb8")] * 8, second.mdevs)
    assert is_applied(default_configs["default"], [pci_id_value("1eb8")] * 8, first.mdevs)


def test_unsupported_type_fails_before_touching_the_gpu(default_configs: dict) -> None:
    limits = max_instances(default_configs)
    mdevs = [{"T4-8Q": 2}, {"T4-8Q": 2}]
    result = apply_config(default_configs["A10-12Q"], [GPU_MODELS["T4"]] * 2, mdevs, limits)
    assert result.error == "error setting VGPU config: vGPU type A10-12Q is not supported on GPU (index=0)"
    assert result.mdevs == mdevs and result.cleared == []


def test_count_over_limit_clears_and_fails(default_configs: dict) -> None:
    limits = max_instances(default_configs)
    entries = parse_config_file(
        "version: v1\nvgpu-configs:\n  big:\n  - devices: [1]\n    vgpu-devices: {T4-8Q: 3}\n"
    )
    result = apply_config(entries["big"], [GPU_MODELS["T4"]] * 2, [{"T4-4Q": 4}, {"T4-4Q": 4}], limits)
    assert result.cleared == [1]
    assert result.mdevs == [{"T4-4Q": 4}, {"T4-8Q": 2}]
    assert (
        result.error is not None
        and "does not exceed the maximum supported instances for 'T4-8Q'" in result.error
    )


@pytest.mark.parametrize(
    "text",
    [
        "version: v2\nvgpu-configs: {a: [{devices: all, vgpu-devices: {T4-8Q: 1}}]}",
        "version: v1\nvgpu-configs: {}",
        "version: v1\nvgpu-configs: {a: [{devices: some, vgpu-devices: {T4-8Q: 1}}]}",
        "version: v1\nvgpu-configs: {a: [{devices: all, vgpu-devices: {T4-8Q: 1}, extra: 1}]}",
    ],
)
def test_invalid_files_are_rejected(text: str) -> None:
    with pytest.raises(VgpuConfigError):
        parse_config_file(text)
