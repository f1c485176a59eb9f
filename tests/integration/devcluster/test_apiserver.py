"""The dev cluster's real kube-apiserver: version, CRDs, REST semantics, RBAC, TokenRequest, cleanup.

Tests marked ``integration`` run against the session cluster (``devcluster`` fixture). The
others check build-cache and error-message logic without building or starting anything.
No test needs Django or its database. Expected values come from DEVCLUSTER.md sections 2.5,
4 and 5 and were confirmed against the running server.
"""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devcluster import build
from devcluster.build import Binaries, BuildError, GoMissingError
from devcluster.server import (
    LIMITED_USER,
    DevCluster,
    PortInUseError,
    Ports,
    crd_conditions,
    port_in_use_message,
    reap_stale,
    temp_state_dir,
)

KUBEVIRT = ("kubevirt.io", "v1")
VMI_PLURAL = "virtualmachineinstances"
EXPECTED_CRDS = {
    "clusterpolicies.nvidia.com",
    "kubevirts.kubevirt.io",
    "virtualmachineinstances.kubevirt.io",
    "virtualmachines.kubevirt.io",
}


def _sample_vmi(cluster: DevCluster, namespace: str) -> dict[str, Any]:
    """The shared passthrough VMI sample, renamed uniquely into ``namespace``."""
    path = cluster.shared_dir / "samples" / "vmi-gpu-passthrough-example.yaml"
    vmi: dict[str, Any] = yaml.safe_load(path.read_text())
    vmi["metadata"]["namespace"] = namespace
    vmi["metadata"]["name"] = f"vmi-{uuid.uuid4().hex[:8]}"
    return vmi


def _status(exc: ApiException) -> tuple[int, str]:
    """The HTTP status and the apiserver's ``Status.message`` of a failed call."""
    return int(exc.status or 0), str(json.loads(exc.body or "{}")["message"])


def _create_vmi(api: k8s.ApiClient, vmi: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    created = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        *KUBEVIRT, vmi["metadata"]["namespace"], VMI_PLURAL, vmi, **kwargs
    )
    return cast(dict[str, Any], created)


# ----------------------------------------------------------------------------- against the real server


@pytest.mark.integration
def test_version_is_stamped(k8s_api: k8s.ApiClient) -> None:
    info = k8s.VersionApi(k8s_api).get_code()
    assert (info.git_version, info.major, info.minor, info.git_tree_state) == ("v1.37.2", "1", "37", "clean")


@pytest.mark.integration
def test_crds_established(k8s_api: k8s.ApiClient) -> None:
    ext = k8s.ApiextensionsV1Api(k8s_api)
    names = {crd.metadata.name for crd in ext.list_custom_resource_definition().items if crd.metadata}
    assert names == EXPECTED_CRDS
    for name in sorted(EXPECTED_CRDS):
        conds = crd_conditions(ext.read_custom_resource_definition(name))
        assert (conds["Established"], conds["NamesAccepted"]) == ("True", "True"), name


