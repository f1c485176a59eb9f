"""The new-request form (analysts): what they ask for, checked against capacity and quota.

``VMRequestForm(user, data=None, initial=...)``. The GPU choices depend on the mode, the lease
bounds on the team, the CPU/memory defaults and memory minimum on the image; the form reads
those from the bound data (or the initial values of an unbound re-render) when it is built, so
the view can re-render it after any change without losing what was typed
(``vmrequests/views/new.py``). ``clean()`` runs ``placement.check_request`` (capacity now or by
re-profiling, and the team's quotas); when the request does not fit, each problem becomes a
non-field error and ``form.alternatives`` holds the closest options that fit now.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from django import forms
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from gpuinventory.capacity import CapacitySnapshot
from vmrequests.approval import RequestSpec
from vmrequests.choices import LIVE_STATES, VMMode
from vmrequests.models import (
    MAX_CPU_CORES,
    MAX_DEVICES,
    MAX_MEMORY_GIB,
    Team,
    VmImage,
    VMRequest,
    dns1123_label_validator,
)
from vmrequests.placement import Alternative, GpuOption, Verdict, check_request, gpu_options
from vmrequests.sshkeys import describe_ssh_key, validate_ssh_public_key

#: Longest VM name an analyst may choose (the VMI name is at most 63 characters).
MAX_NAME_LENGTH = 40
#: Generated VMI names look like ``alice-vm-42`` (``models.vmi_name_for``): reserved.
GENERATED_NAME = re.compile(r"-vm-\d+\Z")
#: Element id of the part of the form re-rendered when team, mode, image or GPU change.
DEPENDENT_ID = "request-dependent"


def user_teams(user: Any) -> QuerySet[Team]:
    """Teams ``user`` may request VMs for: those they are a member or an approver of."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    return Team.objects.filter(Q(members=user) | Q(approvers=user)).distinct().order_by("name")


def initial_from(data: Mapping[str, Any]) -> dict[str, Any]:
    """The raw values of ``data`` (request.POST/GET) for the form's fields, as ``initial`` of an
    unbound re-render (no validation, so no error noise)."""
    return {name: data.get(name) for name in VMRequestForm.base_fields if data.get(name) not in (None, "")}


class ImageChoiceField(forms.ModelChoiceField):
    """Images labelled with their operating system and memory minimum."""

    def label_from_instance(self, obj: Any) -> str:
        return _("%(name)s (%(os)s, at least %(min)s GiB)") % {
            "name": obj.name,
            "os": obj.os,
            "min": obj.min_memory_gib,
        }


class GpuChoiceField(forms.ChoiceField):
    """A ChoiceField that leaves the "is it offered" check to ``VMRequestForm.clean_gpu``, which
    says *why* a value is not offered (unknown, not permitted by KubeVirt, another mode)."""

    def validate(self, value: Any) -> None:
        forms.Field.validate(self, value)


