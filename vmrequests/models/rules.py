"""Auto-approval rules: which of a team's requests are small enough to approve without a person."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from django.db import models
from django.utils.translation import gettext_lazy as _

from gpuinventory.naming import parse_vgpu_type
from vmrequests.choices import VMMode
from vmrequests.models.teams import Team

if TYPE_CHECKING:
    from vmrequests.models.request import VMRequest


class AutoApprovalRule(models.Model):
    """Approve a team's requests without a person when they are small enough (and fit).

    Matches a request of ``mode`` asking for at most ``max_devices`` devices and, for vGPU, a
    type with at most ``max_vgpu_framebuffer_gb`` GB of frame buffer (blank = any). A matching
    request still goes through the same capacity and quota checks as a person's approval; the
    timeline records the approval as done by "policy".
    """

    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, related_name="auto_approval_rules", verbose_name=_("team")
    )
    mode = models.CharField(_("mode"), max_length=20, choices=VMMode.choices)
    max_devices = models.PositiveIntegerField(_("maximum devices"), default=1)
    max_vgpu_framebuffer_gb = models.DecimalField(
        _("maximum vGPU frame buffer (GB)"), max_digits=6, decimal_places=1, null=True, blank=True
    )
    max_lease_days = models.PositiveIntegerField(_("maximum lease (days)"), null=True, blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "mode", "pk"]
        verbose_name = _("auto-approval rule")
        verbose_name_plural = _("auto-approval rules")

    def __str__(self) -> str:
        return f"{self.team}: {self.describe()}"

    def get_absolute_url(self) -> str:
        return self.team.get_absolute_url()

    def describe(self) -> str:
        """The rule in words, e.g. ``"vGPU (GPU slice) up to 1 device(s), ≤ 8 GB"``."""
        text = _("%(mode)s up to %(n)s device(s)") % {"mode": VMMode(self.mode).label, "n": self.max_devices}
        if self.max_vgpu_framebuffer_gb is not None:
            text += f", ≤ {self.max_vgpu_framebuffer_gb.normalize()} GB"
        if self.max_lease_days is not None:
            text += ", " + _("lease ≤ %(d)s days") % {"d": self.max_lease_days}
        return str(text)

    def matches(self, request: VMRequest) -> bool:
        """True when ``request`` is small enough for this rule (capacity and quota not checked)."""
        if not self.enabled or request.mode != self.mode or request.device_count > self.max_devices:
            return False
        if self.max_lease_days is not None and request.lease_days > self.max_lease_days:
            return False
        if self.max_vgpu_framebuffer_gb is not None:
            vtype = parse_vgpu_type(request.vgpu_type)
            if vtype is None or vtype.framebuffer_gb > Decimal(self.max_vgpu_framebuffer_gb):
                return False
        return True
