"""The Kubernetes manifests of ``deploy/`` and ``manage.py team_rbac`` (no cluster needed).

What is checked here: every manifest parses and is listed in the kustomization; every workload
runs non-root, read-only, with resources and the probes it can honestly have; the RBAC is exactly
the least-privilege set deploy/README.md explains (no wildcards), bound to the right identities;
the ConfigMap is a valid production configuration; and ``portal/k8s/`` still calls exactly
the API methods that RBAC was written for. ``tests/integration/deploy/test_deploy_rbac.py``
proves the same RBAC against the real API server.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from portal import k8s
from vmrequests.management.commands import team_rbac
from vmrequests.models import Team

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
NS = "gpu-vm-portal"
SA = f"system:serviceaccount:{NS}:gpu-vm-portal"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
SECRET_KEYS = {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "EMAIL_URL"}


def load(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of one file (empty documents dropped)."""
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def base_objects() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of the files listed in deploy/base/kustomization.yaml, by (kind, name)."""
    (kustomization,) = load(BASE / "kustomization.yaml")
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for obj in load(BASE / name):
            key = (obj["kind"], obj["metadata"]["name"])
            assert key not in objects, f"{key} defined twice"
            objects[key] = obj
    return objects


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {name: obj for (k, name), obj in base_objects().items() if k == kind}


def pod_specs() -> dict[str, dict[str, Any]]:
    """The pod spec of every workload: Deployments by component, and the migrate Job."""
    specs = {
        obj["metadata"]["labels"]["app.kubernetes.io/component"]: obj["spec"]["template"]["spec"]
        for obj in of_kind("Deployment").values()
    }
    specs["migrate"] = of_kind("Job")["gpu-vm-portal-migrate"]["spec"]["template"]["spec"]
    return specs


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


# --- files and kustomization ----------------------------------------------------------------------


def test_every_manifest_parses_and_the_kustomization_lists_every_file() -> None:
    (kustomization,) = load(BASE / "kustomization.yaml")
    on_disk = sorted(p.name for p in BASE.iterdir() if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == on_disk
    assert len(kustomization["resources"]) == len(set(kustomization["resources"]))
    assert all(name.endswith(".yaml") for name in on_disk)
    # kustomize's `namespace:` would move the GPU Operator Role out of its namespace.
    assert "namespace" not in kustomization
    assert kustomization["images"] == [{"name": "gpu-vm-portal", "newTag": "latest"}]
    for path in [*BASE.iterdir(), DEPLOY / "secret-example.yaml"]:
        for doc in load(path):
            assert {"apiVersion", "kind"} <= set(doc), path
    assert sorted(base_objects()) == [
        ("ClusterRole", "gpu-vm-portal"),
        ("ClusterRoleBinding", "gpu-vm-portal"),
        ("ConfigMap", "gpu-vm-portal"),
        ("Deployment", "gpu-vm-portal-beat"),
        ("Deployment", "gpu-vm-portal-watcher"),
        ("Deployment", "gpu-vm-portal-web"),
        ("Deployment", "gpu-vm-portal-worker"),
        ("Job", "gpu-vm-portal-migrate"),
        ("Namespace", NS),
        ("NetworkPolicy", "gpu-vm-portal-beat"),
        ("NetworkPolicy", "gpu-vm-portal-default-deny"),
        ("NetworkPolicy", "gpu-vm-portal-migrate"),
        ("NetworkPolicy", "gpu-vm-portal-watcher"),
        ("NetworkPolicy", "gpu-vm-portal-web"),
        ("NetworkPolicy", "gpu-vm-portal-worker"),
        ("Role", "gpu-vm-portal-vgpu-config"),
        ("RoleBinding", "gpu-vm-portal-vgpu-config"),
        ("Service", "gpu-vm-portal-web"),
        ("ServiceAccount", "gpu-vm-portal"),
        ("ServiceAccount", "gpu-vm-portal-web"),
        ("ValidatingAdmissionPolicy", "gpu-vm-portal-node-labels"),
        ("ValidatingAdmissionPolicyBinding", "gpu-vm-portal-node-labels"),
    ]


def test_namespaces_are_explicit() -> None:
    where = {
        key: obj["metadata"].get("namespace")
        for key, obj in base_objects().items()
        if key[0] not in CLUSTER_SCOPED
    }
    operator_ns = of_kind("ConfigMap")["gpu-vm-portal"]["data"]["PORTAL_GPU_OPERATOR_NAMESPACE"]
    assert operator_ns == "gpu-operator"
    assert {key: ns for key, ns in where.items() if ns != NS} == {
        ("Role", "gpu-vm-portal-vgpu-config"): operator_ns,
        ("RoleBinding", "gpu-vm-portal-vgpu-config"): operator_ns,
    }
    assert all(
        "namespace" not in obj["metadata"]
        for (kind, _), obj in base_objects().items()
        if kind in CLUSTER_SCOPED
    )


def test_the_secret_example_is_outside_the_kustomization_with_placeholders_only() -> None:
    (secret,) = load(DEPLOY / "secret-example.yaml")
    assert (secret["kind"], secret["metadata"]["name"], secret["metadata"]["namespace"]) == ("Secret", NS, NS)
    assert set(secret["stringData"]) == SECRET_KEYS
    assert "data" not in secret
    assert all("<" in value and ">" in value for value in secret["stringData"].values())
    assert not (BASE / "secret-example.yaml").exists()


def overlay_objects() -> dict[tuple[str, str], dict[str, Any]]:
    """deploy/base with the JSON patches of overlays/example applied (all of them ``replace``,
    which fails in kustomize when the path does not exist; so does this)."""
    (overlay,) = load(DEPLOY / "overlays" / "example" / "kustomization.yaml")
    assert overlay["resources"] == ["../../base"]
    objects = base_objects()
    for patch in overlay["patches"]:
        obj = objects[(patch["target"]["kind"], patch["target"]["name"])]
        for op in yaml.safe_load(patch["patch"]):
            assert op["op"] == "replace", op
            *parents, last = op["path"].lstrip("/").split("/")
            node: Any = obj
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            key: Any = int(last) if isinstance(node, list) else last
            assert (key < len(node)) if isinstance(node, list) else (key in node), op["path"]
            node[key] = op["value"]
    return objects


def test_example_overlay_moves_the_operator_namespace_consistently() -> None:
    objects = overlay_objects()
    (overlay,) = load(DEPLOY / "overlays" / "example" / "kustomization.yaml")
    assert overlay["images"] == [
        {"name": "gpu-vm-portal", "newName": "registry.example.com/gpu-vm-portal", "newTag": "1.0.0"}
    ]
    data = objects[("ConfigMap", "gpu-vm-portal")]["data"]
    role = objects[("Role", "gpu-vm-portal-vgpu-config")]
    binding = objects[("RoleBinding", "gpu-vm-portal-vgpu-config")]
    param = objects[("ValidatingAdmissionPolicyBinding", "gpu-vm-portal-node-labels")]["spec"]["paramRef"]
    assert (
        data["PORTAL_GPU_OPERATOR_NAMESPACE"]
        == role["metadata"]["namespace"]
        == binding["metadata"]["namespace"]
        == param["namespace"]
    )
    assert param["name"] == "custom-vgpu-config"
    assert role["rules"][0]["resourceNames"] == ["default-vgpu-devices-config", "custom-vgpu-config"]
    assert "localhost" in data["ALLOWED_HOSTS"].split(",")
    assert data["PORTAL_BASE_URL"] in {o.strip() for o in data["CSRF_TRUSTED_ORIGINS"].split(",")}


# --- workloads ------------------------------------------------------------------------------------


def test_workloads_run_the_portal_processes() -> None:
    deployments = of_kind("Deployment")
    commands = {
        name.removeprefix("gpu-vm-portal-"): [
            c["command"] for c in d["spec"]["template"]["spec"]["containers"]
        ]
        for name, d in deployments.items()
    }
    assert commands == {
        "web": [
            [
                "gunicorn",
                "portal.wsgi:application",
                "--bind",
                "0.0.0.0:8000",
                "--workers",
                "3",
                "--access-logfile",
                "-",
            ]
        ],
        "worker": [["celery", "-A", "portal", "worker", "--loglevel=INFO", "--concurrency=2"]],
        "beat": [
            ["celery", "-A", "portal", "beat", "--loglevel=INFO", "--schedule", "/tmp/celerybeat-schedule"]
        ],
        "watcher": [["python", "manage.py", "watch_vmis"]],
    }
    job = of_kind("Job")["gpu-vm-portal-migrate"]["spec"]
    assert job["template"]["spec"]["containers"][0]["command"] == [
        "python",
        "manage.py",
        "migrate",
        "--noinput",
    ]
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    replicas = {name: (d["spec"]["replicas"], d["spec"].get("strategy")) for name, d in deployments.items()}
    assert replicas == {
        "gpu-vm-portal-web": (2, None),
        "gpu-vm-portal-worker": (2, None),
        # Exactly one beat (two would send every periodic task twice); the old one stops first.
        "gpu-vm-portal-beat": (1, {"type": "Recreate"}),
        "gpu-vm-portal-watcher": (1, {"type": "Recreate"}),
    }
    for d in deployments.values():
        template_labels = d["spec"]["template"]["metadata"]["labels"]
        assert d["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
    # The processes that need the database schema wait for the migrate Job.
    waits = {name: [c["name"] for c in spec.get("initContainers", [])] for name, spec in pod_specs().items()}
    assert waits == {
        "web": ["wait-for-migrations"],
        "worker": ["wait-for-migrations"],
        "watcher": ["wait-for-migrations"],
        "beat": [],
        "migrate": [],
    }


def test_every_container_is_non_root_read_only_and_has_resources() -> None:
    for name, spec in pod_specs().items():
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 10001,  # the Dockerfile's USER
            "runAsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        }, name
        assert spec["enableServiceLinks"] is False
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert set(volumes) == {"tmp"} and "emptyDir" in volumes["tmp"], name
        for c in containers(spec):
            where = f"{name}/{c['name']}"
            assert c["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }, where
            # The read-only root needs a writable /tmp (gunicorn heartbeats, beat's schedule).
            assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}], where
            requests, limits = c["resources"]["requests"], c["resources"]["limits"]
            assert set(requests) == {"cpu", "memory"} and set(limits) == {"memory"}, where
            assert c["image"] == "gpu-vm-portal:latest", where
            assert c["envFrom"] == [
                {"configMapRef": {"name": "gpu-vm-portal"}},
                {"secretRef": {"name": "gpu-vm-portal"}},
            ], where


def test_probes() -> None:
    probes = {
        name: {key for c in spec["containers"] for key in c if key.endswith("Probe")}
        for name, spec in pod_specs().items()
    }
    # The watcher has nothing to probe (no port, no heartbeat; see its manifest) and the Job none.
    assert probes == {
        "web": {"startupProbe", "livenessProbe", "readinessProbe"},
        "worker": {"livenessProbe"},
        "beat": {"livenessProbe"},
        "watcher": set(),
        "migrate": set(),
    }
    (web,) = pod_specs()["web"]["containers"]
    localhost = [{"name": "Host", "value": "localhost"}]
    assert web["ports"] == [{"name": "http", "containerPort": 8000}]
    assert {
        key: (web[key]["httpGet"]["path"], web[key]["httpGet"]["httpHeaders"]) for key in probes["web"]
    } == {
        "startupProbe": ("/healthz", localhost),
        "livenessProbe": ("/healthz", localhost),
        "readinessProbe": ("/readyz", localhost),
    }
    # The probes' Host header must be an allowed host, or Django answers 400.
    allowed = of_kind("ConfigMap")["gpu-vm-portal"]["data"]["ALLOWED_HOSTS"].split(",")
    assert "localhost" in allowed
    (worker,) = pod_specs()["worker"]["containers"]
    assert "inspect ping" in worker["livenessProbe"]["exec"]["command"][-1]
    (beat,) = pod_specs()["beat"]["containers"]
    assert "/tmp/celerybeat-schedule*" in beat["livenessProbe"]["exec"]["command"][-1]


def test_beat_probe_detects_a_stale_schedule(tmp_path: Path) -> None:
    """The beat probe's script, run against files of a known age (its glob pointed at tmp_path)."""
    (beat,) = pod_specs()["beat"]["containers"]
    script = beat["livenessProbe"]["exec"]["command"][-1].replace("/tmp/", f"{tmp_path}/")
    assert beat["livenessProbe"]["exec"]["command"][:2] == ["python", "-c"]

    def probe() -> int:
        return subprocess.run([sys.executable, "-c", script], check=False).returncode

    assert probe() == 1  # no schedule file at all
    schedule, wal = tmp_path / "celerybeat-schedule", tmp_path / "celerybeat-schedule-wal"
    schedule.write_text("")
    wal.write_text("")
    old = os.stat(schedule).st_mtime - 601
    os.utime(schedule, (old, old))
    assert probe() == 0  # the -wal file is fresh
    os.utime(wal, (old, old))
    assert probe() == 1


