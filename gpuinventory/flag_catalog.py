"""The catalog of inventory flags: each code's severity, translated title and detail, and the
commands an admin would run (``FLAG_TYPES``, ``FLAG_VARIANTS``). A data table; the rules that
raise the flags are in the inventory modules, their rendering in ``gpuinventory/flags.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


class Severity(StrEnum):
    """How much a flag matters: ``error`` = VMs cannot use (part of) the node; ``warning`` = needs
    an admin's look; ``info`` = explained, nothing to do."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class FlagType:
    """The meaning of one flag code. ``title``/``detail`` are lazy translations with ``%(param)s``."""

    severity: Severity
    title: Promise | str
    detail: Promise | str
    commands: tuple[str, ...] = ()


_DEPLOY_PODS = "kubectl get pods -n %(namespace)s -o wide --field-selector spec.nodeName=%(node)s"
_EDIT_KUBEVIRT = "kubectl edit kubevirt -n %(kv_namespace)s %(kv_name)s"
_VGPU_DM_LOGS = "kubectl logs -n %(namespace)s -l app=nvidia-vgpu-device-manager --tail=200"
_NODE_NVIDIA = "kubectl describe node %(node)s | grep nvidia.com"

FLAG_TYPES: dict[str, FlagType] = {
    # --- workload mode (DOMAIN.md §1) -------------------------------------------------------
    "no_cluster_policy": FlagType(
        Severity.WARNING,
        _("No ClusterPolicy found"),
        _(
            "The GPU Operator's ClusterPolicy was not found, so the portal treats this node as "
            "container mode, as the operator does when sandbox workloads are not enabled. "
            "The node's workload label (%(value)s) is not acted on."
        ),
        ("kubectl get clusterpolicies.nvidia.com", "kubectl get pods -n %(namespace)s"),
    ),
    "workload_label_ignored": FlagType(
        Severity.WARNING,
        _("Workload label ignored: sandbox workloads are disabled"),
        _(
            "The node is labelled nvidia.com/gpu.workload.config=%(value)s, but ClusterPolicy "
            "%(policy)s has spec.sandboxWorkloads.enabled unset or false, so the GPU Operator "
            "runs this node in container mode."
        ),
        (
            "kubectl get clusterpolicies.nvidia.com %(policy)s -o jsonpath='{.spec.sandboxWorkloads}'",
            "kubectl patch clusterpolicies.nvidia.com %(policy)s --type=merge "
            '-p \'{"spec":{"sandboxWorkloads":{"enabled":true}}}\'',
        ),
    ),
    "invalid_mode_label": FlagType(
        Severity.ERROR,
        _("Invalid workload label value"),
        _(
            'nvidia.com/gpu.workload.config="%(value)s" is not one of container, vm-passthrough, '
            "vm-vgpu. The GPU Operator does not reject it: it logs a warning and uses the cluster "
            "default, %(default)s. Fix the label to the mode you mean."
        ),
        (
            "kubectl label node %(node)s nvidia.com/gpu.workload.config=%(default)s --overwrite",
            "kubectl logs -n %(namespace)s -l app=gpu-operator --tail=500 | grep -i 'workload config'",
        ),
    ),
    "transitioning": FlagType(
        Severity.WARNING,
        _("Mode change in progress"),
        _(
            "The GPU Operator deploy labels do not match mode %(mode)s yet: %(labels)s. The "
            "operator is still switching this node's operands, or the vGPU Device Manager paused "
            "them for a reconfiguration. Devices may come and go until this clears; if it does "
            "not clear, check the operand pods on the node."
        ),
        ("kubectl get node %(node)s --show-labels | tr ',' '\\n' | grep gpu.deploy", _DEPLOY_PODS),
    ),
    "operands_disabled": FlagType(
        Severity.WARNING,
        _("GPU Operator operands disabled on this node"),
        _(
            "nvidia.com/gpu.deploy.operands=false: the GPU Operator removes every deploy label "
            "and runs no operands here, so this node advertises no GPU devices."
        ),
        ("kubectl label node %(node)s nvidia.com/gpu.deploy.operands-",),
    ),
    "kata_mode": FlagType(
        Severity.WARNING,
        _("Sandbox workloads run in Kata mode"),
        _(
            "The ClusterPolicy sets spec.sandboxWorkloads.mode=kata. In Kata mode vm-passthrough "
            "nodes serve Kata Containers (nvidia.com/pgpu) and the KubeVirt sandbox device plugin "
            "is not deployed, so KubeVirt VMs cannot get GPUs on this %(mode)s node."
        ),
        ("kubectl get clusterpolicies.nvidia.com -o jsonpath='{.items[0].spec.sandboxWorkloads}'",),
    ),
    "kata_resource": FlagType(
        Severity.INFO,
        _("Kata resource advertised"),
        _(
            "%(resource)s (%(count)s) comes from the Kata sandbox device plugin. The portal does "
            "not count it as a KubeVirt GPU."
        ),
        (_DEPLOY_PODS,),
    ),
    # --- resources (DOMAIN.md §2) -----------------------------------------------------------
    "stale_resource": FlagType(
        Severity.INFO,
        _("Stale resource entry"),
        _(
            "%(resource)s is advertised with 0 devices. Such entries linger after a mode switch "
            "or a device plugin upgrade until the kubelet restarts. The portal shows them but "
            "never counts them."
        ),
        ("kubectl get node %(node)s -o jsonpath='{.status.allocatable}'",),
    ),
    "devices_unhealthy": FlagType(
        Severity.WARNING,
        _("Unhealthy devices"),
        _(
            "%(resource)s has capacity %(capacity)s but only %(allocatable)s allocatable: the "
            "device plugin reports the others as unhealthy."
        ),
        (_DEPLOY_PODS, "kubectl logs -n %(namespace)s <device-plugin-pod-on-this-node>"),
    ),
    "resource_other_mode": FlagType(
        Severity.WARNING,
        _("Resource of another mode"),
        _(
            "%(resource)s (%(count)s) is a %(kind)s resource, but this node is in %(mode)s mode. "
            "The node probably changed mode recently and the old device plugin still runs, or "
            "the workload label is not what was intended."
        ),
        ("kubectl get node %(node)s --show-labels | tr ',' '\\n' | grep gpu.deploy", _DEPLOY_PODS),
    ),
    "passthrough_no_devices": FlagType(
        Severity.ERROR,
        _("No passthrough GPUs advertised"),
        _(
            "The node is in vm-passthrough mode but advertises no passthrough GPU. Usually the "
            "GPUs are not bound to vfio-pci (IOMMU disabled in the BIOS or the kernel command "
            "line: intel_iommu=on or amd_iommu=on, iommu=pt), the VFIO manager failed, or the "
            "sandbox device plugin is not running. On the node: the IOMMU groups must not be "
            "empty and lspci must show 'Kernel driver in use: vfio-pci'."
        ),
        (
            "ls /sys/kernel/iommu_groups/*/devices",
            "lspci -nnk -d 10de:",
            "kubectl logs -n %(namespace)s -l app=nvidia-vfio-manager --tail=200",
            "kubectl logs -n %(namespace)s -l app=nvidia-sandbox-device-plugin-daemonset --tail=200",
            _NODE_NVIDIA,
        ),
    ),
    "vgpu_no_devices": FlagType(
        Severity.ERROR,
        _("No vGPU devices advertised"),
        _(
            "The node is in vm-vgpu mode but advertises no vGPU type (vGPU config state: "
            "%(state)s). The vGPU Manager (host driver) or the vGPU Device Manager failed, or the "
            "selected vGPU config creates nothing on this node's GPUs."
        ),
        (
            "kubectl logs -n %(namespace)s -l app=nvidia-vgpu-manager-daemonset --tail=200",
            _VGPU_DM_LOGS,
            _NODE_NVIDIA,
        ),
    ),
    "container_no_devices": FlagType(
        Severity.WARNING,
        _("No container GPUs advertised"),
        _(
            "The node is in container mode but advertises no nvidia.com/gpu or MIG device. The "
            "driver or the NVIDIA device plugin is not running (yet)."
        ),
        (
            "kubectl logs -n %(namespace)s -l app=nvidia-device-plugin-daemonset --tail=200",
            _DEPLOY_PODS,
            _NODE_NVIDIA,
        ),
    ),
    "unparsed_quantity": FlagType(
        Severity.WARNING,
        _("Unreadable resource value"),
        _("%(resource)s has the value %(value)s, which is not a whole number; it is not counted."),
        ("kubectl get node %(node)s -o jsonpath='{.status.allocatable}'",),
    ),
    "vgpu_type_unparsed": FlagType(
        Severity.INFO,
        _("Unrecognised vGPU type"),
        _(
            "%(resource)s: the vGPU type %(vgpu_type)s does not follow the vGPU type grammar, so "
            "its frame buffer size and series are unknown."
        ),
        (),
    ),
    # --- GPU model and count (DOMAIN.md §4) -------------------------------------------------
    "stale_gfd_labels": FlagType(
        Severity.INFO,
        _("Stale GPU Feature Discovery labels ignored"),
        _(
            "GPU Feature Discovery does not run on %(mode)s nodes, so nvidia.com/gpu.product="
            "%(product)s is left over from the node's container-mode past. The portal takes the "
            "GPU model from the advertised devices instead."
        ),
        (),
    ),
    "gpu_model_unknown": FlagType(
        Severity.WARNING,
        _("GPU model unknown"),
        _(
            "The portal cannot tell this node's GPU model: container nodes need the GPU Feature "
            "Discovery label nvidia.com/gpu.product, VM nodes an advertised device whose name "
            "identifies the GPU. Do not add nvidia.com/gpu.* labels to a VM node by hand; set the "
            "portal's annotation %(annotation)s instead."
        ),
        ("kubectl annotate node %(node)s %(annotation)s='<GPU model>' --overwrite",),
    ),
    "gpu_count_unknown": FlagType(
        Severity.INFO,
        _("GPU count unknown"),
        _(
            "The portal cannot tell how many physical GPUs this node has. Set the portal's "
            "annotation %(annotation)s to the number of GPUs."
        ),
        ("kubectl annotate node %(node)s %(annotation)s=<count> --overwrite",),
    ),
    "deprecated_annotation": FlagType(
        Severity.INFO,
        _("Deprecated annotation"),
        _(
            "This node carries the annotation %(old)s, an older name the portal still reads. "
            "Rename it to %(new)s; a later release stops reading the old name."
        ),
        (
            "kubectl annotate node %(node)s %(new)s='%(value)s' --overwrite",
            "kubectl annotate node %(node)s %(old)s-",
        ),
    ),
    # --- vGPU configuration (DOMAIN.md §3) --------------------------------------------------
    "vgpu_config_pending": FlagType(
        Severity.WARNING,
        _("vGPU reconfiguration in progress"),
        _(
            "nvidia.com/vgpu.config.state=pending: the vGPU Device Manager is applying config "
            "%(config)s. The node's vGPU devices vanish until it finishes; treat the node as busy."
        ),
        (_VGPU_DM_LOGS, "kubectl get node %(node)s -L nvidia.com/vgpu.config,nvidia.com/vgpu.config.state"),
    ),
    "vgpu_config_failed": FlagType(
        Severity.ERROR,
        _("vGPU configuration failed"),
        _(
            "nvidia.com/vgpu.config.state=failed for config %(config)s. Read the vGPU Device "
            "Manager log. Removing the nvidia.com/vgpu.config label does not roll back; set it "
            "to a config that exists in the vGPU devices ConfigMap and that this GPU supports, "
            "with no vGPU VM running on the node."
        ),
        (
            _VGPU_DM_LOGS,
            "kubectl get node %(node)s -L nvidia.com/vgpu.config,nvidia.com/vgpu.config.state",
            "kubectl label node %(node)s nvidia.com/vgpu.config=<config> --overwrite",
        ),
    ),
    "vgpu_config_unknown": FlagType(
        Severity.ERROR,
        _("Unknown vGPU config"),
        _(
            "nvidia.com/vgpu.config=%(config)s is not a config of the vGPU devices ConfigMap "
            "%(config_map)s. The vGPU Device Manager marks the node failed and changes nothing."
        ),
        (
            "kubectl get configmap -n %(namespace)s %(config_map)s -o jsonpath='{.data.config\\.yaml}'",
            "kubectl label node %(node)s nvidia.com/vgpu.config=<config> --overwrite",
        ),
    ),
    "vgpu_config_file_invalid": FlagType(
        Severity.ERROR,
        _("vGPU devices ConfigMap is invalid"),
        _(
            "The vGPU Device Manager file in ConfigMap %(config_map)s (key config.yaml) does not "
            "parse: %(error)s. The portal lists no vGPU configs until it is fixed, and the vGPU "
            "Device Manager cannot apply any."
        ),
        ("kubectl edit configmap -n %(namespace)s %(config_map)s", _VGPU_DM_LOGS),
    ),
    "vgpu_config_map_missing": FlagType(
        Severity.WARNING,
        _("vGPU devices ConfigMap not found"),
        _(
            "The ClusterPolicy names ConfigMap %(config_map)s for the vGPU Device Manager, but it is not in "
            "the operator namespace %(namespace)s. The portal lists no vGPU configs and cannot plan "
            "re-profiling. Check PORTAL_GPU_OPERATOR_NAMESPACE and vgpuDeviceManager.config.name."
        ),
        (
            "kubectl get configmap -n %(namespace)s",
            "kubectl get clusterpolicies -o yaml | grep -A3 vgpuDeviceManager",
        ),
    ),
    "pod_quantity_fractional": FlagType(
        Severity.WARNING,
        _("Fractional GPU request ignored"),
        _(
            "Pod %(pod)s requests %(value)s of %(resource)s. Extended resources are whole devices, so "
            "the portal does not count this request."
        ),
        ("kubectl get pod -o yaml -n %(pod_namespace)s %(pod_name)s",),
    ),
    "kubevirt_multiple": FlagType(
        Severity.WARNING,
        _("Several KubeVirt CRs"),
        _(
            "The cluster has %(count)s KubeVirt custom resources; the portal reads permitted host devices "
            "from %(used)s only. A cluster normally has exactly one."
        ),
        ("kubectl get kubevirts -A",),
    ),
    # --- KubeVirt permittedHostDevices (DOMAIN.md §5.1) -------------------------------------
    "kubevirt_missing": FlagType(
        Severity.WARNING,
        _("No KubeVirt CR found"),
        _("This is a %(mode)s node, but no KubeVirt CR was found, so no VM can use its GPUs."),
        ("kubectl get kubevirts.kubevirt.io -A",),
    ),
    "not_permitted": FlagType(
        Severity.ERROR,
        _("Not permitted in the KubeVirt CR"),
        _(
            "%(resource)s is advertised but not listed in the KubeVirt CR's "
            "spec.configuration.permittedHostDevices.%(section)s, so VMs cannot use it "
            '(virt-controller refuses with "GPU %(resource)s is not permitted in '
            'permittedHostDevices configuration"). Add it with externalResourceProvider: true.'
        ),
        (_EDIT_KUBEVIRT,),
    ),
    "external_provider_missing": FlagType(
        Severity.ERROR,
        _("externalResourceProvider not set"),
        _(
            "The KubeVirt CR permits %(resource)s without externalResourceProvider: true, so "
            "virt-handler starts its own device plugin for the same resource name, which clashes "
            "with NVIDIA's sandbox device plugin. Set externalResourceProvider: true."
        ),
        (_EDIT_KUBEVIRT,),
    ),
    "vgpu_listed_as_pci": FlagType(
        Severity.ERROR,
        _("vGPU listed under pciHostDevices"),
        _(
            "%(resource)s is a vGPU (mediated device), but the KubeVirt CR lists it under "
            "pciHostDevices. KubeVirt then treats it as a PCI device and the VM fails to start. "
            'Move it to mediatedDevices with mdevNameSelector "%(mdev_name)s".'
        ),
        (_EDIT_KUBEVIRT,),
    ),
    "passthrough_listed_as_mdev": FlagType(
        Severity.ERROR,
        _("Passthrough GPU listed under mediatedDevices"),
        _(
            "%(resource)s is a passthrough GPU, but the KubeVirt CR lists it under "
            "mediatedDevices. Move it to pciHostDevices with its pciVendorSelector (10DE:<device ID>)."
        ),
        (_EDIT_KUBEVIRT,),
    ),
    "mdev_selector_mismatch": FlagType(
        Severity.WARNING,
        _("mdevNameSelector does not match the resource"),
        _(
            'mdevNameSelector "%(selector)s" for %(resource)s should be the exact mdev type name '
            '"%(expected)s" (spaces, not underscores).'
        ),
        (_EDIT_KUBEVIRT,),
    ),
    "pci_selector_mismatch": FlagType(
        Severity.WARNING,
        _("pciVendorSelector does not match the resource"),
        _(
            'pciVendorSelector "%(selector)s" for %(resource)s does not name the PCI device that '
            "resource belongs to (%(expected)s)."
        ),
        (_EDIT_KUBEVIRT, "lspci -nn -d 10de:"),
    ),
}

#: Wording of a flag whose params carry ``cause`` (same code, same filters; another text).
#: ``transitioning`` with ``cause=vgpu_paused``: every disagreeing deploy label is
#: ``paused-for-vgpu-change``, i.e. the mode is not changing (gpuinventory/modes.py).
FLAG_VARIANTS: dict[tuple[str, str], FlagType] = {
    ("transitioning", "vgpu_paused"): FlagType(
        Severity.WARNING,
        _("Operands paused for a vGPU reconfiguration"),
        _(
            "The vGPU Device Manager paused this node's operands while it applies a vGPU "
            "configuration: %(labels)s. The workload mode (%(mode)s) is not changing. The node's "
            "vGPU devices vanish until the operands are resumed; if the labels stay paused, read "
            "the vGPU Device Manager log."
        ),
        (
            "kubectl get node %(node)s --show-labels | tr ',' '\\n' | grep gpu.deploy",
            _VGPU_DM_LOGS,
        ),
    ),
}

UNKNOWN_FLAG_TYPE = FlagType(
    Severity.WARNING, _("Unknown diagnostic"), _("Unknown diagnostic code %(code)s."), ()
)
