"""The new-request form (vmrequests/forms.py) on good and bad input, over stored inventory rows."""

from __future__ import annotations

from typing import Any

import pytest
from django import forms

from tests.factories import portal_user, stored_node, stored_resource
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
from vmrequests.approval import RequestSpec
from vmrequests.forms import VMRequestForm, initial_from
from vmrequests.models import GpuQuota

pytestmark = pytest.mark.django_db

KEY = ssh_public_key("ed25519")


@pytest.fixture
def world() -> dict[str, Any]:
    """The inventory of ``request_form_inventory``, an analyst in team quant (namespace
    team-quant, leases 7 by default, at most 30), another team, and two images."""
    request_form_inventory()
    analyst = portal_user("analyst")
    quant = stored_team("quant", members=(analyst,))
    other = stored_team("other")
    ubuntu = stored_image("Ubuntu 22.04")
    rocky = stored_image(
        "Rocky 9",
        image="quay.io/containerdisks/rockylinux:9",
        os="Rocky Linux 9",
        min_memory_gib=4,
        default_cpu_cores=2,
        default_memory_gib=8,
    )
    return {"user": analyst, "team": quant, "other": other, "ubuntu": ubuntu, "rocky": rocky}


def data(world: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "team": world["team"].pk,
        "mode": "passthrough",
        "image": world["ubuntu"].pk,
        "gpu": A100_PT,
        "device_count": 2,
        "cpu_cores": 8,
        "memory_gib": 64,
        "lease_days": 10,
        "name": "",
        "ssh_public_key": KEY,
        "justification": "Fine-tune a model for the Q3 risk report.",
        "ticket_id": "",
    }
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


def form_for(world: dict[str, Any], **overrides: Any) -> VMRequestForm:
    return VMRequestForm(world["user"], data=data(world, **overrides))


def errors(form: VMRequestForm) -> dict[str, list[str]]:
    assert not form.is_valid()
    return {k: [str(e) for e in v] for k, v in form.errors.items()}


def gpu_choices(form: VMRequestForm) -> list[tuple[str, str]]:
    field = form.fields["gpu"]
    assert isinstance(field, forms.ChoiceField)
    return [(str(value), str(label)) for value, label in field.widget.choices]


def team_choices(form: VMRequestForm) -> list[tuple[str, str]]:
    field = form.fields["team"]
    assert isinstance(field, forms.ChoiceField)
    return [(str(value), str(label)) for value, label in field.widget.choices]


# --- good input ---------------------------------------------------------------------------------


def test_good_passthrough_request_gives_the_exact_spec(world: dict[str, Any]) -> None:
    form = form_for(world, name="risk-box", ticket_id="JIRA-7", ssh_public_key=f"  {KEY}\n")
    assert form.is_valid(), form.errors
    assert form.spec() == RequestSpec(
        team=world["team"],
        mode="passthrough",
        resource_name=A100_PT,
        vgpu_type="",
        gpu_model="A100 PCIe 40GB",
        device_count=2,
        cpu_cores=8,
        memory_gib=64,
        image=world["ubuntu"],
        ssh_public_key=KEY,
        lease_days=10,
        justification="Fine-tune a model for the Q3 risk report.",
        name="risk-box",
        ticket_source="",
        ticket_id="JIRA-7",
        requester=world["user"],
    )
    assert form.alternatives == []


def test_vgpu_request_for_an_advertised_type(world: dict[str, Any]) -> None:
    form = form_for(world, mode="vgpu", gpu=T4_8Q, device_count=1)
    assert form.is_valid(), form.errors
    spec = form.spec()
    assert (spec.mode, spec.resource_name, spec.vgpu_type, spec.gpu_model, spec.device_count) == (
        "vgpu",
        T4_8Q,
        "T4-8Q",
        "Tesla T4",
        1,
    )


def test_reprofile_option_accepted(world: dict[str, Any]) -> None:
    """A type only an idle node could offer after re-profiling: resource name blank, type set."""
    form = form_for(world, mode="vgpu", gpu="vgpu-type:T4-16Q", device_count=2)
    assert form.is_valid(), form.errors
    spec = form.spec()
    assert (spec.resource_name, spec.vgpu_type, spec.gpu_model, spec.device_count) == (
        "",
        "T4-16Q",
        "Tesla T4",
        2,
    )


def test_spec_of_an_invalid_form_raises(world: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="valid form"):
        form_for(world, justification="").spec()