def test_service_targets_the_web_pods() -> None:
    service = of_kind("Service")["gpu-vm-portal-web"]["spec"]
    web = of_kind("Deployment")["gpu-vm-portal-web"]["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= web.items()
    assert service["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    assert service["type"] == "ClusterIP"


# --- identities and RBAC ------------------------------------------------------------------------


def test_service_accounts_per_process() -> None:
    identity = {
        name: (spec["serviceAccountName"], spec.get("automountServiceAccountToken", True))
        for name, spec in pod_specs().items()
    }
    assert identity == {
        # The only processes that call the Kubernetes API beyond GET /version.
        "worker": ("gpu-vm-portal", True),
        "watcher": ("gpu-vm-portal", True),
        # /readyz's GET /version needs a token; nothing else does.
        "web": ("gpu-vm-portal-web", True),
        "beat": ("gpu-vm-portal-web", False),
        "migrate": ("gpu-vm-portal-web", False),
    }
    subjects = [
        (kind, s["kind"], s["name"], s["namespace"])
        for kind in ("ClusterRoleBinding", "RoleBinding")
        for obj in of_kind(kind).values()
        for s in obj["subjects"]
    ]
    # Nothing is bound to the web's ServiceAccount.
    assert subjects == [
        ("ClusterRoleBinding", "ServiceAccount", "gpu-vm-portal", NS),
        ("RoleBinding", "ServiceAccount", "gpu-vm-portal", NS),
    ]


def rules_of(obj: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    """``(apiGroup, resource, verbs, resourceNames)`` per group and resource of a role."""
    return [
        (group, resource, tuple(rule["verbs"]), tuple(rule.get("resourceNames", ())))
        for rule in obj["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    ]


def assert_no_wildcards(obj: dict[str, Any]) -> None:
    for rule in obj["rules"]:
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert not any("*" in value for value in rule.get(key, [])), (obj["metadata"]["name"], key)
        assert "nonResourceURLs" not in rule


def test_cluster_role_is_exactly_what_the_adapter_uses() -> None:
    role = of_kind("ClusterRole")["gpu-vm-portal"]
    assert_no_wildcards(role)
    assert "aggregationRule" not in role
    assert rules_of(role) == [
        ("", "nodes", ("get", "list", "patch"), ()),
        ("", "pods", ("list",), ()),
        ("kubevirt.io", "virtualmachineinstances", ("list", "watch"), ()),
        ("kubevirt.io", "kubevirts", ("list",), ()),
        ("nvidia.com", "clusterpolicies", ("list",), ()),
    ]
    binding = of_kind("ClusterRoleBinding")["gpu-vm-portal"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpu-vm-portal",
    }


def test_gpu_operator_role_reads_one_config_map() -> None:
    role = of_kind("Role")["gpu-vm-portal-vgpu-config"]
    assert_no_wildcards(role)
    # The name the sync reads when the ClusterPolicy names none (portal/k8s/types.py ClusterPolicyInfo).
    default_name = k8s.ClusterPolicyInfo(name="").vgpu_config_name
    assert rules_of(role) == [("", "configmaps", ("get",), (default_name,))]
    binding = of_kind("RoleBinding")["gpu-vm-portal-vgpu-config"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }


def test_node_label_policy_applies_to_the_worker_identity_only() -> None:
    policy = of_kind("ValidatingAdmissionPolicy")["gpu-vm-portal-node-labels"]["spec"]
    assert policy["matchConditions"] == [
        {"name": "portal-service-account", "expression": f"request.userInfo.username == '{SA}'"}
    ]
    assert policy["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]
    assert policy["failurePolicy"] == "Fail"
    assert {v["reason"] for v in policy["validations"]} == {"Forbidden"}
    assert [v["name"] for v in policy["variables"]] == ["label", "config", "previous"]
    assert policy["variables"][0] == {"name": "label", "expression": "'nvidia.com/vgpu.config'"}
    # #14 finding 11: the label's value must be a config of the vGPU ConfigMap (the parameter).
    assert policy["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert sum("params.data['config.yaml'].matches(" in v["expression"] for v in policy["validations"]) == 1
    binding = of_kind("ValidatingAdmissionPolicyBinding")["gpu-vm-portal-node-labels"]["spec"]
    role = of_kind("Role")["gpu-vm-portal-vgpu-config"]
    assert binding == {
        "policyName": "gpu-vm-portal-node-labels",
        "validationActions": ["Deny"],
        "paramRef": {
            "name": role["rules"][0]["resourceNames"][0],
            "namespace": role["metadata"]["namespace"],
            "parameterNotFoundAction": "Deny",
        },
    }


def _ports(rules: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for rule in rules for p in rule.get("ports", [])}


def test_network_policies_deny_by_default_and_open_what_each_process_needs() -> None:
    """#14 finding 11: ingress only to the web pods from the ingress controller and Prometheus;
    egress per process to DNS, the database, Redis, the API server, SMTP and webhook targets."""
    policies = of_kind("NetworkPolicy")
    deny = policies["gpu-vm-portal-default-deny"]["spec"]
    assert (deny["podSelector"], deny["policyTypes"]) == ({}, ["Ingress", "Egress"])
    assert "ingress" not in deny
    assert _ports(deny["egress"]) == {("UDP", 53), ("TCP", 53)}
    components = {
        doc["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        for kind in ("Deployment", "Job")
        for doc in of_kind(kind).values()
    }
    by_component = {
        p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]: p["spec"]
        for name, p in policies.items()
        if name != "gpu-vm-portal-default-deny"
    }
    assert set(by_component) == components == {"web", "worker", "watcher", "beat", "migrate"}
    db, redis, api, smtp = (
        {("TCP", 5432)},
        {("TCP", 6379)},
        {("TCP", 443), ("TCP", 6443)},
        {
            ("TCP", 25),
            ("TCP", 465),
            ("TCP", 587),
        },
    )
    expected = {
        "web": db | redis | api | smtp,
        "worker": db | redis | api | smtp | {("TCP", 80)},
        "watcher": db | redis | api,
        "beat": redis,
        "migrate": db,
    }
    assert {c: _ports(spec["egress"]) for c, spec in by_component.items()} == expected
    assert {c for c, spec in by_component.items() if spec.get("ingress")} == {"web"}
    (ingress,) = by_component["web"]["ingress"]
    assert [
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for peer in ingress["from"]
    ] == [
        "ingress-nginx",
        "monitoring",
    ]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8000}]
    web_port = of_kind("Deployment")["gpu-vm-portal-web"]["spec"]["template"]["spec"]["containers"][0][
        "ports"
    ]
    assert web_port == [{"name": "http", "containerPort": 8000}]
    # Webhook receivers: never the link-local range (cloud metadata services).
    (outside,) = [rule for rule in by_component["worker"]["egress"] if "to" in rule]
    assert [b["ipBlock"] for b in outside["to"]] == [
        {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]},
        {"cidr": "::/0", "except": ["fe80::/10"]},
    ]
    for spec in by_component.values():
        assert spec["policyTypes"] == ["Ingress", "Egress"]


#: Every client method the adapter (portal/k8s/) calls, and what the RBAC above grants it.
ADAPTER_CALLS = {
    "get_code": "GET /version: every identity (system:public-info-viewer)",
    "list_node": "ClusterRole nodes list",
    "read_node": "ClusterRole nodes get",
    "patch_node": "ClusterRole nodes patch (+ node-label-policy.yaml)",
    "list_pod_for_all_namespaces": "ClusterRole pods list",
    "read_namespaced_config_map": "Role in the GPU Operator namespace, configmaps get",
    "list_cluster_custom_object": "ClusterRole list/watch of VMIs, list of kubevirts and clusterpolicies",
    "create_namespaced_custom_object": "team Role (manage.py team_rbac) VMIs create",
    "get_namespaced_custom_object": "team Role VMIs get",
    "delete_namespaced_custom_object": "team Role VMIs delete",
}


def test_the_adapter_calls_nothing_the_rbac_was_not_written_for() -> None:
    """A tripwire: a new Kubernetes call in portal/k8s/ fails here until deploy/ grants it
    (and ADAPTER_CALLS says where)."""
    source = "\n".join(path.read_text() for path in sorted((ROOT / "portal" / "k8s").glob("*.py")))
    # The API classes are built only by portal/k8s/client.py: core_v1(), custom_objects(), VersionApi.
    called = set(
        re.findall(r"(?:core_v1\(\)|custom_objects\(\)|VersionApi\(api_client\(\)\))\.([a-z_]+)", source)
    )
    assert called == set(ADAPTER_CALLS)


# --- configuration ----------------------------------------------------------------------------------


def test_config_map_holds_documented_non_secret_settings() -> None:
    data = of_kind("ConfigMap")["gpu-vm-portal"]["data"]
    docs = (ROOT / "docs" / "configuration.md").read_text()
    assert sorted(key for key in data if f"`{key}`" not in docs) == []
    assert SECRET_KEYS.isdisjoint(data)
    # In-cluster ServiceAccount, the image's var dir, production's DEBUG=false.
    assert {"PORTAL_KUBECONFIG", "PORTAL_KUBE_CONTEXT", "PORTAL_VAR_DIR", "DEBUG"}.isdisjoint(data)
    assert all(isinstance(value, str) for value in data.values())
    assert data["PORTAL_ENV"] == "production"


def test_config_map_and_secret_make_a_valid_production_configuration(tmp_path: Path) -> None:
    """The ConfigMap plus the secret example (placeholders filled) pass the settings' strict
    readers and ``manage.py check --deploy`` with no warnings, in a fresh process."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PORTAL_", "DJANGO_"))}
    for key in (*SECRET_KEYS, "DEBUG", "ALLOWED_HOSTS", "LOG_LEVEL", "LANGUAGE_CODE", "TIME_ZONE"):
        env.pop(key, None)
    env.update(of_kind("ConfigMap")["gpu-vm-portal"]["data"])
    (secret,) = load(DEPLOY / "secret-example.yaml")
    filled = {key: re.sub(r"<[^>]*>", "example", value) for key, value in secret["stringData"].items()}
    filled["SECRET_KEY"] = "k8s-deploy-test-" + "abcdefghijklmnopqrstuvwxyz0123456789"
    env.update(filled)
    env.update({"PORTAL_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "portal.settings"})
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "System check identified no issues (0 silenced).\n"


# --- manage.py team_rbac --------------------------------------------------------------------------


def run_team_rbac(*args: str) -> tuple[str, list[dict[str, Any]]]:
    out = io.StringIO()
    call_command("team_rbac", *args, stdout=out)
    text = out.getvalue()
    return text, [doc for doc in yaml.safe_load_all(text) if doc is not None]


def expected_team_objects(
    namespace: str,
    teams: str,
    sa: tuple[str, str] = (NS, "gpu-vm-portal"),
    web: tuple[str, str] = (NS, "gpu-vm-portal-web"),
) -> list[dict[str, Any]]:
    meta = {
        "namespace": namespace,
        "labels": {
            "app.kubernetes.io/name": "gpu-vm-portal",
            "app.kubernetes.io/part-of": "gpu-vm-portal",
            "app.kubernetes.io/component": "team-rbac",
        },
        "annotations": {"gpu-vm-portal.io/teams": teams},
    }
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "gpu-vm-portal-vmis", **meta},
            "rules": [
                {
                    "apiGroups": ["kubevirt.io"],
                    "resources": ["virtualmachineinstances"],
                    "verbs": ["get", "create", "delete"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "gpu-vm-portal-vmis", **meta},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "gpu-vm-portal-vmis",
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa[1], "namespace": sa[0]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "gpu-vm-portal-web-vmis", **meta},
            "rules": [
                {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances"], "verbs": ["get"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "gpu-vm-portal-web-vmis", **meta},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "gpu-vm-portal-web-vmis",
            },
            "subjects": [{"kind": "ServiceAccount", "name": web[1], "namespace": web[0]}],
        },
    ]


@pytest.fixture
def teams(db: None) -> None:
    Team.objects.create(name="Quant", slug="quant", namespace="team-quant")
    Team.objects.create(name="Quant research", slug="quant-research", namespace="team-quant")
    Team.objects.create(name="Risk", slug="risk", namespace="team-risk")


def test_team_rbac_prints_one_role_and_binding_per_team_namespace(teams: None) -> None:
    text, docs = run_team_rbac()
    assert docs == [
        *expected_team_objects("team-quant", "quant,quant-research"),
        *expected_team_objects("team-risk", "risk"),
    ]
    assert text.startswith(
        "# gpu-vm-portal: VMI rights of gpu-vm-portal/gpu-vm-portal in 2 team namespace(s). "
        "Generated by manage.py team_rbac.\n---\n"
    )
    assert "&id" not in text and "*id" not in text  # no YAML anchors: kubectl-friendly plain YAML
    for doc in docs:
        if doc["kind"] == "Role":
            assert_no_wildcards(doc)


def test_team_rbac_for_one_team_with_its_namespace_and_another_service_account(teams: None) -> None:
    _text, docs = run_team_rbac("--team", "risk", "--with-namespaces", "--service-account", "portal/robot")
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "team-risk",
            "labels": {
                "app.kubernetes.io/name": "gpu-vm-portal",
                "app.kubernetes.io/part-of": "gpu-vm-portal",
                "app.kubernetes.io/component": "team-rbac",
            },
            "annotations": {"gpu-vm-portal.io/teams": "risk"},
        },
    }
    assert docs == [namespace, *expected_team_objects("team-risk", "risk", ("portal", "robot"))]
    _text, docs = run_team_rbac("--team", "quant", "--team", "risk")
    assert [(d["kind"], d["metadata"]["namespace"]) for d in docs] == [
        ("Role", "team-quant"),
        ("RoleBinding", "team-quant"),
        ("Role", "team-quant"),
        ("RoleBinding", "team-quant"),
        ("Role", "team-risk"),
        ("RoleBinding", "team-risk"),
        ("Role", "team-risk"),
        ("RoleBinding", "team-risk"),
    ]
    assert docs[0]["metadata"]["annotations"] == {"gpu-vm-portal.io/teams": "quant"}


def test_team_rbac_refuses_unknown_teams_and_bad_service_accounts(teams: None) -> None:
    with pytest.raises(CommandError, match=r"^no team with slug nope, zzz$"):
        run_team_rbac("--team", "zzz", "--team", "quant", "--team", "nope")
    for bad in ("robot", "/robot", "portal/", "a/b/c"):
        with pytest.raises(CommandError, match="use NAMESPACE/NAME"):
            run_team_rbac("--service-account", bad)
        with pytest.raises(CommandError, match=r"^--web-service-account .*use NAMESPACE/NAME"):
            run_team_rbac("--web-service-account", bad)


def test_team_rbac_without_teams(db: None) -> None:
    with pytest.raises(CommandError, match=r"^there are no teams yet"):
        run_team_rbac()


def test_team_rbac_rules_are_the_command_constant() -> None:
    assert expected_team_objects("x", "y")[0]["rules"] == team_rbac.TEAM_ROLE_RULES
    assert expected_team_objects("x", "y")[2]["rules"] == team_rbac.WEB_ROLE_RULES
    assert f"{NS}/gpu-vm-portal-web" == team_rbac.DEFAULT_WEB_SERVICE_ACCOUNT
    assert f"{NS}/gpu-vm-portal" == team_rbac.DEFAULT_SERVICE_ACCOUNT
