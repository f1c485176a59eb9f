"""The label and annotation keys the simulator writes and the portal reads.

``devcluster`` never imports the portal, so this is the simulator's own copy of the shared keys
of ``portal/labels.py`` (docs/labels.md lists both); ``tests/unit/test_labels.py`` asserts that
every key here equals its portal counterpart. Simulator-only keys (``devcluster.gpu-vm-portal.io/*``)
live in :mod:`devcluster.nodestate`; the portal never reads them.
"""

from __future__ import annotations

# The NVIDIA GPU Operator (DOMAIN.md §1, §3) and GPU Feature Discovery (§4).
GPU_PRESENT = "nvidia.com/gpu.present"
GPU_WORKLOAD_CONFIG = "nvidia.com/gpu.workload.config"
GPU_DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
VGPU_CONFIG = "nvidia.com/vgpu.config"
VGPU_CONFIG_STATE = "nvidia.com/vgpu.config.state"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_MEMORY = "nvidia.com/gpu.memory"

# KubeVirt (DOMAIN.md §5.4): the VMI's node label and the virt-launcher pod's labels.
KUBEVIRT_NODE_NAME = "kubevirt.io/nodeName"
KUBEVIRT_APP = "kubevirt.io"
VIRT_LAUNCHER = "virt-launcher"
KUBEVIRT_VM_NAME = "vm.kubevirt.io/name"

# Kubernetes' well-known node label.
HOSTNAME = "kubernetes.io/hostname"

#: The names above that ``portal/labels.py`` defines with the same value.
SHARED = (
    "GPU_PRESENT",
    "GPU_WORKLOAD_CONFIG",
    "GPU_DEPLOY_PREFIX",
    "VGPU_CONFIG",
    "VGPU_CONFIG_STATE",
    "GFD_PRODUCT",
    "GFD_COUNT",
    "GFD_MEMORY",
    "KUBEVIRT_NODE_NAME",
    "KUBEVIRT_APP",
    "VIRT_LAUNCHER",
    "KUBEVIRT_VM_NAME",
    "HOSTNAME",
)
