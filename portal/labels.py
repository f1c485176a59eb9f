"""Every label and annotation key the portal reads or writes, in one place (docs/labels.md).

Three owners write the keys the portal reads:

- the NVIDIA GPU Operator (``nvidia.com/gpu.present``, ``nvidia.com/gpu.deploy.*``), its GPU
  Feature Discovery (``nvidia.com/gpu.product`` ...) and vGPU Device Manager
  (``nvidia.com/vgpu.config.state``); admins set ``nvidia.com/gpu.workload.config`` and the
  portal sets ``nvidia.com/vgpu.config`` during a re-profile (DOMAIN.md §1, §3, §4);
- KubeVirt (``kubevirt.io/nodeName`` on a VMI, ``kubevirt.io=virt-launcher`` and
  ``vm.kubevirt.io/name`` on its launcher pod, DOMAIN.md §5.4);
- the portal itself, under the one DNS-style prefix :data:`PREFIX` (``gpu-vm-portal.io/``), as
  Kubernetes recommends for prefixed keys ("Labels and Selectors", "Syntax and character set").

Before this module the node annotations for a GPU model or count an admin sets by hand used the
prefix ``gpu-vm-portal/``. Nodes may still carry them, so :func:`read_annotation` reads the new
key first and then the deprecated one (:data:`DEPRECATED_KEYS`); the inventory (``gpuinventory/identity.py``) flags a node
that still uses an old key. Every VMI key already had the ``gpu-vm-portal.io/`` prefix, and the
watch and reconcile select on ``app.kubernetes.io/managed-by=gpu-vm-portal``: VMIs created
before keep being found.

The simulator in ``devcluster/`` never imports the portal; ``devcluster/labels.py`` keeps its own
copy of the keys both sides use, and ``tests/unit/test_labels.py`` asserts the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping

# --- the portal's own keys ---------------------------------------------------------------------

#: The prefix of every key the portal owns.
PREFIX = "gpu-vm-portal.io/"
#: The prefix the first node annotations used; still read, see :data:`DEPRECATED_KEYS`.
DEPRECATED_PREFIX = "gpu-vm-portal/"

#: VMI label: the ``VMRequest`` primary key, e.g. ``"42"`` (reconcile and watch map VMIs back by it).
REQUEST_ID = PREFIX + "request-id"
#: VMI label: the team's slug.
TEAM = PREFIX + "team"
#: VMI annotation: the requester's username.
REQUESTER = PREFIX + "requester"
#: VMI annotation: the external ticket reference (``<system>:<id>``) when the request has one.
TICKET = PREFIX + "ticket"
#: Annotation on the RBAC objects ``manage.py team_rbac`` prints: the team slugs they are for.
TEAMS = PREFIX + "teams"
#: Node annotations an admin sets when the rules cannot identify the GPU (docs/inventory.md).
#: Annotations, not ``nvidia.com/gpu.*`` labels: those belong to GFD, which does not run on VM
#: nodes (DOMAIN.md §4), and hand-written GFD labels would look like stale ones.
GPU_MODEL = PREFIX + "gpu-model"
GPU_COUNT = PREFIX + "gpu-count"

#: New key → the keys it replaced, read when the new one is absent (oldest last).
DEPRECATED_KEYS: dict[str, tuple[str, ...]] = {
    GPU_MODEL: (DEPRECATED_PREFIX + "gpu-model",),
    GPU_COUNT: (DEPRECATED_PREFIX + "gpu-count",),
}

# --- Kubernetes' recommended and well-known keys ---------------------------------------------

#: Label on every VMI the portal creates, with value :data:`MANAGED_BY_VALUE`.
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpu-vm-portal"
#: Selector of the portal's VMIs (watch, reconcile).
MANAGED_SELECTOR = f"{MANAGED_BY}={MANAGED_BY_VALUE}"
#: The kubelet's node label; a VMI's ``nodeSelector`` pins it with this key.
HOSTNAME = "kubernetes.io/hostname"
#: Node Feature Discovery's IOMMU label (shown on the node page).
NFD_IOMMU_ENABLED = "feature.node.kubernetes.io/iommu-enabled"

# --- the NVIDIA GPU Operator (DOMAIN.md §1, §3, §4) ------------------------------------------

#: ``"true"`` on the nodes the operator manages ([GO] ``reconcileCommonGPULabel()``).
GPU_PRESENT = "nvidia.com/gpu.present"
#: The node's workload mode: ``container``, ``vm-passthrough`` or ``vm-vgpu``.
GPU_WORKLOAD_CONFIG = "nvidia.com/gpu.workload.config"
#: Prefix of the operand deploy labels (``nvidia.com/gpu.deploy.sandbox-device-plugin=true``).
GPU_DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
#: The vGPU config a vm-vgpu node should have (a key of the vGPU devices ConfigMap).
VGPU_CONFIG = "nvidia.com/vgpu.config"
#: The vGPU Device Manager's progress: ``pending``, ``success`` or ``failed``.
VGPU_CONFIG_STATE = "nvidia.com/vgpu.config.state"
#: GPU Feature Discovery labels (container nodes only).
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_MEMORY = "nvidia.com/gpu.memory"

# --- KubeVirt (DOMAIN.md §5.4) ---------------------------------------------------------------

#: VMI label with the node the VMI runs on (when ``status.nodeName`` is not set yet).
KUBEVIRT_NODE_NAME = "kubevirt.io/nodeName"
#: Launcher pod label; its value is :data:`VIRT_LAUNCHER`.
KUBEVIRT_APP = "kubevirt.io"
VIRT_LAUNCHER = "virt-launcher"
#: Launcher pod label: the VMI's hostname.
KUBEVIRT_VM_NAME = "vm.kubevirt.io/name"


def read_annotation(annotations: Mapping[str, str], key: str) -> tuple[str, str]:
    """The value of ``key``, or of a deprecated key it replaced, with the key it came from.

    Args:
        annotations: an object's annotations (or labels).
        key: a current key, e.g. :data:`GPU_MODEL`.

    Returns:
        ``(value, key_found)``, the value stripped of surrounding blanks, e.g.
        ``("L40", "gpu-vm-portal/gpu-model")`` for a node annotated the old way; ``("", key)``
        when neither key is set (or only to blanks).
    """
    for candidate in (key, *DEPRECATED_KEYS.get(key, ())):
        value = annotations.get(candidate, "").strip()
        if value:
            return value, candidate
    return "", key