@pytest.mark.integration
def test_vmi_strategic_merge_patch_is_415(
    devcluster: DevCluster, k8s_api: k8s.ApiClient, k8s_namespace: str
) -> None:
    vmi = _create_vmi(k8s_api, _sample_vmi(devcluster, k8s_namespace))
    with pytest.raises(ApiException) as err:
        k8s.CustomObjectsApi(k8s_api).patch_namespaced_custom_object(
            *KUBEVIRT,
            k8s_namespace,
            VMI_PLURAL,
            vmi["metadata"]["name"],
            {"metadata": {"labels": {"a": "b"}}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert _status(err.value) == (
        415,
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
    )
    # The same body as a JSON merge patch (the client's default for custom objects) works.
    patched = cast(
        dict[str, Any],
        k8s.CustomObjectsApi(k8s_api).patch_namespaced_custom_object(
            *KUBEVIRT,
            k8s_namespace,
            VMI_PLURAL,
            vmi["metadata"]["name"],
            {"metadata": {"labels": {"a": "b"}}},
        ),
    )
    assert patched["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-vm-portal", "a": "b"}


@pytest.mark.integration
def test_replace_with_stale_resource_version_is_409(
    devcluster: DevCluster, k8s_api: k8s.ApiClient, k8s_namespace: str
) -> None:
    custom = k8s.CustomObjectsApi(k8s_api)
    vmi = _create_vmi(k8s_api, _sample_vmi(devcluster, k8s_namespace))
    name = vmi["metadata"]["name"]
    stale = copy.deepcopy(vmi)
    bumped = cast(
        dict[str, Any],
        custom.patch_namespaced_custom_object(
            *KUBEVIRT, k8s_namespace, VMI_PLURAL, name, {"metadata": {"labels": {"bump": "1"}}}
        ),
    )
    assert bumped["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    stale["metadata"]["labels"]["lost"] = "update"
    with pytest.raises(ApiException) as err:
        custom.replace_namespaced_custom_object(*KUBEVIRT, k8s_namespace, VMI_PLURAL, name, stale)
    assert _status(err.value) == (
        409,
        f'Operation cannot be fulfilled on virtualmachineinstances.kubevirt.io "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
    )
    # PUT without any resourceVersion: CRs do not allow unconditional update (pitfall 5.2) -> 422.
    del stale["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as err:
        custom.replace_namespaced_custom_object(*KUBEVIRT, k8s_namespace, VMI_PLURAL, name, stale)
    assert _status(err.value) == (
        422,
        f'virtualmachineinstances.kubevirt.io "{name}" is invalid: '
        "metadata.resourceVersion: Invalid value: 0: must be specified for an update",
    )


@pytest.mark.integration
def test_vmi_unknown_field_rejected_under_strict(
    devcluster: DevCluster, k8s_api: k8s.ApiClient, k8s_namespace: str
) -> None:
    vmi = _sample_vmi(devcluster, k8s_namespace)
    vmi["spec"]["domain"]["gpuCount"] = 1
    with pytest.raises(ApiException) as err:
        _create_vmi(k8s_api, vmi, field_validation="Strict")
    assert _status(err.value) == (
        400,
        'VirtualMachineInstance in version "v1" cannot be handled as a VirtualMachineInstance: '
        'strict decoding error: unknown field "spec.domain.gpuCount"',
    )
    # Default (Warn): the same object is accepted and the field silently pruned (section 4).
    created = _create_vmi(k8s_api, vmi)
    assert "gpuCount" not in created["spec"]["domain"]


@pytest.mark.integration
def test_node_create_and_label_patch(k8s_api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(k8s_api)
    name = f"node-{uuid.uuid4().hex[:8]}"
    core.create_node(
        k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name}))
    )
    core.patch_node(name, {"metadata": {"labels": {"nvidia.com/gpu.workload.config": "vm-passthrough"}}})
    node = core.read_node(name)
    assert node.metadata is not None and node.spec is not None
    assert node.metadata.labels == {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.workload.config": "vm-passthrough",
    }
    # TaintNodesByCondition is disabled, so no not-ready taint is added (pitfall 5.6).
    assert node.spec.taints is None
    listed = core.list_node(label_selector="nvidia.com/gpu.workload.config=vm-passthrough").items
    assert name in {n.metadata.name for n in listed if n.metadata}


@pytest.mark.integration
def test_limited_identity_rbac(devcluster: DevCluster, k8s_namespace: str) -> None:
    limited = k8s.CoreV1Api(devcluster.api_client(limited=True))
    _nodes, http_status, _headers = limited.list_node_with_http_info()
    assert http_status == 200
    with pytest.raises(ApiException) as err:
        limited.list_namespaced_pod(k8s_namespace)
    assert _status(err.value) == (
        403,
        f'pods is forbidden: User "{LIMITED_USER}" cannot list resource "pods" in API group "" '
        f'in the namespace "{k8s_namespace}"',
    )


@pytest.mark.integration
def test_token_request_for_service_account(
    devcluster: DevCluster, k8s_api: k8s.ApiClient, k8s_namespace: str
) -> None:
    core = k8s.CoreV1Api(k8s_api)
    core.create_namespaced_service_account(
        k8s_namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="robot"))
    )
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    status = core.create_namespaced_service_account_token("robot", k8s_namespace, request).status
    assert status is not None and status.token is not None
    token = status.token
    assert token.count(".") == 2  # a JWT signed with the cluster's SA key
    as_robot = k8s.CoreV1Api(devcluster.api_client_for_token(token))
    with pytest.raises(ApiException) as err:
        as_robot.list_namespaced_secret(k8s_namespace)
    # 403, not 401: the token authenticated as the ServiceAccount, which RBAC grants nothing.
    assert _status(err.value) == (
        403,
        f'secrets is forbidden: User "system:serviceaccount:{k8s_namespace}:robot" cannot list resource '
        f'"secrets" in API group "" in the namespace "{k8s_namespace}"',
    )


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.integration
def test_stop_leaves_no_processes(devcluster: DevCluster) -> None:
    state = temp_state_dir("devcluster-stoptest-")
    assert devcluster.binaries is not None
    cluster = DevCluster(state_dir=state, binaries=devcluster.binaries, install_crds=False)
    try:
        cluster.start()
        pids = cluster.pids
        assert set(pids) == {"etcd", "kube-apiserver"}
        assert sorted(_processes_mentioning(str(state))) == sorted(pids.values())
        assert k8s.VersionApi(cluster.api_client()).get_code().git_version == "v1.37.2"
    finally:
        cluster.stop()
    cluster.stop()  # idempotent
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists(), pid
    assert _processes_mentioning(str(state)) == []
    assert not (state / "pids.json").exists()
    shutil.rmtree(state)


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


