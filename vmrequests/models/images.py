"""The image catalog: the containerDisks analysts may boot, with their login user and sizes."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from vmrequests.models.limits import MAX_CPU_CORES, MAX_MEMORY_GIB


class VmImage(models.Model):
    """A VM image analysts can pick: a KubeVirt containerDisk plus how to log in (admin-managed)."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    image = models.CharField(
        _("containerDisk image"), max_length=400, help_text=_("e.g. quay.io/containerdisks/ubuntu:22.04")
    )
    os = models.CharField(_("operating system"), max_length=100)
    login_user = models.CharField(
        _("login user"),
        max_length=32,
        default="analyst",
        validators=[RegexValidator(r"\A[a-z_][a-z0-9_-]{0,31}\Z", _("Use a Linux user name."))],
    )
    min_memory_gib = models.PositiveIntegerField(
        _("minimum memory (GiB)"), default=2, validators=[MinValueValidator(1)]
    )
    default_cpu_cores = models.PositiveIntegerField(
        _("default CPU cores"), default=4, validators=[MinValueValidator(1), MaxValueValidator(MAX_CPU_CORES)]
    )
    default_memory_gib = models.PositiveIntegerField(
        _("default memory (GiB)"),
        default=16,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_MEMORY_GIB)],
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("VM image")
        verbose_name_plural = _("VM images")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("admin:vmrequests_vmimage_change", args=[self.pk])

    def clean(self) -> None:
        """The default memory must be at least the minimum."""
        if self.default_memory_gib and self.min_memory_gib and self.default_memory_gib < self.min_memory_gib:
            raise ValidationError({"default_memory_gib": _("The default memory is below the minimum.")})
