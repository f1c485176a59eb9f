"""KubeVirt ``permittedHostDevices``: may a VM use a resource, and is the CR entry right?

Rules (DOMAIN.md §5.1, pitfall 9; [KV] ``renderresources.go validatePermittedHostDevices``,
``pkg/virt-handler/vm.go isMdevGPU``, ``device_controller.go``):

* every GPU a VMI uses must be listed (``pciHostDevices`` or ``mediatedDevices``), else
  virt-controller refuses the launcher pod; the check is skipped when ``permittedHostDevices``
  is absent altogether (``KubeVirtInfo.permitted_configured`` False);
* ``externalResourceProvider: true`` is required with NVIDIA's device plugin, otherwise
  virt-handler starts its own plugin under the same name;
* vGPUs belong under ``mediatedDevices`` with the exact ``mdev_type/name`` as
  ``mdevNameSelector`` (spaces, not underscores); KubeVirt decides "mdev" by that list.

Container resources are not KubeVirt's business: their ``permitted`` is None.
"""

from __future__ import annotations

from gpuinventory.choices import ResourceKind
from gpuinventory.flags import Flag, flag
from gpuinventory.naming import (
    PCI_MODELS,
    ResourceInfo,
    classify_resource,
    kubevirt_pci_selector,
    mdev_type_name,
    passthrough_device_name,
)
from portal.k8s import KubeVirtInfo

VM_KINDS = frozenset({ResourceKind.PASSTHROUGH, ResourceKind.VGPU})


def permitted_state(resource: ResourceInfo, kubevirt: KubeVirtInfo | None) -> bool | None:
    """Whether KubeVirt lets a VMI use ``resource`` (DOMAIN.md §5.1).

    Returns:
        None for container kinds, when there is no KubeVirt CR, or when the CR has no
        ``permittedHostDevices`` (KubeVirt then skips the check); otherwise True when the
        resource name is listed under ``pciHostDevices`` or ``mediatedDevices`` (a wrong list is
        flagged by ``resource_flags``, not treated as "not permitted", since KubeVirt's own
        check passes), False when it is not listed.
    """
    if resource.kind not in VM_KINDS or kubevirt is None or not kubevirt.permitted_configured:
        return None
    names = {e.resource_name for e in kubevirt.pci_host_devices} | {
        e.resource_name for e in kubevirt.mediated_devices
    }
    return resource.name in names


def _expected_pci_ids(resource: ResourceInfo) -> set[str]:
    """PCI device IDs a passthrough resource name stands for, from the table (may be empty)."""
    bare = resource.name.removeprefix("nvidia.com/")
    return {
        m.device_id
        for m in PCI_MODELS.values()
        if passthrough_device_name(m.pci_text, m.device_id) == bare or m.device_id == bare
    }


def resource_flags(resource: ResourceInfo, kubevirt: KubeVirtInfo | None) -> list[Flag]:
    """Flags about one advertised (non-stale) VM resource and its CR entries (DOMAIN.md §5.1).

    Args:
        resource: a classified resource a node advertises with at least one device.
        kubevirt: the KubeVirt CR, or None (the caller flags a missing CR once per node).

    Returns:
        ``not_permitted``; ``external_provider_missing``; ``vgpu_listed_as_pci``;
        ``passthrough_listed_as_mdev``; ``mdev_selector_mismatch``; ``pci_selector_mismatch``.
    """
    if resource.kind not in VM_KINDS or kubevirt is None:
        return []
    flags: list[Flag] = []
    section = "mediatedDevices" if resource.kind == ResourceKind.VGPU else "pciHostDevices"
    if permitted_state(resource, kubevirt) is False:
        flags.append(flag("not_permitted", resource=resource.name, section=section))
    pci = [e for e in kubevirt.pci_host_devices if e.resource_name == resource.name]
    mdev = [e for e in kubevirt.mediated_devices if e.resource_name == resource.name]
    if any(not e.external_resource_provider for e in pci) or any(
        not e.external_resource_provider for e in mdev
    ):
        flags.append(flag("external_provider_missing", resource=resource.name))
    if resource.kind == ResourceKind.VGPU:
        expected = mdev_type_name(resource.name)
        if pci and not mdev:
            flags.append(flag("vgpu_listed_as_pci", resource=resource.name, mdev_name=expected))
        for e in mdev:
            if e.selector != expected:
                flags.append(
                    flag(
                        "mdev_selector_mismatch",
                        resource=resource.name,
                        selector=e.selector,
                        expected=expected,
                    )
                )
    else:
        if mdev and not pci:
            flags.append(flag("passthrough_listed_as_mdev", resource=resource.name))
        ids = _expected_pci_ids(resource)
        if ids:
            selectors = {kubevirt_pci_selector(i) for i in ids}
            for p in pci:
                if p.selector.strip().upper() not in selectors:
                    flags.append(
                        flag(
                            "pci_selector_mismatch",
                            resource=resource.name,
                            selector=p.selector,
                            expected=" / ".join(sorted(selectors)),
                        )
                    )
    return flags


def kubevirt_flags(kubevirt: KubeVirtInfo) -> list[Flag]:
    """Cluster-level flags for the CR's own entries (for ``SyncRun.warnings``), whether or not a
    node advertises them: ``external_provider_missing``, ``vgpu_listed_as_pci``,
    ``passthrough_listed_as_mdev``, ``mdev_selector_mismatch``, ``pci_selector_mismatch``.

    Entries whose resource name is not a GPU name (``classify_resource`` None) are skipped.
    """
    flags: list[Flag] = []
    seen: set[str] = set()
    names = [e.resource_name for e in kubevirt.pci_host_devices]
    names += [e.resource_name for e in kubevirt.mediated_devices]
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        info = classify_resource(name)
        if info is None:
            continue
        flags.extend(f for f in resource_flags(info, kubevirt) if f["code"] != "not_permitted")
    return flags
