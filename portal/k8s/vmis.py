# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""VirtualMachineInstances (``kubevirt.io/v1``): list, create, read, delete and watch them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from portal.k8s import client
from portal.k8s.errors import K8sNotFound
from portal.k8s.parsing import as_dict, as_list, parse_vmi
from portal.k8s.raw import CUSTOM_RESOURCES, iter_raw_pages
from portal.k8s.types import VmiEvent, VmiInfo

VMI_GROUP, VMI_VERSION, VMI_PLURAL = CUSTOM_RESOURCES["vmis"]

#: The watch event types passed on to callers (``BOOKMARK`` only moves the resource version).
WATCHED_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})


def list_vmis() -> list[VmiInfo]:
    """Every VirtualMachineInstance of every namespace; [] when KubeVirt's CRDs are not installed.

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    try:
        return [parse_vmi(item) for page in iter_raw_pages("vmis") for item in page]
    except K8sNotFound:
        return []


def create_vmi(namespace: str, body: Mapping[str, Any]) -> VmiInfo:
    """Create a VirtualMachineInstance with server-side strict field validation.

    Raises:
        K8sConflict: a VMI of that name exists (409; the caller decides whether to adopt it).
        K8sInvalid: the schema or a KubeVirt admission webhook refused it (422, DOMAIN.md §5.4).
        K8sNotFound: the namespace (or the KubeVirt CRD) does not exist.
        K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    create = client.custom_objects().create_namespaced_custom_object
    raw = client.fetch(
        create, VMI_GROUP, VMI_VERSION, namespace, VMI_PLURAL, dict(body), field_validation="Strict"
    )
    return parse_vmi(raw)


def get_vmi(namespace: str, name: str) -> VmiInfo | None:
    """One VirtualMachineInstance, or None when it does not exist.

    Raises:
        K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    read = client.custom_objects().get_namespaced_custom_object
    try:
        return parse_vmi(client.fetch(read, VMI_GROUP, VMI_VERSION, namespace, VMI_PLURAL, name))
    except K8sNotFound:
        return None


def delete_vmi(namespace: str, name: str, uid: str) -> bool:
    """Delete the VirtualMachineInstance with this ``uid`` (KubeVirt then deletes its launcher pod).

    The delete carries the precondition ``metadata.uid == uid``: the API server refuses it (409)
    when the object of that name is another one than the caller read and checked (replaced
    meanwhile). Callers decide ownership first (``vmrequests.provisioning.ownership``).

    Returns:
        True when a delete was accepted, False when it was already gone.

    Raises:
        ValueError: ``uid`` is empty (a delete without a precondition is never sent).
        K8sConflict: the object of that name has another uid (it was replaced).
        K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    if not uid:
        raise ValueError("delete_vmi needs the uid of the VMI the caller checked")
    delete = client.custom_objects().delete_namespaced_custom_object
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    try:
        client.call(
            delete, VMI_GROUP, VMI_VERSION, namespace, VMI_PLURAL, name, body=body, _preload_content=False
        )
    except K8sNotFound:
        return False
    return True


def list_vmis_labelled(selector: str) -> list[VmiInfo]:
    """VirtualMachineInstances of every namespace matching a label ``selector``
    (e.g. ``"app.kubernetes.io/managed-by=gpu-vm-portal"``); [] without KubeVirt's CRDs.

    Raises:
        K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    return list_vmis_labelled_with_version(selector)[0]


def list_vmis_labelled_with_version(selector: str) -> tuple[list[VmiInfo], str]:
    """``list_vmis_labelled`` plus the list's ``resourceVersion`` (to start a watch from).

    Returns:
        ``(vmis, resource_version)``; ``([], "")`` without KubeVirt's CRDs.

    Raises:
        K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    lister = client.custom_objects().list_cluster_custom_object
    out: list[VmiInfo] = []
    version = ""
    try:
        for page in client.paginate(lister, VMI_GROUP, VMI_VERSION, VMI_PLURAL, label_selector=selector):
            out.extend(parse_vmi(as_dict(item)) for item in as_list(page.get("items")))
            version = str(as_dict(page.get("metadata")).get("resourceVersion") or version)
    except K8sNotFound:
        return [], ""
    return out, version


def watch_vmis(
    selector: str, resource_version: str | None = None, timeout_seconds: int = 60
) -> Iterator[VmiEvent]:
    """Watch VirtualMachineInstances of every namespace matching a label ``selector``.

    A server-side watch bounded by ``timeout_seconds`` (the stream then ends and the caller
    starts a new one; pass the last seen ``resource_version`` to continue without a gap).
    ``BOOKMARK`` events are skipped.

    Yields:
        ``VmiEvent`` per change.

    Raises:
        K8sTransientError: the stream broke, or 410 Gone (the resource version is too old: list
            again and restart from the list's version). K8sForbidden: see :func:`portal.k8s.errors.translate`.
    """
    kwargs: dict[str, Any] = {"label_selector": selector, "allow_watch_bookmarks": True}
    if resource_version:
        kwargs["resource_version"] = resource_version
    lister = client.custom_objects().list_cluster_custom_object
    events = client.watch_stream(
        lister, VMI_GROUP, VMI_VERSION, VMI_PLURAL, timeout_seconds=timeout_seconds, **kwargs
    )
    for kind, obj in events:
        if kind in WATCHED_EVENT_TYPES:
            yield VmiEvent(kind, parse_vmi(obj))
