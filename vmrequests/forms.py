"""The new-request form (analysts): a thin adapter over ``vmrequests.validation``.

``VMRequestForm(user, data=None, initial=...)``. The form parses types (choices, integers,
stripped text capped at the model's ``max_length``, which also gives the ``maxlength``
attributes), builds a ``RequestDraft`` and calls ``validation.validate``, the one place the
request rules live; each ``FieldError`` becomes an error of the matching field (``resource_name``
and ``vgpu_type`` are the ``gpu`` field, whole-request problems are non-field errors) and
``form.alternatives`` holds the closest options that fit now.

The GPU choices depend on the mode, the lease bounds on the team, the CPU/memory defaults and
memory minimum on the image; the form reads those from the bound data (or the initial values of
an unbound re-render) when it is built, so the view can re-render it after any change without
losing what was typed (``vmrequests/views/new.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from django import forms
from django.urls import reverse
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from gpuinventory.capacity import CapacitySnapshot
from vmrequests.choices import VMMode
from vmrequests.models import MAX_CPU_CORES, MAX_DEVICES, MAX_MEMORY_GIB, Team, VmImage, VMRequest
from vmrequests.placement import REPROFILE_PREFIX, Alternative, GpuOption, gpu_options
from vmrequests.sshkeys import describe_ssh_key
from vmrequests.validation import (
    GPU_FIELDS,
    MAX_NAME_LENGTH,
    MIN_JUSTIFICATION_LENGTH,
    RequestDraft,
    RequestInvalid,
    RequestSpec,
    model_cap,
    user_teams,
    validate,
)

__all__ = ["DEPENDENT_ID", "VMRequestForm", "initial_from", "user_teams"]

#: Element id of the part of the form re-rendered when team, mode, image or GPU change.
DEPENDENT_ID = "request-dependent"


def _cap(name: str) -> int:
    """The model's ``max_length`` of ``VMRequest.<name>``."""
    return model_cap(VMRequest, name)


def initial_from(data: Mapping[str, Any]) -> dict[str, Any]:
    """The raw values of ``data`` (request.POST/GET) for the form's fields, as ``initial`` of an
    unbound re-render (no validation, so no error noise)."""
    return {name: data.get(name) for name in VMRequestForm.base_fields if data.get(name) not in (None, "")}


class RefChoiceField(forms.TypedChoiceField):
    """A choice of a row by primary key (an ``int``). Whether the row may be chosen is
    ``validation.validate``'s rule, not the choice list's, so any integer passes here."""

    def __init__(self, *, invalid: Any, **kwargs: Any) -> None:
        super().__init__(coerce=int, empty_value=None, error_messages={"invalid_choice": invalid}, **kwargs)

    def valid_value(self, value: Any) -> bool:
        return str(value).isdigit()


def _image_label(image: VmImage) -> str:
    """``"Ubuntu 22.04 (Ubuntu 22.04 LTS, at least 8 GiB)"``."""
    return _("%(name)s (%(os)s, at least %(min)s GiB)") % {
        "name": image.name,
        "os": image.os,
        "min": image.min_memory_gib,
    }


