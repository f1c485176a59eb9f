"""Generate a large cluster spec for benchmarks: N nodes of mixed modes and models, M pods, K VMIs.

Usage::

    python -m devcluster.scalegen --nodes 2000 --pods 10000 --vmis 500 -o /tmp/scale.yaml
    python -m devcluster up --spec /tmp/scale.yaml

Mix (deterministic for a given ``--seed``): 50 % container nodes (8x B200, H100 or A100), 25 %
vm-passthrough (4x A100/L40S/H100), 25 % vm-vgpu (T4/A10/L4 on the default config). Pods request
1-2 ``nvidia.com/gpu`` on container nodes until 3/4 of those GPUs are used, the rest are CPU-only
pods; VMIs request one passthrough GPU or vGPU and are left to the simulated scheduler.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import yaml

from devcluster.naming import gpu_model, mdev_type_name, passthrough_resource_name, vgpu_resource_name

CONTAINER = (("B200", 8), ("H100-PCIE", 8), ("A100-PCIE-40GB", 8))
PASSTHROUGH = (("A100-PCIE-40GB", 4), ("L40S", 4), ("H100-PCIE", 4))
VGPU = (("T4", 4, "T4-8Q"), ("A10", 4, "A10-12Q"), ("L4", 4, "L4-12Q"))  # default config's type per board


def generate(nodes: int, pods: int, vmis: int, seed: int = 1, teams: int = 8) -> dict[str, Any]:
    """Build the spec dict.

    Args:
        nodes: Node count. pods: Container pods (capped by the container GPUs). vmis: VMIs.
        seed: RNG seed. teams: Number of ``team-NN`` namespaces.

    Raises:
        ValueError: negative counts, or pods without any node.
    """
    if min(nodes, pods, vmis) < 0:
        raise ValueError("counts must be >= 0")
    if pods and not nodes:
        raise ValueError("pods need at least one node")
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not crypto
    namespaces = [f"team-{i:02d}" for i in range(teams)]
    out_nodes: list[dict[str, Any]] = []
    free: list[tuple[dict[str, Any], int]] = []
    vm_resources: list[str] = []
    for i in range(nodes):
        kind = ("container", "container", "vm-passthrough", "vm-vgpu")[i % 4]
        node: dict[str, Any] = {"name": f"scale-{kind.split('-')[-1]}-{i:05d}"}
        if kind == "container":
            model, count = CONTAINER[i % len(CONTAINER)]
            node.update(
                gpu={"model": model, "count": count}, workloadLabel=None if i % 8 == 0 else "container"
            )
            free.append((node, count))
        elif kind == "vm-passthrough":
            model, count = PASSTHROUGH[i % len(PASSTHROUGH)]
            node.update(gpu={"model": model, "count": count}, workloadLabel="vm-passthrough")
            vm_resources.append(passthrough_resource_name(gpu_model(model)))
        else:
            model, count, vtype = VGPU[i % len(VGPU)]
            node.update(gpu={"model": model, "count": count}, workloadLabel="vm-vgpu")
            vm_resources.append(vgpu_resource_name(mdev_type_name(gpu_model(model), vtype)))
        out_nodes.append(node)
    # Up to 3/4 of the container GPUs are taken by GPU pods (1 or 2 GPUs each); the remaining pods are
    # CPU-only (``gpus: 0``) workloads spread over all nodes, as in any real cluster.
    budget = sum(c for _, c in free) * 3 // 4
    slots: list[tuple[dict[str, Any], list[int]]] = [(node, [left]) for node, left in free]
    for p in range(pods):
        want = min(budget, rng.choice((1, 1, 1, 2))) if slots else 0
        entry = slots[p % len(slots)] if want else None
        if entry is not None and entry[1][0] < want:
            entry = next((e for e in slots if e[1][0] >= want), None)
        if entry is None:
            want = 0
            node = out_nodes[p % len(out_nodes)]
        else:
            node = entry[0]
            entry[1][0] -= want
            budget -= want
        node.setdefault("pods", []).append(
            {"namespace": namespaces[p % teams], "name": f"job-{p:06d}", "gpus": want}
        )
    out_vmis = [
        {
            "name": f"vm-{v:05d}",
            "namespace": namespaces[v % teams],
            "deviceName": vm_resources[v % len(vm_resources)],
        }
        for v in range(vmis)
        if vm_resources
    ]
    return {
        "gpuOperator": {"version": "v26.7.0", "namespace": "gpu-operator"},
        "clusterPolicy": {
            "name": "cluster-policy",
            "sandboxWorkloads": {"enabled": True, "defaultWorkload": "container"},
        },
        "namespaces": namespaces,
        "nodes": out_nodes,
        "vmis": out_vmis,
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; writes the spec YAML to ``-o`` (or stdout)."""
    parser = argparse.ArgumentParser(
        prog="python -m devcluster.scalegen", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--vmis", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args(argv)
    try:
        spec = generate(args.nodes, args.pods, args.vmis, args.seed)
    except ValueError as exc:
        print(f"scalegen: {exc}", file=sys.stderr)
        return 2
    text = "# generated by python -m devcluster.scalegen " + " ".join(argv or sys.argv[1:]) + "\n"
    text += yaml.safe_dump(spec, sort_keys=False)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
