"""Generate a large cluster spec for benchmarks: N nodes of mixed modes and models, M pods, K VMIs.

Usage::

    python -m devcluster.scalegen --nodes 2000 --pods 10000 --vmis 500 -o /tmp/scale.yaml
    python -m devcluster up --spec /tmp/scale.yaml

Mix (deterministic for a given ``--seed``): 50 % container nodes (8x B200, H100 or A100), 25 %
vm-passthrough (4x A100/L40S/H100), 25 % vm-vgpu (T4/A10/L4 on the default config). Pods request
1-2 ``nvidia.com/gpu`` on container nodes until 3/4 of those GPUs are used, the rest are CPU-only
pods; VMIs request one passthrough GPU or vGPU and are left to the simulated scheduler.

VMIs go round-robin over the VM nodes' resources, skipping a resource once the VMIs given it would use
all of its free devices (see :func:`vmi_capacity`: devices on nodes still having room for a launcher
pod's ``pods``/cpu/memory). Only when every resource is full do VMIs exceed the capacity; those are
expected to stay ``Scheduling``. The expected count is printed (stderr and the YAML header):
``expected: P of K VMIs placeable``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from devcluster.naming import gpu_model, mdev_type_name, passthrough_resource_name, vgpu_resource_name

CONTAINER = (("B200", 8), ("H100-PCIE", 8), ("A100-PCIE-40GB", 8))
PASSTHROUGH = (("A100-PCIE-40GB", 4), ("L40S", 4), ("H100-PCIE", 4))
VGPU = (("T4", 4, "T4-8Q"), ("A10", 4, "A10-12Q"), ("L4", 4, "L4-12Q"))  # default config's type per board
VGPU_PER_GPU = {"T4-8Q": 2, "A10-12Q": 2, "L4-12Q": 2}
"""mdevs per GPU of each type in the operator's ``default`` config (``shared/samples/
gpu-operator-default-vgpu-devices-config.yaml``: 16 GB / 8 GB and 24 GB / 12 GB)."""

NODE_RESOURCES = {"cpu": 64.0, "memory_gi": 512.0, "pods": 110}
"""Node allocatable the spec loader gives a node without ``resources`` (``spec._node_spec``)."""
POD_CPU, POD_MEMORY_GI = {0: 0.5, 1: 4.0}, {0: 1.0, 1: 16.0}
"""Requests of ``spec.container_pod`` (CPU-only vs. GPU pods, any GPU count)."""
VMI_CPU, VMI_MEMORY_GI = 4 / 10, 8.0
"""Launcher pod requests of a spec VMI with the defaults (4 cores / cpuAllocationRatio 10, 8Gi)."""


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
    vm_nodes: list[tuple[dict[str, Any], str, int]] = []  # node, resource, devices
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
            vm_nodes.append((node, passthrough_resource_name(gpu_model(model)), count))
        else:
            model, count, vtype = VGPU[i % len(VGPU)]
            node.update(gpu={"model": model, "count": count}, workloadLabel="vm-vgpu")
            resource = vgpu_resource_name(mdev_type_name(gpu_model(model), vtype))
            vm_nodes.append((node, resource, count * VGPU_PER_GPU[vtype]))
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
    capacity = vmi_capacity(vm_nodes)
    given: Counter[str] = Counter()
    out_vmis: list[dict[str, Any]] = []
    room = sum(capacity.values())
    for v in range(vmis if vm_nodes else 0):
        order = (vm_nodes[(v + k) % len(vm_nodes)][1] for k in range(len(vm_nodes)))
        first = vm_nodes[v % len(vm_nodes)][1]
        resource = next((r for r in order if given[r] < capacity[r]), first) if v < room else first
        given[resource] += 1
        out_vmis.append({"name": f"vm-{v:05d}", "namespace": namespaces[v % teams], "deviceName": resource})
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


def _vmi_slots(node: dict[str, Any], devices: int) -> int:
    """Launcher pods (default VMI requests) that fit on ``node`` next to its spec pods, up to ``devices``."""
    pods = node.get("pods") or []
    cpu = NODE_RESOURCES["cpu"] - sum(POD_CPU[min(1, p["gpus"])] for p in pods)
    mem = NODE_RESOURCES["memory_gi"] - sum(POD_MEMORY_GI[min(1, p["gpus"])] for p in pods)
    room = min(int(NODE_RESOURCES["pods"]) - len(pods), int(cpu // VMI_CPU), int(mem // VMI_MEMORY_GI))
    return max(0, min(devices, room))


def vmi_capacity(vm_nodes: list[tuple[dict[str, Any], str, int]]) -> Counter[str]:
    """Single-device VMIs that fit per resource: free devices on nodes with room for a launcher pod.

    Args:
        vm_nodes: (spec node with its ``pods``, resource it advertises, devices of that resource).
    """
    out: Counter[str] = Counter()
    for node, resource, devices in vm_nodes:
        out[resource] += _vmi_slots(node, devices)
    return out


def expected_placement(spec: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per resource, (VMIs requesting it, how many of them can be placed) for a spec from :func:`generate`."""
    vm_nodes: list[tuple[dict[str, Any], str, int]] = []
    for node in spec.get("nodes") or []:
        model_key, count = node["gpu"]["model"], node["gpu"]["count"]
        if node.get("workloadLabel") == "vm-passthrough":
            vm_nodes.append((node, passthrough_resource_name(gpu_model(model_key)), count))
        elif node.get("workloadLabel") == "vm-vgpu":
            vtype = next(t for m, _, t in VGPU if m == model_key)
            resource = vgpu_resource_name(mdev_type_name(gpu_model(model_key), vtype))
            vm_nodes.append((node, resource, count * VGPU_PER_GPU[vtype]))
    capacity = vmi_capacity(vm_nodes)
    wanted = Counter(str(v["deviceName"]) for v in spec.get("vmis") or [])
    return {r: (n, min(n, capacity[r])) for r, n in sorted(wanted.items())}


def summary(spec: dict[str, Any]) -> str:
    """One line: ``expected: P of K VMIs placeable`` plus the over-subscribed resources, if any."""
    per = expected_placement(spec)
    placeable = sum(p for _, p in per.values())
    total = sum(n for n, _ in per.values())
    over = [f"{r} {n} VMIs > {p} free" for r, (n, p) in per.items() if n > p]
    tail = f"; over capacity: {', '.join(over)}" if over else ""
    return f"expected: {placeable} of {total} VMIs placeable{tail}"


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
    line = summary(spec)
    print(f"scalegen: {line}", file=sys.stderr)
    text = "# generated by python -m devcluster.scalegen " + " ".join(argv or sys.argv[1:]) + "\n"
    text += f"# {line}\n" + yaml.safe_dump(spec, sort_keys=False)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