# --- choices and defaults -----------------------------------------------------------------------


def test_choices_come_from_the_inventory_with_free_counts(world: dict[str, Any]) -> None:
    form = VMRequestForm(world["user"], initial={"mode": "vgpu"})
    assert gpu_choices(form) == [
        ("", "Choose a GPU"),
        ("vgpu-type:T4-16Q", "Tesla T4 · T4-16Q: 0 free; available after re-profiling node v2 (2 instances)"),
        (T4_8Q, "Tesla T4 · T4-8Q: 3 free; available after re-profiling node v2 (4 instances)"),
    ]
    passthrough = VMRequestForm(world["user"])
    assert [v for v, _label in gpu_choices(passthrough)] == ["", A100_PT]  # A10 not permitted


def test_team_choices_are_only_the_users_teams(world: dict[str, Any]) -> None:
    approver = portal_user("approver")
    world["other"].approvers.add(approver)
    world["team"].members.add(approver)
    quant, other = (str(world["team"].pk), "Quant"), (str(world["other"].pk), "Other")
    assert team_choices(VMRequestForm(world["user"])) == [("", "Choose a team"), quant]
    assert team_choices(VMRequestForm(approver)) == [("", "Choose a team"), other, quant]
    assert errors(form_for(world, team=world["other"].pk))["team"] == ["Choose one of your teams."]


def test_unbound_defaults(world: dict[str, Any]) -> None:
    form = VMRequestForm(world["user"])
    assert form["team"].value() == world["team"].pk  # the only team is preselected
    assert form["image"].value() == world["rocky"].pk  # the first enabled image by name
    assert (form["cpu_cores"].value(), form["memory_gib"].value()) == (2, 8)
    assert form["lease_days"].value() == 7
    assert form["mode"].value() == "passthrough"
    assert form["gpu"].value() == A100_PT
    assert form["device_count"].value() == 1
    assert form.fields["memory_gib"].widget.attrs["min"] == 4
    assert form.fields["lease_days"].widget.attrs["max"] == 30
    assert form.fields["device_count"].widget.attrs["max"] == 8


def test_two_teams_no_preselection(world: dict[str, Any]) -> None:
    world["other"].members.add(world["user"])
    form = VMRequestForm(world["user"])
    assert form["team"].value() is None
    assert form["lease_days"].value() is None


def test_re_render_keeps_typed_values_and_updates_image_defaults(world: dict[str, Any]) -> None:
    """Changing the image replaces CPU/memory only while they still hold the old defaults."""
    rocky, ubuntu = world["rocky"], world["ubuntu"]
    untouched = data(
        world, image=ubuntu.pk, cpu_cores=2, memory_gib=8, defaults_from=rocky.pk, name="keep-me"
    )
    form = VMRequestForm(world["user"], initial=initial_from(untouched))
    assert (form["cpu_cores"].value(), form["memory_gib"].value(), form["defaults_from"].value()) == (
        4,
        16,
        ubuntu.pk,
    )
    assert form["name"].value() == "keep-me"
    assert form["ssh_public_key"].value() == KEY
    typed = data(world, image=ubuntu.pk, cpu_cores=6, memory_gib=8, defaults_from=rocky.pk)
    form = VMRequestForm(world["user"], initial=initial_from(typed))
    assert (form["cpu_cores"].value(), form["memory_gib"].value()) == (6, 16)
    assert not form.is_bound and form.errors == {}


def test_re_render_for_another_mode_picks_a_gpu_of_that_mode(world: dict[str, Any]) -> None:
    form = VMRequestForm(world["user"], initial=initial_from(data(world, mode="vgpu")))
    assert form["gpu"].value() == T4_8Q  # A100 is not a vGPU option; the first with free devices
    assert form.selected_option is not None and form.selected_option.per_vm_limit == 1
    assert form.fields["device_count"].widget.attrs["max"] == 1