class GpuChoiceField(forms.ChoiceField):
    """A ChoiceField that leaves the "is it offered" check to ``validation.validate``, which
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

    Attributes (after construction): ``teams``, ``images``, ``chosen_team``, ``chosen_image``,
    ``chosen_mode`` (from the data or initial values; None/default when not chosen),
    ``options`` (the GPU options of the mode), ``selected_option``. After ``is_valid()``:
    ``alternatives`` (``validation.RequestInvalid.alternatives``).
    """

    team = RefChoiceField(
        label=gettext_lazy("Team"),
        invalid=gettext_lazy("Choose one of your teams."),
    )
    mode = forms.ChoiceField(
        choices=VMMode.choices,
        widget=forms.RadioSelect,
        initial=VMMode.PASSTHROUGH,
        label=gettext_lazy("GPU mode"),
    )
    image = RefChoiceField(
        label=gettext_lazy("Image"),
        invalid=gettext_lazy("Choose one of the listed images."),
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
        label=gettext_lazy("VM name (optional)"),
        help_text=gettext_lazy("Lower-case letters, digits and '-'. Left blank, one is generated."),
    )
    ssh_public_key = forms.CharField(
        required=False,
        max_length=_cap("ssh_public_key"),
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
        label=gettext_lazy("SSH public key"),
        help_text=gettext_lazy("One line from your .pub file, e.g. ~/.ssh/id_ed25519.pub."),
    )
    justification = forms.CharField(
        required=False,
        max_length=_cap("justification"),
        widget=forms.Textarea(attrs={"rows": 4, "minlength": MIN_JUSTIFICATION_LENGTH}),
        label=gettext_lazy("Justification"),
        help_text=format_lazy(
            gettext_lazy(
                "What the VM is for; approvers read this. {min} to {max} characters: a longer paste is "
                "cut at {max}."
            ),
            min=MIN_JUSTIFICATION_LENGTH,
            max=f"{_cap('justification'):,}",
        ),
    )
    ticket_id = forms.CharField(
        required=False, max_length=_cap("ticket_id"), label=gettext_lazy("Ticket ID (optional)")
    )

    def __init__(
        self,
        user: Any,
        data: Mapping[str, Any] | None = None,
        initial: Mapping[str, Any] | None = None,
        *,
        snapshot: CapacitySnapshot | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(data=data, initial=dict(initial or {}), **kwargs)
        self.user = user
        self._snapshot = snapshot
        self._spec: RequestSpec | None = None
        self.alternatives: list[Alternative] = []

        self.teams: list[Team] = list(user_teams(user))
        self.fields["team"].choices = [  # type: ignore[attr-defined]
            ("", _("Choose a team")),
            *((t.pk, t.name) for t in self.teams),
        ]
        self.images: list[VmImage] = list(VmImage.objects.filter(enabled=True).order_by("name"))
        self.fields["image"].choices = [  # type: ignore[attr-defined]
            ("", _("Choose an image")),
            *((i.pk, _image_label(i)) for i in self.images),
        ]

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

    # --- validation: the adapter over validation.validate -------------------------------------

    def _draft(self, cleaned: Mapping[str, Any]) -> RequestDraft:
        """The draft of the cleaned values (fields that failed to parse hold placeholders and
        are passed to ``validate`` as refused)."""
        gpu = str(cleaned.get("gpu") or "")
        reprofile = gpu.startswith(REPROFILE_PREFIX)
        return RequestDraft(
            team=cleaned.get("team"),
            mode=cleaned.get("mode") or "",
            image=cleaned.get("image"),
            resource_name="" if reprofile else gpu,
            vgpu_type=gpu.removeprefix(REPROFILE_PREFIX) if reprofile else "",
            device_count=cleaned.get("device_count"),
            cpu_cores=cleaned.get("cpu_cores"),
            memory_gib=cleaned.get("memory_gib"),
            lease_days=cleaned.get("lease_days"),
            name=cleaned.get("name") or "",
            ssh_public_key=cleaned.get("ssh_public_key") or "",
            justification=cleaned.get("justification") or "",
            ticket_id=cleaned.get("ticket_id") or "",
        )

    def clean(self) -> dict[str, Any]:
        """Run ``validation.validate`` on the parsed fields; map its errors onto the fields."""
        cleaned = super().clean() or {}
        refused = {name for name in self.errors if name in self.fields}
        if "gpu" in refused:
            refused |= GPU_FIELDS
        try:
            self._spec = validate(self.user, self._draft(cleaned), refused=refused, snapshot=self.snapshot)
        except RequestInvalid as exc:
            self.alternatives = list(exc.alternatives)
            for name, items in exc.errors.items():
                target = "gpu" if name in GPU_FIELDS else name
                for error in items:
                    self.add_error(target, forms.ValidationError(error.message, code=error.code))
                    if name == "ssh_public_key" and error.code == "private":
                        self._forget_private_key()
        return cleaned

    def _forget_private_key(self) -> None:
        """A pasted private key is not sent back to the browser in the re-rendered form."""
        data = dict(self.data.items())
        data["ssh_public_key"] = ""
        self.data = data

    # --- result -------------------------------------------------------------------------

    @property
    def ssh_key_description(self) -> str:
        """``sshkeys.describe_ssh_key`` of the accepted key ("" before validation or when
        refused), shown under the field so the user sees which key was recognised."""
        if not hasattr(self, "cleaned_data") or "ssh_public_key" in self.errors:
            return ""
        try:
            return describe_ssh_key(self.cleaned_data.get("ssh_public_key") or "")
        except forms.ValidationError:
            return ""

    def spec(self) -> RequestSpec:
        """The validated request for ``approval.submit`` (call after ``is_valid()``).

        Raises:
            ValueError: the form is not valid.
        """
        if not self.is_valid() or self._spec is None:
            raise ValueError("spec() needs a valid form")
        return self._spec