class VMRequestForm(forms.Form):
    """A new VM request: team, mode, GPU and count, size, image, name, SSH key, lease, reason.

    Args:
        user: the requesting user (decides the team choices).
        data: ``request.POST`` to validate, or None for an unbound form.
        initial: raw values to show in an unbound form (``initial_from``).
        snapshot: a capacity snapshot to reuse (else one is loaded when first needed).
        ticket_source: the ticketing system the ticket ID belongs to (API; ``""`` in the UI).

    Attributes (after construction): ``teams``, ``images``, ``chosen_team``, ``chosen_image``,
    ``chosen_mode`` (from the data or initial values; None/default when not chosen),
    ``options`` (the GPU options of the mode), ``selected_option``. After ``is_valid()``:
    ``verdict`` (None unless the capacity/quota check ran) and ``alternatives``.
    """

    team = forms.ModelChoiceField(
        queryset=Team.objects.none(),
        label=gettext_lazy("Team"),
        empty_label=gettext_lazy("Choose a team"),
        error_messages={"invalid_choice": gettext_lazy("Choose one of your teams.")},
    )
    mode = forms.ChoiceField(
        choices=VMMode.choices,
        widget=forms.RadioSelect,
        initial=VMMode.PASSTHROUGH,
        label=gettext_lazy("GPU mode"),
    )
    image = ImageChoiceField(
        queryset=VmImage.objects.none(),
        label=gettext_lazy("Image"),
        empty_label=gettext_lazy("Choose an image"),
        error_messages={"invalid_choice": gettext_lazy("Choose one of the listed images.")},
    )
    gpu = GpuChoiceField(
        choices=[],
        label=gettext_lazy("GPU"),
        error_messages={"required": gettext_lazy("Choose a GPU.")},
    )
    device_count = forms.IntegerField(
        min_value=1, max_value=MAX_DEVICES, initial=1, label=gettext_lazy("Number of GPUs")
    )
    cpu_cores = forms.IntegerField(min_value=1, max_value=MAX_CPU_CORES, label=gettext_lazy("CPU cores"))
    memory_gib = forms.IntegerField(min_value=1, max_value=MAX_MEMORY_GIB, label=gettext_lazy("Memory (GiB)"))
    lease_days = forms.IntegerField(min_value=1, label=gettext_lazy("Lease (days)"))
    defaults_from = forms.IntegerField(required=False, widget=forms.HiddenInput)
    name = forms.CharField(
        required=False,
        max_length=MAX_NAME_LENGTH,
        validators=[dns1123_label_validator],
        label=gettext_lazy("VM name (optional)"),
        help_text=gettext_lazy("Lower-case letters, digits and '-'. Left blank, one is generated."),
    )
    ssh_public_key = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
        strip=True,
        label=gettext_lazy("SSH public key"),
        help_text=gettext_lazy("One line from your .pub file, e.g. ~/.ssh/id_ed25519.pub."),
    )
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        min_length=5,
        label=gettext_lazy("Justification"),
        help_text=gettext_lazy("What the VM is for; approvers read this."),
        error_messages={
            "min_length": gettext_lazy("Say in a sentence why you need this VM (at least 5 characters)."),
            "required": gettext_lazy("Say in a sentence why you need this VM (at least 5 characters)."),
        },
    )
    ticket_id = forms.CharField(required=False, max_length=100, label=gettext_lazy("Ticket ID (optional)"))

    def __init__(
        self,
        user: Any,
        data: Mapping[str, Any] | None = None,
        initial: Mapping[str, Any] | None = None,
        *,
        snapshot: CapacitySnapshot | None = None,
        ticket_source: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(data=data, initial=dict(initial or {}), **kwargs)
        self.user = user
        self.ticket_source = ticket_source
        self._snapshot = snapshot
        self.verdict: Verdict | None = None
        self.alternatives: list[Alternative] = []
        self.option: GpuOption | None = None

        teams_qs = user_teams(user)
        self.teams: list[Team] = list(teams_qs)
        self.fields["team"].queryset = teams_qs  # type: ignore[attr-defined]
        images_qs = VmImage.objects.filter(enabled=True).order_by("name")
        self.images: list[VmImage] = list(images_qs)
        self.fields["image"].queryset = images_qs  # type: ignore[attr-defined]

        if not self.is_bound:
            if len(self.teams) == 1 and not self.initial.get("team"):
                self.initial["team"] = self.teams[0].pk
            if self.images and not self.initial.get("image"):
                self.initial["image"] = self.images[0].pk
        self.chosen_team: Team | None = self._pick(self.teams, self._raw("team"))
        self.chosen_image: VmImage | None = self._pick(self.images, self._raw("image"))
        raw_mode = self._raw("mode")
        self.chosen_mode: str = raw_mode if raw_mode in VMMode.values else VMMode.PASSTHROUGH
        self.options: list[GpuOption] = gpu_options(self.chosen_mode, self.snapshot)
        self.fields["gpu"].choices = [  # type: ignore[attr-defined]
            ("", _("Choose a GPU")),
            *((o.value, o.label) for o in self.options),
        ]
        if not self.is_bound:
            self._fill_defaults()
        self.selected_option: GpuOption | None = self._option(self._raw("gpu"))
        self._set_widget_bounds()
        self._set_htmx()

    # --- building -----------------------------------------------------------------------

    @cached_property
    def snapshot(self) -> CapacitySnapshot:
        """The capacity picture the options and the check use (loaded once)."""
        return self._snapshot or CapacitySnapshot()

    def _raw(self, name: str) -> str:
        """The field's current raw value as text: the bound data, else the initial value."""
        value = self[name].value()
        if value is None:
            return ""
        return str(getattr(value, "pk", value))

    @staticmethod
    def _pick(rows: list[Any], raw: str) -> Any:
        return next((r for r in rows if str(r.pk) == raw), None)

    def _option(self, value: str) -> GpuOption | None:
        return next((o for o in self.options if o.value == value), None) if value else None

    def _fill_defaults(self) -> None:
        """Unbound form: image defaults for CPU/memory (when untouched), team lease default, and
        the first GPU that fits now (or by re-profiling) when none or an unknown one is chosen."""
        if self.chosen_image is not None:
            previous = self._pick(self.images, str(self.initial.get("defaults_from") or ""))
            for name, attr in (("cpu_cores", "default_cpu_cores"), ("memory_gib", "default_memory_gib")):
                current = self.initial.get(name)
                untouched = previous is not None and str(current) == str(getattr(previous, attr))
                if current in (None, "") or (previous is not self.chosen_image and untouched):
                    self.initial[name] = getattr(self.chosen_image, attr)
            self.initial["defaults_from"] = self.chosen_image.pk
        if self.chosen_team is not None and self.initial.get("lease_days") in (None, ""):
            self.initial["lease_days"] = self.chosen_team.default_lease_days
        if self._option(str(self.initial.get("gpu") or "")) is None:
            first = next((o for o in self.options if o.free > 0), None) or next(
                (o for o in self.options if o.fits_now_or_later), None
            )
            self.initial["gpu"] = first.value if first else ""

    def _set_widget_bounds(self) -> None:
        """Browser-side hints matching the server checks (min/max attributes)."""
        if self.chosen_image is not None:
            self.fields["memory_gib"].widget.attrs["min"] = self.chosen_image.min_memory_gib
        if self.chosen_team is not None:
            self.fields["lease_days"].widget.attrs["max"] = self.chosen_team.max_lease_days
        if self.selected_option is not None:
            self.fields["device_count"].widget.attrs["max"] = min(
                self.selected_option.per_vm_limit, MAX_DEVICES
            )

    def _set_htmx(self) -> None:
        """Team, mode, image and GPU changes re-render the dependent part of the form (the view
        posts the whole form, so nothing typed is lost). Without JavaScript the page's
        "Refresh options" button does the same."""
        attrs = {
            "hx-post": reverse("vmrequests:vmrequest_gpu_options"),
            "hx-trigger": "change",
            "hx-target": f"#{DEPENDENT_ID}",
            "hx-swap": "outerHTML",
            "hx-indicator": f"#{DEPENDENT_ID}",
            "hx-sync": "closest form:replace",
        }
        for name in ("team", "mode", "image", "gpu"):
            self.fields[name].widget.attrs.update(attrs)

    # --- validation ---------------------------------------------------------------------

    def clean_gpu(self) -> str:
        """The chosen option's value; a clear error for an unknown or unpermitted resource."""
        value = self.cleaned_data["gpu"]
        if self._option(value) is not None:
            return value
        rows = [r for r in self.snapshot.resources if r.name == value]
        mode_label = VMMode(self.chosen_mode).label
        if any(r.permitted is False for r in rows):
            raise forms.ValidationError(
                _(
                    "KubeVirt does not permit %(gpu)s (it is not in permittedHostDevices), so a VM cannot use it."
                )
                % {"gpu": value},
                code="not_permitted",
            )
        if rows:
            raise forms.ValidationError(
                _("%(gpu)s is not a %(mode)s GPU. Choose another mode, or one of the listed GPUs.")
                % {"gpu": value, "mode": mode_label},
                code="other_mode",
            )
        raise forms.ValidationError(
            _("%(gpu)s is not in the GPU inventory (or no longer offered). Choose one of the listed GPUs.")
            % {"gpu": value[:120]},
            code="unknown_gpu",
        )

    def clean_ssh_public_key(self) -> str:
        """The normalised key (``sshkeys.validate_ssh_public_key``). A pasted private key is not
        sent back to the browser in the re-rendered form."""
        try:
            return validate_ssh_public_key(self.cleaned_data["ssh_public_key"])
        except forms.ValidationError as exc:
            if exc.code == "private":
                data = dict(self.data.items())
                data["ssh_public_key"] = ""
                self.data = data
            raise

    def clean_name(self) -> str:
        """Refuse names shaped like generated ones (``<user>-vm-<number>``)."""
        name = self.cleaned_data["name"]
        if name and GENERATED_NAME.search(name):
            raise forms.ValidationError(
                _("Names ending in -vm-<number> are reserved for generated names; choose another."),
                code="reserved",
            )
        return name

    def clean_ticket_id(self) -> str:
        """A ticket ID may be used by one request only."""
        ticket = self.cleaned_data["ticket_id"]
        if ticket and VMRequest.objects.filter(ticket_source=self.ticket_source, ticket_id=ticket).exists():
            raise forms.ValidationError(
                _("Ticket %(ticket)s already has a VM request.") % {"ticket": ticket}, code="duplicate"
            )
        return ticket

    def clean(self) -> dict[str, Any]:
        """Cross-field rules, then capacity and quota (``placement.check_request``)."""
        cleaned = super().clean() or {}
        team: Team | None = cleaned.get("team")
        image: VmImage | None = cleaned.get("image")
        memory = cleaned.get("memory_gib")
        if image is not None and memory is not None and memory < image.min_memory_gib:
            self.add_error(
                "memory_gib",
                _("The image %(image)s needs at least %(min)s GiB of memory.")
                % {"image": image.name, "min": image.min_memory_gib},
            )
        lease = cleaned.get("lease_days")
        if team is not None and lease is not None and lease > team.max_lease_days:
            self.add_error(
                "lease_days",
                _("Team %(team)s allows leases of at most %(max)s days.")
                % {"team": team.name, "max": team.max_lease_days},
            )
        name = cleaned.get("name")
        if team is not None and name:
            taken = VMRequest.objects.filter(
                vmi_namespace=team.namespace, vmi_name=name, status__in=sorted(LIVE_STATES)
            ).exists()
            if taken:
                self.add_error(
                    "name",
                    _("A VM named %(name)s already exists (or is requested) in namespace %(ns)s.")
                    % {"name": name, "ns": team.namespace},
                )
        self.option = self._option(cleaned.get("gpu") or "")
        count = cleaned.get("device_count")
        if self.option is not None and count is not None and count > self.option.per_vm_limit:
            if self.option.vgpu_type and self.option.per_vm_limit == 1:
                message = _("NVIDIA allows only one vGPU of type %(type)s per VM.") % {
                    "type": self.option.vgpu_type
                }
            else:
                message = _("At most %(n)s devices of this GPU per VM.") % {"n": self.option.per_vm_limit}
            self.add_error("device_count", message)
            count = None
        if team is not None and self.option is not None and count is not None and "mode" in cleaned:
            self.verdict = check_request(
                team,
                cleaned["mode"],
                self.option.resource_name,
                self.option.vgpu_type,
                count,
                snapshot=self.snapshot,
            )
            if not self.verdict.ok:
                for problem in self.verdict.problems():
                    self.add_error(None, problem)
                self.alternatives = list(self.verdict.alternatives)
        return cleaned

    # --- result -------------------------------------------------------------------------

    @property
    def ssh_key_description(self) -> str:
        """``sshkeys.describe_ssh_key`` of the validated key ("" before validation or when
        refused), shown under the field so the user sees which key was recognised."""
        key = getattr(self, "cleaned_data", {}).get("ssh_public_key")
        return describe_ssh_key(key) if key else ""

    def spec(self) -> RequestSpec:
        """The validated request for ``approval.submit`` (call after ``is_valid()``).

        Raises:
            ValueError: the form is not valid.
        """
        if not self.is_valid() or self.option is None:
            raise ValueError("spec() needs a valid form")
        cd = self.cleaned_data
        return RequestSpec(
            team=cd["team"],
            mode=cd["mode"],
            resource_name=self.option.resource_name,
            vgpu_type=self.option.vgpu_type,
            gpu_model=self.option.model,
            device_count=cd["device_count"],
            cpu_cores=cd["cpu_cores"],
            memory_gib=cd["memory_gib"],
            image=cd["image"],
            ssh_public_key=cd["ssh_public_key"],
            lease_days=cd["lease_days"],
            justification=cd["justification"],
            name=cd["name"],
            ticket_source=self.ticket_source,
            ticket_id=cd["ticket_id"],
        )