def test_a_pasted_private_key_is_not_sent_back(world: dict[str, Any]) -> None:
    form = form_for(
        world, ssh_public_key="-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----"
    )
    assert not form.is_valid()
    assert form["ssh_public_key"].value() == ""
    assert form["justification"].value()  # everything else typed stays


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "Paste your SSH public key."),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----",
            "This is a PRIVATE key: never share it. Paste the public key instead (the .pub file, "
            "e.g. ~/.ssh/id_ed25519.pub), and consider this private key exposed.",
        ),
        (
            f'command="/bin/sh" {KEY}',
            "authorized_keys options are not allowed: paste only the key, starting with its type (e.g. ssh-ed25519).",
        ),
        (f"{KEY}\n{KEY}", "Paste exactly one public key, on one line."),
        (
            "ssh-ed25519 AAAA",
            "This is not a valid ssh-ed25519 public key: the key body does not parse (was it cut off?).",
        ),
    ],
)
def test_bad_ssh_keys(world: dict[str, Any], key: str, message: str) -> None:
    assert errors(form_for(world, ssh_public_key=key)) == {"ssh_public_key": [message]}


def test_short_rsa_key(world: dict[str, Any]) -> None:
    assert errors(form_for(world, ssh_public_key=ssh_public_key("rsa", bits=1024))) == {
        "ssh_public_key": ["This RSA key has 1024 bits; at least 2048 are required. Use an Ed25519 key."]
    }


def test_memory_below_the_image_minimum(world: dict[str, Any]) -> None:
    assert errors(form_for(world, memory_gib=4)) == {
        "memory_gib": ["The image Ubuntu 22.04 needs at least 8 GiB of memory."]
    }
    assert form_for(world, memory_gib=4, image=world["rocky"].pk).is_valid()


def test_memory_and_cpu_above_the_maximum(world: dict[str, Any]) -> None:
    assert errors(form_for(world, memory_gib=1025, cpu_cores=65)) == {
        "memory_gib": ["Ensure this value is less than or equal to 1024."],
        "cpu_cores": ["Ensure this value is less than or equal to 64."],
    }


def test_lease_longer_than_the_team_allows(world: dict[str, Any]) -> None:
    assert errors(form_for(world, lease_days=31)) == {
        "lease_days": ["Team Quant allows leases of at most 30 days."]
    }
    assert errors(form_for(world, lease_days=0)) == {
        "lease_days": ["Ensure this value is greater than or equal to 1."]
    }


def test_short_justification(world: dict[str, Any]) -> None:
    assert errors(form_for(world, justification="  why ")) == {
        "justification": ["Say in a sentence why you need this VM (at least 5 characters)."]
    }


def test_name_collision_with_a_live_request_in_the_namespace(world: dict[str, Any]) -> None:
    someone = portal_user("analyst", "bob")
    stored_request(world["team"], someone, world["ubuntu"], vmi_name="risk-box")
    assert errors(form_for(world, name="risk-box")) == {
        "name": ["A VM named risk-box already exists (or is requested) in namespace team-quant."]
    }


def test_name_of_a_finished_request_or_another_namespace_is_free(world: dict[str, Any]) -> None:
    someone = portal_user("analyst", "bob")
    stored_request(world["team"], someone, world["ubuntu"], vmi_name="old-box", status="deleted")
    stored_request(world["other"], someone, world["ubuntu"], vmi_name="their-box")
    assert form_for(world, name="old-box").is_valid()
    assert form_for(world, name="their-box").is_valid()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Risk_Box", "Use lower-case letters, digits and '-', starting and ending with a letter or digit."),
        ("-box", "Use lower-case letters, digits and '-', starting and ending with a letter or digit."),
        ("x" * 41, "Ensure this value has at most 40 characters (it has 41)."),
        ("alice-vm-12", "Names ending in -vm-<number> are reserved for generated names; choose another."),
    ],
)
def test_bad_names(world: dict[str, Any], name: str, message: str) -> None:
    assert errors(form_for(world, name=name)) == {"name": [message]}


def test_duplicate_ticket(world: dict[str, Any]) -> None:
    # Tickets are per filing account (#14 finding 3): bob's JIRA-7 is no clash for this user.
    stored_request(world["other"], portal_user("analyst", "bob"), world["ubuntu"], ticket_id="JIRA-7")
    assert form_for(world, ticket_id="JIRA-7").is_valid()
    stored_request(world["team"], world["user"], world["ubuntu"], ticket_id="JIRA-7")
    assert errors(form_for(world, ticket_id="JIRA-7")) == {
        "ticket_id": ["Ticket JIRA-7 already has a VM request."]
    }
    # The same ID from the ticketing system (another source) does not clash with a portal one.
    stored_request(
        world["other"],
        portal_user("analyst", "carol"),
        world["ubuntu"],
        ticket_id="JIRA-8",
        ticket_source="jira",
    )
    assert form_for(world, ticket_id="JIRA-8").is_valid()


