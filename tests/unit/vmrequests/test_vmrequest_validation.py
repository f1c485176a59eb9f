"""``vmrequests.validation.validate``: every request rule, one draft it accepts and one it refuses
with the exact field, code and message (module docstring of ``vmrequests/validation.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission

from portal import k8s
from tests.factories import portal_user, stored_node, stored_resource
from tests.fake_k8s import FakeCluster
from tests.vmrequest_factories import (
    A10_PT,
    A100_PT,
    T4_8Q,
    request_form_inventory,
    ssh_public_key,
    stored_image,
    stored_request,
    stored_team,
)
from vmrequests import vm_names
from vmrequests.models import GpuQuota
from vmrequests.provisioning import ownership
from vmrequests.validation import RequestDraft, RequestInvalid, RequestSpec, validate

pytestmark = pytest.mark.django_db

KEY = ssh_public_key("ed25519")
OFFERED_PT = f"Offered for passthrough: {A100_PT}."


@pytest.fixture
def w() -> dict[str, Any]:
    """``request_form_inventory``; ``ana`` member of quant (leases 7 by default, at most 30),
    ``olga`` of research; images Ubuntu 22.04 (at least 8 GiB, defaults 4 cores / 16 GiB) and a
    disabled Windows 95."""
    request_form_inventory()
    ana, olga = portal_user("analyst", "ana"), portal_user("analyst", "olga")
    return {
        "ana": ana,
        "olga": olga,
        "quant": stored_team("quant", members=(ana,)),
        "research": stored_team("research", members=(olga,)),
        "ubuntu": stored_image("Ubuntu 22.04"),
        "windows": stored_image("Windows 95", enabled=False),
    }


def draft(**overrides: Any) -> RequestDraft:
    """A valid draft for ana: 2 A100s in quant, 8 cores, 64 GiB, 10 days."""
    values: dict[str, Any] = {
        "team": "quant",
        "mode": "passthrough",
        "image": "Ubuntu 22.04",
        "resource_name": A100_PT,
        "device_count": 2,
        "cpu_cores": 8,
        "memory_gib": 64,
        "lease_days": 10,
        "ssh_public_key": KEY,
        "justification": "Fine-tune the Q3 risk model.",
    }
    values.update(overrides)
    return RequestDraft(**values)


def refused(user: Any, d: RequestDraft, **kwargs: Any) -> dict[str | None, list[tuple[str, str]]]:
    with pytest.raises(RequestInvalid) as caught:
        validate(user, d, **kwargs)
    return {name: [(e.code, e.message) for e in items] for name, items in caught.value.errors.items()}


# --- the whole spec -----------------------------------------------------------------------------


def test_a_valid_draft_gives_the_exact_spec(w: dict[str, Any]) -> None:
    spec = validate(
        w["ana"],
        draft(
            ssh_public_key=f"\n {KEY}  ",
            justification="  Fine-tune the Q3 risk model. ",
            name="risk-box",
            ticket_source="SNOW",
            ticket_id=" INC1 ",
        ),
    )
    assert spec == RequestSpec(
        team=w["quant"],
        mode="passthrough",
        resource_name=A100_PT,
        vgpu_type="",
        gpu_model="A100 PCIe 40GB",
        device_count=2,
        cpu_cores=8,
        memory_gib=64,
        image=w["ubuntu"],
        ssh_public_key=KEY,
        lease_days=10,
        justification="Fine-tune the Q3 risk model.",
        name="risk-box",
        ticket_source="SNOW",
        ticket_id="INC1",
        requester=w["ana"],
    )


def test_every_error_is_reported_at_once(w: dict[str, Any]) -> None:
    errors = refused(w["ana"], draft(memory_gib=4, lease_days=31, name="Bad_Name", justification="why"))
    assert list(errors) == ["memory_gib", "lease_days", "name", "justification"]


def test_refused_fields_are_skipped_and_not_defaulted(w: dict[str, Any]) -> None:
    """The form passes the fields its parser refused: no second error, no default, no check
    that needs them (capacity needs the count)."""
    d = draft(device_count=None, cpu_cores=None, justification="")
    with pytest.raises(RequestInvalid) as caught:
        validate(w["ana"], d, refused={"device_count", "cpu_cores", "justification"})
    assert caught.value.errors == {}
    assert caught.value.alternatives == []


# --- requested_for ------------------------------------------------------------------------------


def test_requested_for(w: dict[str, Any]) -> None:
    assert validate(w["ana"], draft(requested_for="ana")).requester == w["ana"]
    assert refused(w["ana"], draft(requested_for="olga")) == {
        "requested_for": [
            (
                "not_allowed",
                "Filing a request for another user (requested_for) needs the vmrequests.submit_for_others permission.",
            )
        ]
    }
    svc = portal_user("staff", "servicenow")
    svc.user_permissions.add(Permission.objects.get(codename="submit_for_others"))
    assert validate(svc, draft(requested_for="ana")).requester == w["ana"]
    assert refused(svc, draft(requested_for="ghost")) == {
        "requested_for": [("unknown_user", "There is no active user ghost.")]
    }
    # Membership is the requester's, not the filer's.
    assert refused(svc, draft(requested_for="olga")) == {
        "team": [("invalid_choice", "Choose one of your teams.")]
    }


# --- lengths ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cap"), [("justification", 2000), ("ticket_source", 50), ("ticket_id", 100), ("name", 40)]
)
def test_text_caps(w: dict[str, Any], name: str, cap: int) -> None:
    at_cap = "a" * cap
    assert getattr(validate(w["ana"], draft(**{name: at_cap})), name) == at_cap
    assert refused(w["ana"], draft(**{name: at_cap + "a"})) == {
        name: [("max_length", f"Ensure this value has at most {cap} characters (it has {cap + 1}).")]
    }


def test_ssh_key_caps(w: dict[str, Any]) -> None:
    longest = ssh_public_key("ed25519", "c" * 1024)
    assert validate(w["ana"], draft(ssh_public_key=longest)).ssh_public_key == longest
    assert refused(w["ana"], draft(ssh_public_key=ssh_public_key("ed25519", "c" * 1025))) == {
        "ssh_public_key": [
            (
                "comment_too_long",
                "The key's comment has 1025 characters; at most 1024 are allowed. Shorten it: it is only a label.",
            )
        ]
    }
    huge = ssh_public_key("ed25519", "c" * 9000)
    assert refused(w["ana"], draft(ssh_public_key=huge)) == {
        "ssh_public_key": [
            ("max_length", f"Ensure this value has at most 8192 characters (it has {len(huge)}).")
        ]
    }


# --- team, image, mode --------------------------------------------------------------------------


def test_team(w: dict[str, Any]) -> None:
    assert validate(w["ana"], draft(team=w["quant"].pk)).team == w["quant"]
    assert validate(w["ana"], draft(team=None)).team == w["quant"]  # the only team
    assert refused(w["ana"], draft(team="research")) == {
        "team": [("invalid_choice", "Choose one of your teams.")]
    }
    assert refused(w["ana"], draft(team="nope")) == {
        "team": [("invalid_choice", "Choose one of your teams.")]
    }
    w["research"].approvers.add(w["ana"])  # an approver may request for the team too
    assert validate(w["ana"], draft(team="research", lease_days=None)).team == w["research"]
    assert refused(w["ana"], draft(team=None)) == {
        "team": [("required", "Give the team (slug); ana is in 2 teams.")]
    }


def test_image(w: dict[str, Any]) -> None:
    assert validate(w["ana"], draft(image=w["ubuntu"].pk)).image == w["ubuntu"]
    for ref in ("Windows 95", w["windows"].pk, "nope"):
        assert refused(w["ana"], draft(image=ref)) == {
            "image": [("invalid_choice", "Choose one of the listed images.")]
        }


def test_mode(w: dict[str, Any]) -> None:
    assert validate(w["ana"], draft(mode="vgpu", resource_name=T4_8Q, device_count=1)).mode == "vgpu"
    assert refused(w["ana"], draft(mode="container")) == {
        "mode": [("invalid_choice", "Choose one of: passthrough, vgpu.")]
    }


# --- GPU ----------------------------------------------------------------------------------------


def test_gpu_by_vgpu_type(w: dict[str, Any]) -> None:
    advertised = validate(w["ana"], draft(mode="vgpu", resource_name="", vgpu_type="T4-8Q", device_count=1))
    assert (advertised.resource_name, advertised.vgpu_type, advertised.gpu_model) == (
        T4_8Q,
        "T4-8Q",
        "Tesla T4",
    )
    later = validate(w["ana"], draft(mode="vgpu", resource_name="", vgpu_type="T4-16Q", device_count=1))
    assert (later.resource_name, later.vgpu_type, later.gpu_model) == ("", "T4-16Q", "Tesla T4")


@pytest.mark.parametrize(
    ("overrides", "field", "code", "message"),
    [
        (
            {"vgpu_type": "T4-8Q"},
            "resource_name",
            "gpu",
            "Give either resource_name or vgpu_type (exactly one).",
        ),
        (
            {"resource_name": ""},
            "resource_name",
            "gpu",
            "Give either resource_name or vgpu_type (exactly one).",
        ),
        (
            {"resource_name": "", "vgpu_type": "T4-8Q"},
            "vgpu_type",
            "mode",
            "vgpu_type is only for mode vgpu.",
        ),
        (
            {"resource_name": A10_PT},
            "resource_name",
            "not_permitted",
            f"KubeVirt does not permit {A10_PT} (it is not in permittedHostDevices), so a VM cannot use it. {OFFERED_PT}",
        ),
        (
            {"resource_name": "nvidia.com/gpu"},
            "resource_name",
            "other_mode",
            "nvidia.com/gpu is not a passthrough (whole GPU) GPU. Choose another mode, or one of the listed GPUs. "
            + OFFERED_PT,
        ),
        (
            {"resource_name": "nvidia.com/GH100_H100"},
            "resource_name",
            "unknown_gpu",
            "nvidia.com/GH100_H100 is not in the GPU inventory (or no longer offered). Choose one of the listed GPUs. "
            + OFFERED_PT,
        ),
        (
            {"mode": "vgpu", "resource_name": "", "vgpu_type": "Z9-99Q", "device_count": 1},
            "vgpu_type",
            "unknown_gpu",
            "Z9-99Q is not in the GPU inventory (or no longer offered). Choose one of the listed GPUs. "
            f"Offered for vgpu: T4-16Q (after re-profiling), {T4_8Q}.",
        ),
    ],
)
def test_gpu_refused(
    w: dict[str, Any], overrides: dict[str, Any], field: str, code: str, message: str
) -> None:
    assert refused(w["ana"], draft(**overrides)) == {field: [(code, message)]}


# --- sizes and lease ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "code", "message"),
    [
        ("device_count", 0, "min_value", "Ensure this value is greater than or equal to 1."),
        ("device_count", 9, "max_value", "Ensure this value is less than or equal to 8."),
        ("cpu_cores", 0, "min_value", "Ensure this value is greater than or equal to 1."),
        ("cpu_cores", 65, "max_value", "Ensure this value is less than or equal to 64."),
        ("memory_gib", 1025, "max_value", "Ensure this value is less than or equal to 1024."),
        ("memory_gib", 4, "invalid", "The image Ubuntu 22.04 needs at least 8 GiB of memory."),
        ("lease_days", 0, "min_value", "Ensure this value is greater than or equal to 1."),
        ("lease_days", 31, "max_lease", "Team Quant allows leases of at most 30 days."),
    ],
)
def test_sizes_refused(w: dict[str, Any], name: str, value: int, code: str, message: str) -> None:
    assert refused(w["ana"], draft(**{name: value})) == {name: [(code, message)]}


def test_sizes_accepted_and_defaults(w: dict[str, Any]) -> None:
    spec = validate(w["ana"], draft(device_count=3, cpu_cores=64, memory_gib=8, lease_days=30))
    assert (spec.device_count, spec.cpu_cores, spec.memory_gib, spec.lease_days) == (3, 64, 8, 30)
    spec = validate(w["ana"], draft(cpu_cores=None, memory_gib=None, lease_days=None))
    assert (spec.cpu_cores, spec.memory_gib, spec.lease_days) == (4, 16, 7)


def test_vgpus_per_vm(w: dict[str, Any]) -> None:
    assert validate(w["ana"], draft(mode="vgpu", resource_name=T4_8Q, device_count=1)).device_count == 1
    assert refused(w["ana"], draft(mode="vgpu", resource_name=T4_8Q, device_count=2)) == {
        "device_count": [("per_vm_limit", "NVIDIA allows only one vGPU of type T4-8Q per VM.")]
    }
    # A whole-GPU Q type may be given several times (T4-16Q takes a T4's 16 GB).
    whole = validate(w["ana"], draft(mode="vgpu", resource_name="", vgpu_type="T4-16Q", device_count=2))
    assert whole.device_count == 2


# --- name, key, justification, ticket -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [
        (
            "Risk_Box",
            "invalid",
            "Use lower-case letters, digits and '-', starting and ending with a letter or digit.",
        ),
        (
            "alice-vm-12",
            "reserved",
            "Names ending in -vm-<number> are reserved for generated names; choose another.",
        ),
        (
            "risk-box",
            "name_taken",
            "A VM named risk-box already exists (or is requested) in namespace team-quant.",
        ),
    ],
)
def test_name_refused(w: dict[str, Any], name: str, code: str, message: str) -> None:
    stored_request(w["quant"], w["olga"], w["ubuntu"], vmi_name="risk-box")
    assert refused(w["ana"], draft(name=name)) == {"name": [(code, message)]}


@pytest.fixture
def real_name_check(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    """The cluster question of ``vm_names`` as in production, asked of a fake cluster."""
    cluster = FakeCluster.install(monkeypatch)
    monkeypatch.setattr(vm_names, "foreign_vmi_named", ownership.foreign_vmi_named)
    return cluster


def test_name_of_a_foreign_vmi_is_refused(w: dict[str, Any], real_name_check: FakeCluster) -> None:
    """#14 finding 1: a name that is a hand-made VMI in the team's namespace is refused at submit;
    one of the portal's own VMIs (an ended request's, still finalising) is not a reason to refuse."""
    real_name_check.add_vmi("team-quant", "shared-box", {"app": "notebook"})
    real_name_check.add_vmi("team-quant", "old-box", {"app.kubernetes.io/managed-by": "gpu-vm-portal"})
    message = (
        "Namespace team-quant already has a VirtualMachineInstance named shared-box that the portal "
        "did not create; choose another name."
    )
    assert refused(w["ana"], draft(name="shared-box")) == {"name": [("foreign_vmi", message)]}
    assert validate(w["ana"], draft(name="old-box")).name == "old-box"
    assert real_name_check.calls[-2:] == [
        ("get_vmi", "team-quant", "shared-box"),
        ("get_vmi", "team-quant", "old-box"),
    ]


def test_name_refused_when_the_cluster_cannot_be_asked(
    w: dict[str, Any], real_name_check: FakeCluster
) -> None:
    real_name_check.fail("get_vmi", k8s.K8sTransientError("Kubernetes API 503"))
    message = (
        "The cluster could not be asked whether namespace team-quant already has a VirtualMachineInstance "
        "named free-box; try again in a minute or leave the name empty."
    )
    assert refused(w["ana"], draft(name="free-box")) == {"name": [("cluster_unreachable", message)]}
    # Without a name the cluster is not asked (a generated name is the request's own).
    assert validate(w["ana"], draft(name="")).name == ""
    assert real_name_check.names() == ["get_vmi"]


def test_name_accepted(w: dict[str, Any]) -> None:
    stored_request(w["quant"], w["olga"], w["ubuntu"], vmi_name="old-box", status="deleted")
    stored_request(w["research"], w["olga"], w["ubuntu"], vmi_name="their-box")
    assert [validate(w["ana"], draft(name=n)).name for n in ("", "old-box", "their-box")] == [
        "",
        "old-box",
        "their-box",
    ]


@pytest.mark.parametrize(
    ("key", "code", "message"),
    [
        ("", "empty", "Paste your SSH public key."),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----",
            "private",
            "This is a PRIVATE key: never share it. Paste the public key instead (the .pub file, "
            "e.g. ~/.ssh/id_ed25519.pub), and consider this private key exposed.",
        ),
        (
            "ssh-dss AAAA",
            "dsa",
            "DSA keys (ssh-dss) are insecure and disabled by OpenSSH. Use an Ed25519 key.",
        ),
    ],
)
def test_ssh_key_refused(w: dict[str, Any], key: str, code: str, message: str) -> None:
    assert refused(w["ana"], draft(ssh_public_key=key)) == {"ssh_public_key": [(code, message)]}


@pytest.mark.parametrize(("text", "code"), [("", "required"), ("  why ", "min_length")])
def test_justification_refused(w: dict[str, Any], text: str, code: str) -> None:
    assert refused(w["ana"], draft(justification=text)) == {
        "justification": [(code, "Say in a sentence why you need this VM (at least 5 characters).")]
    }
    assert validate(w["ana"], draft(justification=" Why not? ")).justification == "Why not?"


def test_ticket(w: dict[str, Any]) -> None:
    # Tickets are per filing account (#14 finding 3): olga's INC7 does not block ana's.
    stored_request(w["research"], w["olga"], w["ubuntu"], ticket_source="SNOW", ticket_id="INC7")
    assert validate(w["ana"], draft(ticket_source="SNOW", ticket_id="INC7")).ticket_id == "INC7"
    stored_request(w["quant"], w["ana"], w["ubuntu"], ticket_source="SNOW", ticket_id="INC7")
    assert refused(w["ana"], draft(ticket_source="SNOW", ticket_id="INC7")) == {
        "ticket_id": [("duplicate", "Ticket INC7 already has a VM request.")]
    }
    assert validate(w["ana"], draft(ticket_source="JIRA", ticket_id="INC7")).ticket_id == "INC7"


# --- capacity and quota -------------------------------------------------------------------------


def test_capacity(w: dict[str, Any]) -> None:
    assert validate(w["ana"], draft(device_count=3)).resource_name == A100_PT
    with pytest.raises(RequestInvalid) as caught:
        validate(w["ana"], draft(device_count=4))
    assert caught.value.codes() == {None: ["invalid"]}
    assert [e.message for e in caught.value.errors[None]] == [
        "No single node has 4 free A100 PCIe 40GB; the most free on one node is 3."
    ]
    assert [a.describe() for a in caught.value.alternatives] == [
        "3 × A100 PCIe 40GB — Runs now on p1 (3 free there)."
    ]


def test_quota(w: dict[str, Any]) -> None:
    GpuQuota.objects.create(team=w["quant"], mode="", gpu="", max_devices=3)
    stored_request(w["quant"], w["ana"], w["ubuntu"], status="running", device_count=2)
    assert validate(w["ana"], draft(device_count=1)).device_count == 1
    with pytest.raises(RequestInvalid) as caught:
        validate(w["ana"], draft(device_count=2))
    assert {k: [(e.code, e.message) for e in v] for k, v in caught.value.errors.items()} == {
        None: [
            ("quota", "Your team's quota for any GPU is 3 devices and 2 are held; this request needs 2 more.")
        ]
    }
    assert [a.describe() for a in caught.value.alternatives] == [
        "1 × A100 PCIe 40GB — Runs now on p1 (3 free there)."
    ]


def test_nothing_free_of_a_gpu_with_no_reprofile(w: dict[str, Any]) -> None:
    p3 = stored_node("p3", "vm-passthrough", gpu_model="RTX A2000 12GB", gpu_count=1)
    stored_resource(p3, "nvidia.com/GA106_RTX_A2000_12GB", 1, used=1, model="RTX A2000 12GB", permitted=True)
    assert refused(w["ana"], draft(resource_name="nvidia.com/GA106_RTX_A2000_12GB", device_count=1)) == {
        None: [("invalid", "All RTX A2000 12GB GPUs are in use or reserved right now.")]
    }
