"""Print the Kubernetes Role and RoleBinding each team's namespace needs, as YAML.

Usage::

    manage.py team_rbac                      # every team's namespace
    manage.py team_rbac --team quant         # one team (repeatable)
    manage.py team_rbac --with-namespaces    # also the Namespace objects
    manage.py team_rbac | kubectl apply -f -

In the cluster: ``kubectl -n gpu-vm-portal exec deploy/gpu-vm-portal-web -- python manage.py
team_rbac | kubectl apply -f -`` (deploy/README.md "Team namespaces").

The web process only reads a VMI by name in a team namespace (a chosen VM name that is a VMI
the portal did not create is refused at submit): its own Role grants ``get`` and nothing else.

The portal's worker creates, reads and deletes its VirtualMachineInstances by name in the namespace of
the request's team (``portal/k8s/vmis.py`` ``create_vmi``, ``get_vmi``, ``delete_vmi``). Those three
verbs are granted per team namespace only, so the portal cannot start a VM anywhere else;
LIST and WATCH of VMIs are cluster-wide reads and live in the ClusterRole
(``deploy/base/rbac-cluster.yaml``). DOMAIN.md §6: "kubevirt.io virtualmachineinstances: get,
list, watch, create, delete". Teams sharing a namespace share one Role and RoleBinding.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.labels import TEAMS as TEAMS_ANNOTATION
from vmrequests.models import Team

#: Name of the Role and RoleBinding in every team namespace.
ROLE_NAME = "gpu-vm-portal-vmis"
#: The worker's ServiceAccount (deploy/base/serviceaccounts.yaml).
DEFAULT_SERVICE_ACCOUNT = "gpu-vm-portal/gpu-vm-portal"
#: What a team namespace grants: exactly the namespaced VMI calls of portal/k8s/vmis.py.
TEAM_ROLE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["kubevirt.io"],
        "resources": ["virtualmachineinstances"],
        "verbs": ["get", "create", "delete"],
    }
]
#: Name of the web process's read-only Role and RoleBinding in every team namespace.
WEB_ROLE_NAME = "gpu-vm-portal-web-vmis"
#: The web process's ServiceAccount (deploy/base/serviceaccounts.yaml).
DEFAULT_WEB_SERVICE_ACCOUNT = "gpu-vm-portal/gpu-vm-portal-web"
#: What the web process may do in a team namespace: read one VMI by name, so the request
#: validator can refuse a chosen name that is a VMI the portal did not create
#: (``vmrequests/vm_names.py``, ``provisioning/ownership.py`` ``foreign_vmi_named``). No create,
#: no delete: those stay the worker's.
WEB_ROLE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["kubevirt.io"],
        "resources": ["virtualmachineinstances"],
        "verbs": ["get"],
    }
]
#: Labels on every object this command prints (select them with ``-l``).
LABELS = {
    "app.kubernetes.io/name": "gpu-vm-portal",
    "app.kubernetes.io/part-of": "gpu-vm-portal",
    "app.kubernetes.io/component": "team-rbac",
}


def team_rbac_objects(
    namespace: str,
    teams: list[str],
    sa_namespace: str,
    sa_name: str,
    *,
    with_namespace: bool = False,
    web_sa: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The objects one team namespace needs.

    Args:
        namespace: the team namespace (a DNS-1123 label, as ``Team.namespace`` validates).
        teams: slugs of the teams using it (for the annotation), e.g. ``["quant"]``.
        sa_namespace: the ServiceAccount's namespace, e.g. ``"gpu-vm-portal"``.
        sa_name: the ServiceAccount's name, e.g. ``"gpu-vm-portal"``.
        with_namespace: also return the ``Namespace`` itself, first.
        web_sa: the web process's ServiceAccount ``(namespace, name)``; when given, also its
            read-only Role and RoleBinding (``WEB_ROLE_RULES``).

    Returns:
        Manifests as dicts: [Namespace,] Role, RoleBinding[, web Role, web RoleBinding].
    """

    def meta(name: str, namespaced: bool = True) -> dict[str, Any]:
        # Fresh dicts per object: yaml.safe_dump writes a shared dict as an anchor and alias.
        out: dict[str, Any] = {"name": name}
        if namespaced:
            out["namespace"] = namespace
        out["labels"] = dict(LABELS)
        out["annotations"] = {TEAMS_ANNOTATION: ",".join(teams)}
        return out

    objects: list[dict[str, Any]] = []
    if with_namespace:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": meta(namespace, namespaced=False),
            }
        )
    objects += _role_and_binding(meta(ROLE_NAME), ROLE_NAME, TEAM_ROLE_RULES, (sa_namespace, sa_name))
    if web_sa is not None:
        objects += _role_and_binding(meta(WEB_ROLE_NAME), WEB_ROLE_NAME, WEB_ROLE_RULES, web_sa)
    return objects