_CRASHING_RUNNER = """
import json, sys, time
from pathlib import Path
from devcluster.build import Binaries
from devcluster.server import DevCluster
bins = Binaries(Path(sys.argv[2]), Path(sys.argv[3]))
cluster = DevCluster(state_dir=Path(sys.argv[1]), binaries=bins, install_crds=False).start()
print(json.dumps(cluster.pids), flush=True)
time.sleep(600)
"""


@pytest.mark.integration
def test_components_die_with_a_killed_runner(devcluster: DevCluster) -> None:
    """SIGKILL of the Python process (no atexit, no finally) still takes etcd and the apiserver down."""
    state = temp_state_dir("devcluster-killtest-")
    assert devcluster.binaries is not None
    bins = devcluster.binaries
    env = {**os.environ, "PYTHONPATH": str(Path(build.__file__).resolve().parents[1])}
    runner = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_RUNNER, str(state), str(bins.kube_apiserver), str(bins.etcd)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert runner.stdout is not None
        pids: dict[str, int] = json.loads(runner.stdout.readline())
        assert set(pids) == {"etcd", "kube-apiserver"} and all(_alive(p) for p in pids.values())
        runner.kill()
        runner.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {name: _alive(pid) for name, pid in pids.items()} == {"etcd": False, "kube-apiserver": False}
    finally:
        runner.kill()
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.parametrize("victim", ["etcd_client", "apiserver"])
def test_port_grabbed_after_pick_is_retried(
    devcluster: DevCluster, monkeypatch: pytest.MonkeyPatch, victim: str
) -> None:
    """Another process binds a port between our pick and the component's bind: start retries."""
    state = temp_state_dir("devcluster-racetest-")
    assert devcluster.binaries is not None
    out = io.StringIO()
    cluster = DevCluster(state_dir=state, binaries=devcluster.binaries, install_crds=False, log=out)
    picks: list[Ports] = []
    real_pick = DevCluster._pick_ports
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()

        def pick(self: DevCluster) -> Ports:
            ports = real_pick(self)
            if not picks:
                setattr(ports, victim, squatter.getsockname()[1])
            picks.append(ports)
            return ports

        monkeypatch.setattr(DevCluster, "_pick_ports", pick)
        try:
            cluster.start()
            assert len(picks) == 2
            assert cluster.server == f"https://127.0.0.1:{picks[1].apiserver}"
            assert k8s.VersionApi(cluster.api_client()).get_code().git_version == "v1.37.2"
        finally:
            cluster.stop()
            shutil.rmtree(state)
    taken = getattr(picks[0], victim)
    assert f"port {taken} was taken while starting (attempt 1); retrying" in out.getvalue()


