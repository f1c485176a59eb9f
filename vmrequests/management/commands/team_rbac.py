"""Print the Kubernetes Role and RoleBinding each team's namespace needs, as YAML.

Usage::

    manage.py team_rbac                      # every team's namespace
    manage.py team_rbac --team quant         # one team (repeatable)
    manage.py team_rbac --with-namespaces    # also the Namespace objects
    manage.py team_rbac | kubectl apply -f -

In the cluster: ``kubectl -n gpu-vm-portal exec deploy/gpu-vm-portal-web -- python manage.py
team_rbac | kubectl apply -f -`` (deploy/README.md "Team namespaces").

The portal creates, reads and deletes its VirtualMachineInstances by name in the namespace of
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
#: Labels on every object this command prints (select them with ``-l``).
LABELS = {
    "app.kubernetes.io/name": "gpu-vm-portal",
    "app.kubernetes.io/part-of": "gpu-vm-portal",
    "app.kubernetes.io/component": "team-rbac",
}


def team_rbac_objects(
    namespace: str, teams: list[str], sa_namespace: str, sa_name: str, *, with_namespace: bool = False
) -> list[dict[str, Any]]:
    """The objects one team namespace needs.

    Args:
        namespace: the team namespace (a DNS-1123 label, as ``Team.namespace`` validates).
        teams: slugs of the teams using it (for the annotation), e.g. ``["quant"]``.
        sa_namespace: the ServiceAccount's namespace, e.g. ``"gpu-vm-portal"``.
        sa_name: the ServiceAccount's name, e.g. ``"gpu-vm-portal"``.
        with_namespace: also return the ``Namespace`` itself, first.

    Returns:
        Manifests as dicts: [Namespace,] Role, RoleBinding.
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
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(ROLE_NAME),
            "rules": copy.deepcopy(TEAM_ROLE_RULES),
        }
    )
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(ROLE_NAME),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}],
        }
    )
    return objects


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
            "--with-namespaces",
            action="store_true",
            help="also print the Namespace objects (VMIs can only be created in existing namespaces)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        sa_namespace, sep, sa_name = str(options["service_account"]).partition("/")
        if not sep or not sa_namespace or not sa_name or "/" in sa_name:
            raise CommandError(f"--service-account {options['service_account']!r}: use NAMESPACE/NAME")
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
                namespace, team_slugs, sa_namespace, sa_name, with_namespace=options["with_namespaces"]
            )
        self.stdout.write(
            f"# gpu-vm-portal: VMI rights of {sa_namespace}/{sa_name} in {len(by_namespace)} team "
            f"namespace(s). Generated by manage.py team_rbac.\n"
            + yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True),
            ending="",
        )
