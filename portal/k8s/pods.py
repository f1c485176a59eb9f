# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""Pods: the non-terminal ones, cluster-wide or on one node."""

from __future__ import annotations

from portal.k8s import client
from portal.k8s.parsing import as_dict, as_list, parse_pod
from portal.k8s.raw import NON_TERMINAL_POD_SELECTOR, iter_raw_pages
from portal.k8s.types import PodInfo


def list_pods() -> list[PodInfo]:
    """Every non-terminal Pod of every namespace (phase not Succeeded/Failed).

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    parsed = (parse_pod(item) for page in iter_raw_pages("pods") for item in page)
    return [pod for pod in parsed if pod is not None]


def list_pods_on_node(node_name: str) -> list[PodInfo]:
    """Every non-terminal Pod bound to ``node_name`` (all namespaces), read live.

    Used before a vGPU re-profile to verify against the cluster, not the stored inventory, that
    no pod uses the node's vGPUs (DOMAIN.md pitfall 2).

    Raises:
        K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    selector = f"spec.nodeName={node_name},{NON_TERMINAL_POD_SELECTOR}"
    pages = client.paginate(client.core_v1().list_pod_for_all_namespaces, field_selector=selector)
    parsed = (parse_pod(as_dict(item)) for page in pages for item in as_list(page.get("items")))
    return [pod for pod in parsed if pod is not None]
