"""Teams (who requests into which namespace, under which lease policy) and their GPU quotas."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from gpuinventory.naming import parse_vgpu_type
from vmrequests.choices import VMMode
from vmrequests.models.limits import dns1123_label_validator


class Team(models.Model):
    """A group of people who request VMs into one Kubernetes namespace, under one lease policy.

    ``members`` may request VMs for the team and see its requests; ``approvers`` (who also need
    the ``vmrequests.approve_vmrequest`` permission) decide them. Quotas: ``GpuQuota`` rows.
    """

    name = models.CharField(_("name"), max_length=100, unique=True)
    slug = models.SlugField(_("slug"), max_length=50, unique=True)
    namespace = models.CharField(
        _("namespace"),
        max_length=63,
        validators=[dns1123_label_validator],
        help_text=_("Kubernetes namespace the team's VMs are created in."),
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="teams", blank=True, verbose_name=_("members")
    )
    approvers = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="approver_of", blank=True, verbose_name=_("approvers")
    )
    default_lease_days = models.PositiveIntegerField(
        _("default lease (days)"), default=7, validators=[MinValueValidator(1)]
    )
    max_lease_days = models.PositiveIntegerField(
        _("maximum lease (days)"), default=30, validators=[MinValueValidator(1)]
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("team")
        verbose_name_plural = _("teams")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("vmrequests:vmrequest_list") + f"?team={self.slug}"

    def clean(self) -> None:
        """Refuse a default lease longer than the maximum."""
        if self.default_lease_days and self.max_lease_days and self.default_lease_days > self.max_lease_days:
            raise ValidationError(
                {"default_lease_days": _("The default lease cannot be longer than the maximum lease.")}
            )


class GpuQuota(models.Model):
    """At most ``max_devices`` GPU devices held at once by a team's open requests.

    Open = approved, provisioning or running (``choices.OPEN_STATES``). Scope: ``mode`` blank =
    any GPU; ``mode`` set and ``gpu`` blank = any GPU of that mode; ``gpu`` = one passthrough
    resource name (``nvidia.com/GA100_A100_PCIE_40GB``, i.e. one GPU model) or one bare vGPU type
    (``A10-12Q``; bare because the resource prefix ``GRID_``/``NVIDIA_`` depends on the driver,
    DOMAIN.md §2). Every quota whose scope matches a request must hold.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas", verbose_name=_("team"))
    mode = models.CharField(_("mode"), max_length=20, choices=VMMode.choices, blank=True)
    gpu = models.CharField(
        _("GPU"),
        max_length=253,
        blank=True,
        help_text=_("Passthrough resource name (nvidia.com/...) or vGPU type (e.g. A10-12Q); blank = any."),
    )
    max_devices = models.PositiveIntegerField(_("maximum devices"))
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "mode", "gpu"]
        verbose_name = _("GPU quota")
        verbose_name_plural = _("GPU quotas")
        constraints = [models.UniqueConstraint(fields=["team", "mode", "gpu"], name="gpuquota_unique_scope")]

    def __str__(self) -> str:
        return f"{self.team}: {self.scope_label} ≤ {self.max_devices}"

    def get_absolute_url(self) -> str:
        return self.team.get_absolute_url()

    def clean(self) -> None:
        """A GPU scope needs a mode, and must look like that mode's names."""
        if self.gpu and not self.mode:
            raise ValidationError({"mode": _("Choose the mode the GPU belongs to.")})
        if self.gpu and self.mode == VMMode.PASSTHROUGH and not self.gpu.startswith("nvidia.com/"):
            raise ValidationError(
                {"gpu": _("A passthrough GPU is a resource name such as nvidia.com/GA102GL_A10.")}
            )
        if self.gpu and self.mode == VMMode.VGPU and parse_vgpu_type(self.gpu) is None:
            raise ValidationError({"gpu": _("A vGPU type looks like A10-12Q or A100-1-5C.")})

    @property
    def scope_label(self) -> str:
        """``"any GPU"``, ``"any vGPU (GPU slice)"`` or the GPU name."""
        if not self.mode:
            return str(_("any GPU"))
        if not self.gpu:
            return str(_("any %(mode)s") % {"mode": VMMode(self.mode).label})
        return self.gpu

    def matches(self, mode: str, resource_name: str, vgpu_type: str) -> bool:
        """True when a request of ``mode`` for ``resource_name``/``vgpu_type`` falls in this scope."""
        if not self.mode:
            return True
        if self.mode != mode:
            return False
        if not self.gpu:
            return True
        return self.gpu == (vgpu_type if mode == VMMode.VGPU else resource_name)
