# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""The Kubernetes adapter: the ONLY package of the portal that imports ``kubernetes``.

Callers get plain dataclasses and typed errors, never client model objects or
``ApiException``; every call carries a timeout; every LIST goes through one paginator.
One job per module:

- :mod:`~portal.k8s.errors`: the ``K8sError`` family and ``translate`` (status code → class);
- :mod:`~portal.k8s.types`: the dataclasses (``NodeInfo``, ``PodInfo``, ``VmiInfo``, ...);
- :mod:`~portal.k8s.quantity`: Kubernetes quantities as whole device counts;
- :mod:`~portal.k8s.parsing`: raw API objects → dataclasses (pure; unit tests feed the samples);
- :mod:`~portal.k8s.client`: configuration, the cached client factory, time-outs, ``paginate``,
  ``watch_stream``, ``server_version``;
- :mod:`~portal.k8s.raw`: raw LIST pages for the inventory sync;
- :mod:`~portal.k8s.nodes`, :mod:`~portal.k8s.pods`, :mod:`~portal.k8s.vmis`,
  :mod:`~portal.k8s.operators` (ClusterPolicy, KubeVirt CRs, ConfigMaps): the resource calls.

The public names are re-exported here, so callers write ``from portal import k8s`` and
``k8s.get_node(...)``; unit tests replace those attributes (``tests/fake_k8s.py``).
"""

from __future__ import annotations

from portal.k8s.client import LIST_PAGE_SIZE, api_client, is_configured, server_version
from portal.k8s.errors import (
    K8sConflict,
    K8sError,
    K8sForbidden,
    K8sInvalid,
    K8sNotConfigured,
    K8sNotFound,
    K8sTransientError,
    translate,
)
from portal.k8s.nodes import get_node, list_nodes, patch_node_labels
from portal.k8s.operators import get_cluster_policy, list_kubevirts, read_config_map_data
from portal.k8s.parsing import (
    GPU_RESOURCE_PREFIX,
    TERMINAL_POD_PHASES,
    parse_cluster_policy,
    parse_kubevirt,
    parse_node,
    parse_pod,
    parse_vmi,
    pod_gpu_requests,
)
from portal.k8s.pods import list_pods, list_pods_on_node
from portal.k8s.quantity import parse_count, parse_quantity
from portal.k8s.raw import NON_TERMINAL_POD_SELECTOR, RawKind, iter_raw_pages, list_raw
from portal.k8s.types import (
    ClusterPolicyInfo,
    KubeVirtInfo,
    NodeInfo,
    PermittedMdev,
    PermittedPci,
    PodInfo,
    ServerVersion,
    VmiCondition,
    VmiEvent,
    VmiInfo,
)
from portal.k8s.vmis import (
    VMI_GROUP,
    VMI_PLURAL,
    VMI_VERSION,
    create_vmi,
    delete_vmi,
    get_vmi,
    list_vmis,
    list_vmis_labelled,
    list_vmis_labelled_with_version,
    watch_vmis,
)

__all__ = [
    "GPU_RESOURCE_PREFIX",
    "LIST_PAGE_SIZE",
    "NON_TERMINAL_POD_SELECTOR",
    "TERMINAL_POD_PHASES",
    "VMI_GROUP",
    "VMI_PLURAL",
    "VMI_VERSION",
    "ClusterPolicyInfo",
    "K8sConflict",
    "K8sError",
    "K8sForbidden",
    "K8sInvalid",
    "K8sNotConfigured",
    "K8sNotFound",
    "K8sTransientError",
    "KubeVirtInfo",
    "NodeInfo",
    "PermittedMdev",
    "PermittedPci",
    "PodInfo",
    "RawKind",
    "ServerVersion",
    "VmiCondition",
    "VmiEvent",
    "VmiInfo",
    "api_client",
    "create_vmi",
    "delete_vmi",
    "get_cluster_policy",
    "get_node",
    "get_vmi",
    "is_configured",
    "iter_raw_pages",
    "list_kubevirts",
    "list_nodes",
    "list_pods",
    "list_pods_on_node",
    "list_raw",
    "list_vmis",
    "list_vmis_labelled",
    "list_vmis_labelled_with_version",
    "parse_cluster_policy",
    "parse_count",
    "parse_kubevirt",
    "parse_node",
    "parse_pod",
    "parse_quantity",
    "parse_vmi",
    "patch_node_labels",
    "pod_gpu_requests",
    "read_config_map_data",
    "server_version",
    "translate",
    "watch_vmis",
]
