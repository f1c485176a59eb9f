# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""Nodes: list, read and label them."""

from __future__ import annotations

from collections.abc import Mapping

from portal.k8s import client
from portal.k8s.parsing import parse_node
from portal.k8s.raw import iter_raw_pages
from portal.k8s.types import NodeInfo


def list_nodes() -> list[NodeInfo]:
    """Every Node of the cluster.

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    return [parse_node(item) for page in iter_raw_pages("nodes") for item in page]


def get_node(name: str) -> NodeInfo:
    """One Node, read live.

    Raises:
        K8sNotFound: no such Node. K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    return parse_node(client.fetch(client.core_v1().read_node, name))


def patch_node_labels(name: str, labels: Mapping[str, str | None]) -> NodeInfo:
    """Set or remove Node labels with a strategic merge patch on ``metadata.labels``.

    A small patch (never a whole-object update) so concurrent writers such as the vGPU Device
    Manager are not overwritten (DOMAIN.md pitfall 13); ``None`` removes a label (DEVCLUSTER.md §5.5).

    Args:
        name: the Node.
        labels: ``{key: value}``; value None removes the key.

    Returns:
        The Node after the patch.

    Raises:
        K8sNotFound: no such Node. K8sInvalid: a bad label key or value (422).
        K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    body = {"metadata": {"labels": dict(labels)}}
    return parse_node(client.fetch(client.core_v1().patch_node, name, body, field_validation="Strict"))