def _role_and_binding(
    metadata: dict[str, Any], name: str, rules: list[dict[str, Any]], sa: tuple[str, str]
) -> list[dict[str, Any]]:
    """A Role ``name`` with ``rules`` and the RoleBinding giving it to ServiceAccount ``sa``
    (``(namespace, name)``); ``metadata`` is copied into both."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": copy.deepcopy(metadata),
            "rules": copy.deepcopy(rules),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": copy.deepcopy(metadata),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": sa[1], "namespace": sa[0]}],
        },
    ]


def _service_account(value: Any, option: str) -> tuple[str, str]:
    """``"NAMESPACE/NAME"`` as ``(namespace, name)``; ``CommandError`` otherwise."""
    sa_namespace, sep, sa_name = str(value).partition("/")
    if not sep or not sa_namespace or not sa_name or "/" in sa_name:
        raise CommandError(f"{option} {value!r}: use NAMESPACE/NAME")
    return sa_namespace, sa_name


class Command(BaseCommand):
    help = (
        "Print the Role and RoleBinding that let the portal's ServiceAccount create, read and delete "
        "VirtualMachineInstances in each team's namespace (YAML for kubectl apply -f -)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--team",
            action="append",
            default=[],
            metavar="SLUG",
            help="only this team's namespace (repeatable); default: every team",
        )
        parser.add_argument(
            "--service-account",
            default=DEFAULT_SERVICE_ACCOUNT,
            metavar="NAMESPACE/NAME",
            help=f"the worker's ServiceAccount (default {DEFAULT_SERVICE_ACCOUNT})",
        )
        parser.add_argument(
            "--web-service-account",
            default=DEFAULT_WEB_SERVICE_ACCOUNT,
            metavar="NAMESPACE/NAME",
            help=f"the web process's ServiceAccount, granted VMI get only (default {DEFAULT_WEB_SERVICE_ACCOUNT})",
        )
        parser.add_argument(
            "--with-namespaces",
            action="store_true",
            help="also print the Namespace objects (VMIs can only be created in existing namespaces)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        sa_namespace, sa_name = _service_account(options["service_account"], "--service-account")
        web_sa = _service_account(options["web_service_account"], "--web-service-account")
        slugs: list[str] = options["team"]
        teams = Team.objects.order_by("namespace", "slug")
        if slugs:
            teams = teams.filter(slug__in=slugs)
            missing = sorted(set(slugs) - set(teams.values_list("slug", flat=True)))
            if missing:
                raise CommandError(f"no team with slug {', '.join(missing)}")
        by_namespace: dict[str, list[str]] = {}
        for namespace, slug in teams.values_list("namespace", "slug"):
            by_namespace.setdefault(namespace, []).append(slug)
        if not by_namespace:
            raise CommandError("there are no teams yet: create them first (admin: Teams)")
        documents: list[dict[str, Any]] = []
        for namespace, team_slugs in by_namespace.items():
            documents += team_rbac_objects(
                namespace,
                team_slugs,
                sa_namespace,
                sa_name,
                with_namespace=options["with_namespaces"],
                web_sa=web_sa,
            )
        self.stdout.write(
            f"# gpu-vm-portal: VMI rights of {sa_namespace}/{sa_name} in {len(by_namespace)} team "
            f"namespace(s). Generated by manage.py team_rbac.\n"
            + yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True),
            ending="",
        )