def test_unknown_resource(world: dict[str, Any]) -> None:
    assert errors(form_for(world, gpu="nvidia.com/GH100_H100")) == {
        "gpu": [
            "nvidia.com/GH100_H100 is not in the GPU inventory (or no longer offered). Choose one of the listed GPUs. "
            f"Offered for passthrough: {A100_PT}."
        ]
    }


def test_unpermitted_resource(world: dict[str, Any]) -> None:
    assert errors(form_for(world, gpu=A10_PT)) == {
        "gpu": [
            "KubeVirt does not permit nvidia.com/GA102GL_A10 (it is not in permittedHostDevices), so a VM cannot use it. "
            f"Offered for passthrough: {A100_PT}."
        ]
    }


def test_resource_of_another_mode(world: dict[str, Any]) -> None:
    assert errors(form_for(world, mode="vgpu", gpu=A100_PT, device_count=1)) == {
        "gpu": [
            "nvidia.com/GA100_A100_PCIE_40GB is not a vGPU (GPU slice) GPU. Choose another mode, or one of the listed GPUs. "
            f"Offered for vgpu: T4-16Q (after re-profiling), {T4_8Q}."
        ]
    }
    assert errors(form_for(world, gpu="nvidia.com/gpu"))["gpu"] == [
        "nvidia.com/gpu is not a passthrough (whole GPU) GPU. Choose another mode, or one of the listed GPUs. "
        f"Offered for passthrough: {A100_PT}."
    ]


def test_more_than_one_vgpu_of_a_fractional_type(world: dict[str, Any]) -> None:
    assert errors(form_for(world, mode="vgpu", gpu=T4_8Q, device_count=2)) == {
        "device_count": ["NVIDIA allows only one vGPU of type T4-8Q per VM."]
    }


def test_device_count_bounds(world: dict[str, Any]) -> None:
    assert errors(form_for(world, device_count=9)) == {
        "device_count": ["Ensure this value is less than or equal to 8."]
    }
    assert errors(form_for(world, device_count=0)) == {
        "device_count": ["Ensure this value is greater than or equal to 1."]
    }


def test_over_quota(world: dict[str, Any]) -> None:
    GpuQuota.objects.create(team=world["team"], mode="", gpu="", max_devices=3)
    stored_request(world["team"], world["user"], world["ubuntu"], status="running", device_count=2)
    form = form_for(world, device_count=2)
    assert errors(form) == {
        "__all__": ["Your team's quota for any GPU is 3 devices and 2 are held; this request needs 2 more."]
    }
    assert [a.describe() for a in form.alternatives] == [
        "1 × A100 PCIe 40GB — Runs now on p1 (3 free there)."
    ]
    assert form_for(world, device_count=1).is_valid()


def test_no_capacity_lists_problems_and_alternatives(world: dict[str, Any]) -> None:
    form = form_for(world, device_count=4)
    assert errors(form) == {
        "__all__": ["No single node has 4 free A100 PCIe 40GB; the most free on one node is 3."]
    }
    assert [a.describe() for a in form.alternatives] == [
        "3 × A100 PCIe 40GB — Runs now on p1 (3 free there)."
    ]


def test_nothing_free_and_no_reprofile(world: dict[str, Any]) -> None:
    """An option with nothing free stays selectable; the submit check explains and offers others."""
    p3 = stored_node("p3", "vm-passthrough", gpu_model="RTX A2000 12GB", gpu_count=1)
    stored_resource(p3, "nvidia.com/GA106_RTX_A2000_12GB", 1, used=1, model="RTX A2000 12GB", permitted=True)
    form = form_for(world, gpu="nvidia.com/GA106_RTX_A2000_12GB", device_count=1)
    assert errors(form) == {"__all__": ["All RTX A2000 12GB GPUs are in use or reserved right now."]}
    assert [a.describe() for a in form.alternatives] == [
        "1 × A100 PCIe 40GB — Runs now on p1 (3 free there)."
    ]


def test_check_is_skipped_when_the_gpu_is_invalid(world: dict[str, Any]) -> None:
    form = form_for(world, gpu="nvidia.com/nope", device_count=4)
    assert not form.is_valid()
    assert list(form.errors) == ["gpu"]
    assert form.alternatives == []
