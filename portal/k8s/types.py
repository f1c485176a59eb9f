# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""The plain dataclasses the adapter returns: never client model objects (CONVENTIONS.md).

Quantities stay the raw strings of the API server unless a field says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerVersion:
    """What ``GET /version`` reports, e.g. ``git_version="v1.37.2"``."""

    git_version: str
    platform: str


@dataclass(frozen=True)
class NodeInfo:
    """A Node as the inventory needs it. Quantities are the raw strings of ``status``."""

    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    ready: bool | None = None  # the Ready condition; None when the node reports none


@dataclass(frozen=True)
class PodInfo:
    """A non-terminal Pod. ``requests`` holds only ``nvidia.com/*`` resources, as integers.

    Effective request per resource = max(Σ app containers, max of init containers), the rule the
    scheduler uses (Kubernetes "Resource sharing within containers").
    """

    namespace: str
    name: str
    uid: str = ""
    node_name: str | None = None
    phase: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    deleting: bool = False
    # nvidia.com/* requests whose quantity is not a whole number ("0.5", "1500m"): left out of
    # ``requests`` and reported by the sync as a warning (raw quantity strings).
    bad_quantities: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VmiInfo:
    """A VirtualMachineInstance (kubevirt.io/v1) with its GPU device names (DOMAIN.md §5.3, §5.4)."""

    namespace: str
    name: str
    uid: str = ""
    phase: str = ""
    node_name: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    gpu_device_names: tuple[str, ...] = ()
    conditions: tuple[VmiCondition, ...] = ()
    ip_address: str | None = None
    created: str = ""
    deleting: bool = False
    resource_version: str = ""

    def condition(self, type_: str) -> VmiCondition | None:
        """The status condition of ``type_`` (e.g. ``"PodScheduled"``, ``"Synchronized"``), if any."""
        return next((c for c in self.conditions if c.type == type_), None)


@dataclass(frozen=True)
class VmiCondition:
    """One ``status.conditions[]`` entry of a VMI (DOMAIN.md §5.4)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class ClusterPolicyInfo:
    """The GPU Operator ClusterPolicy fields the portal reads (DOMAIN.md §1, §3), with their defaults."""

    name: str
    sandbox_enabled: bool = False
    default_workload: str = "container"
    sandbox_mode: str = "kubevirt"
    vgpu_config_name: str = "default-vgpu-devices-config"
    vgpu_default_config: str = "default"


@dataclass(frozen=True)
class PermittedPci:
    """``permittedHostDevices.pciHostDevices[]`` (or HyperConverged ``pciDeviceSelector``), DOMAIN.md §5.1."""

    selector: str
    resource_name: str
    external_resource_provider: bool = False


@dataclass(frozen=True)
class PermittedMdev:
    """``permittedHostDevices.mediatedDevices[]``, DOMAIN.md §5.1."""

    selector: str
    resource_name: str
    external_resource_provider: bool = False


@dataclass(frozen=True)
class KubeVirtInfo:
    """A KubeVirt CR's permitted host devices. ``permitted_configured`` is False when the CR has no
    ``permittedHostDevices`` at all (KubeVirt then skips the check, DOMAIN.md §5.1)."""

    namespace: str
    name: str
    permitted_configured: bool = False
    pci_host_devices: tuple[PermittedPci, ...] = ()
    mediated_devices: tuple[PermittedMdev, ...] = ()


@dataclass(frozen=True)
class VmiEvent:
    """One watch event of a VMI: ``type`` is ``ADDED``, ``MODIFIED`` or ``DELETED``."""

    type: str
    vmi: VmiInfo
