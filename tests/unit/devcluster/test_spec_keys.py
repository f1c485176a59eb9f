"""A misspelt key in a dev-cluster spec is an error that names it, not a silently ignored setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster.spec import SpecError, load_spec

SHARED = Path(__file__).resolve().parents[3].parent / "shared"


def _load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    load_spec(path, SHARED)


def test_unknown_top_level_key(tmp_path: Path) -> None:
    with pytest.raises(
        SpecError, match=r"^spec: unknown key\(s\) nodez; allowed: clusterPolicy, gpuOperator"
    ):
        _load(tmp_path, "nodez: []\n")


def test_unknown_node_key_names_the_node(tmp_path: Path) -> None:
    text = "nodes:\n- {name: t4-a, gpu: {model: T4, count: 1}, workloadLabel: vm-vgpu, cordonned: true}\n"
    with pytest.raises(
        SpecError, match=r"^nodes\[0\] \(t4-a\): unknown key\(s\) cordonned; allowed: cordoned,"
    ):
        _load(tmp_path, text)


def test_unknown_gpu_and_pod_keys(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"nodes\[0\] \(n\)\.gpu: unknown key\(s\) modle"):
        _load(tmp_path, "nodes:\n- {name: n, gpu: {modle: T4, count: 1}, workloadLabel: null}\n")
    text = "nodes:\n- {name: n, gpu: {model: T4, count: 1}, workloadLabel: null, pods: [{name: p, namespace: x, gpu: 1}]}\n"
    with pytest.raises(SpecError, match=r"nodes\[0\] \(n\)\.pods\[0\]: unknown key\(s\) gpu;"):
        _load(tmp_path, text)


def test_invalid_yaml_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is not valid YAML"):
        _load(tmp_path, "nodes: [\n")


@pytest.mark.parametrize("name", ["demo.yaml", "test.yaml"])
def test_shipped_specs_pass_the_key_check(name: str) -> None:
    spec = load_spec(Path(__file__).resolve().parents[3] / "devcluster" / "specs" / name, SHARED)
    assert len(spec.nodes) >= 3
