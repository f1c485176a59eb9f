# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""Raw paginated LISTs of the kinds the inventory sync reads (docs/inventory.md §1).

The sync parses each page as it arrives; the benchmark uses :func:`list_raw` as the "raw fetch"
baseline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, Literal

from portal.k8s import client
from portal.k8s.parsing import as_dict, as_list

RawKind = Literal["nodes", "pods", "vmis", "clusterpolicies", "kubevirts"]

#: Server-side filter for pods: terminal pods hold no devices (``parse_pod`` drops them too).
NON_TERMINAL_POD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"

#: ``(group, version, plural)`` of the custom resources listed cluster-wide.
CUSTOM_RESOURCES: dict[str, tuple[str, str, str]] = {
    "vmis": ("kubevirt.io", "v1", "virtualmachineinstances"),
    "kubevirts": ("kubevirt.io", "v1", "kubevirts"),
    "clusterpolicies": ("nvidia.com", "v1", "clusterpolicies"),
}


def _lister(kind: RawKind) -> Callable[..., Any]:
    """The client list method of ``kind`` with its fixed arguments bound."""
    if kind == "nodes":
        return client.core_v1().list_node
    if kind == "pods":
        return functools.partial(
            client.core_v1().list_pod_for_all_namespaces, field_selector=NON_TERMINAL_POD_SELECTOR
        )
    group, version, plural = CUSTOM_RESOURCES[kind]
    return functools.partial(client.custom_objects().list_cluster_custom_object, group, version, plural)


def iter_raw_pages(kind: RawKind) -> Iterator[list[dict[str, Any]]]:
    """Yield the raw items of a paginated LIST, one page (≤ 500 items) at a time.

    VMIs and KubeVirt CRs are listed across all namespaces (``/apis/kubevirt.io/v1/<plural>``),
    pods with the non-terminal field selector.

    Args:
        kind: ``nodes``, ``pods``, ``vmis``, ``clusterpolicies`` or ``kubevirts``.

    Yields:
        Lists of item dicts as the API server sent them.

    Raises:
        K8sNotConfigured, K8sNotFound (CRD not installed), K8sForbidden, K8sTransientError
        (including 410 Gone for an expired continue token): see :func:`client.paginate`.
    """
    for page in client.paginate(_lister(kind)):
        yield [as_dict(item) for item in as_list(page.get("items"))]


def list_raw(kind: RawKind) -> list[dict[str, Any]]:
    """All raw items of a LIST (every page).

    Raises:
        See :func:`iter_raw_pages`.
    """
    return [item for page in iter_raw_pages(kind) for item in page]