# ----------------------------------------------------------------------------- no cluster needed


def test_port_taken_message(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        fake = Binaries(kube_apiserver=tmp_path / "missing", etcd=tmp_path / "missing")
        cluster = DevCluster(
            state_dir=tmp_path / "state", binaries=fake, apiserver_port=port, install_crds=False
        )
        with pytest.raises(PortInUseError) as err:
            cluster.start()
    assert str(err.value) == port_in_use_message(port)
    assert str(err.value).startswith(f"port 127.0.0.1:{port} is already in use")
    assert f"ss -ltnp 'sport = :{port}'" in str(err.value)
    assert not (tmp_path / "state").exists()  # nothing was started or written


def test_reap_stale_kills_only_leftovers_of_this_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    # Stand-ins for an etcd left by a SIGKILLed run (its argv names the state dir) and for an
    # unrelated process that happens to have a recorded pid (argv does not).
    leftover = subprocess.Popen(["sh", "-c", f"sleep 600; : {state}"], start_new_session=True)
    unrelated = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        (state / "pids.json").write_text(json.dumps({"etcd": leftover.pid, "kube-apiserver": unrelated.pid}))
        assert reap_stale(state) == [leftover.pid]
        assert leftover.wait(timeout=10) == -signal.SIGKILL
        assert unrelated.poll() is None
        assert not (state / "pids.json").exists()
    finally:
        for proc in (leftover, unrelated):
            proc.kill()
            proc.wait()


def test_cache_key_changes_with_each_input() -> None:
    base = build.cache_key(b"sum", b"mod", "go version go1.26.8 linux/amd64\n")
    assert len(base) == 16 and int(base, 16) >= 0
    assert base == build.cache_key(b"sum", b"mod", "go version go1.26.8 linux/amd64")
    variants = {
        build.cache_key(b"sum2", b"mod", "go version go1.26.8 linux/amd64"),
        build.cache_key(b"sum", b"mod2", "go version go1.26.8 linux/amd64"),
        build.cache_key(b"sum", b"mod", "go version go1.26.9 linux/amd64"),
        build.cache_key(b"summod", b"", "go version go1.26.8 linux/amd64"),  # no ambiguous concatenation
    }
    assert base not in variants and len(variants) == 4


def test_cache_dir_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEVCLUSTER_CACHE", str(tmp_path / "c"))
    version = "go version go1.26.8 linux/amd64"
    gotools = build.GOTOOLS_DIR
    key = build.cache_key((gotools / "go.sum").read_bytes(), (gotools / "go.mod").read_bytes(), version)
    assert build.binary_dir(go_version=version) == tmp_path / "c" / key / "bin"
    assert build.cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/gpu-vm-portal/devcluster")
    assert build.cache_root({}) == Path.home() / ".cache" / "gpu-vm-portal" / "devcluster"


def test_tool_versions_and_ldflags() -> None:
    versions = build.tool_versions((build.GOTOOLS_DIR / "go.mod").read_text())
    assert versions == build.ToolVersions(kubernetes="v1.37.2", etcd="v3.7.0")
    pkg = "k8s.io/component-base/version"
    assert build.apiserver_ldflags("v1.37.2") == (
        f"-s -w -X {pkg}.gitVersion=v1.37.2 -X {pkg}.gitMajor=1 "
        f"-X {pkg}.gitMinor=37 -X {pkg}.gitTreeState=clean"
    )
    assert build.parse_go_version("go version go1.26.8 linux/amd64") == (1, 26, 8)
    assert build.parse_go_version("go version go1.27rc1 linux/amd64") == (1, 27, 0)


def test_cached_binaries_are_reused_without_building(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEVCLUSTER_CACHE", str(tmp_path))
    monkeypatch.delenv("DEVCLUSTER_BIN_DIR", raising=False)
    monkeypatch.setattr(build, "go_version_output", lambda: "go version go1.26.8 linux/amd64")

    def no_build(*args: object) -> None:
        raise AssertionError("must not build")

    monkeypatch.setattr(build, "_go_build", no_build)
    bin_dir = build.binary_dir(go_version="go version go1.26.8 linux/amd64")
    bin_dir.mkdir(parents=True)
    for name in ("kube-apiserver", "etcd"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    assert build.ensure_binaries() == Binaries(bin_dir / "kube-apiserver", bin_dir / "etcd")


def test_bin_dir_override_needs_no_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no go anywhere
    monkeypatch.setenv("DEVCLUSTER_BIN_DIR", str(tmp_path))
    with pytest.raises(BuildError) as err:
        build.ensure_binaries()
    assert str(err.value) == (
        f"DEVCLUSTER_BIN_DIR={tmp_path} lacks executable(s): {tmp_path / 'kube-apiserver'}, {tmp_path / 'etcd'}"
    )
    for name in ("kube-apiserver", "etcd"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    assert build.ensure_binaries() == Binaries(tmp_path / "kube-apiserver", tmp_path / "etcd")


def test_failed_build_leaves_no_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEVCLUSTER_CACHE", str(tmp_path))
    monkeypatch.delenv("DEVCLUSTER_BIN_DIR", raising=False)
    monkeypatch.setattr(build, "go_version_output", lambda: "go version go1.26.8 linux/amd64")
    # A "compiler" that writes half a binary, then fails.
    monkeypatch.setattr(
        build,
        "build_command",
        lambda pkg, out, ldflags: ["sh", "-c", f"echo half > '{out}'; echo boom >&2; exit 3"],
    )
    with pytest.raises(BuildError) as err:
        build.ensure_binaries(log=open(os.devnull, "w"))  # noqa: SIM115
    assert "go build of kube-apiserver failed (exit 3)" in str(err.value)
    assert "boom" in str(err.value)
    bin_dir = build.binary_dir(go_version="go version go1.26.8 linux/amd64")
    assert sorted(p.name for p in bin_dir.iterdir()) == []


def test_concurrent_callers_build_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEVCLUSTER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DEVCLUSTER_BIN_DIR", raising=False)
    monkeypatch.setattr(build, "go_version_output", lambda: "go version go1.26.8 linux/amd64")
    calls = tmp_path / "calls"
    # A "compiler" that records each invocation and takes a moment, so the callers overlap.
    monkeypatch.setattr(
        build,
        "build_command",
        lambda pkg, out, ldflags: ["sh", "-c", f"echo {pkg} >> '{calls}'; sleep 0.5; printf bin > '{out}'"],
    )
    results: list[Binaries] = []
    with open(os.devnull, "w") as quiet:
        threads = [
            threading.Thread(target=lambda: results.append(build.ensure_binaries(log=quiet)))
            for _ in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert len(results) == 3 and len(set(results)) == 1
    assert calls.read_text().split() == ["k8s.io/kubernetes/cmd/kube-apiserver", "go.etcd.io/etcd/server/v3"]
    assert results[0].kube_apiserver.read_text() == "bin"


def test_go_missing_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GoMissingError) as err:
        build.go_version_output()
    message = str(err.value)
    assert "('go') was not found on PATH" in message
    assert "Go >= 1.26 from https://go.dev/dl/" in message
    assert "'golang-go': it is too old" in message
