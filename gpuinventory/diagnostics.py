"""Stored node flags in plain words for the pages and the API, through ``gpuinventory.flags.describe``.

``gpuinventory/flags.py`` (the rules) owns the codes, severities, texts and commands; this module
only guards the presentation: a flag the rules cannot format (bad params in an older row) is shown
by its code and parameters instead of breaking the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_lazy as _

from gpuinventory import flags as flag_rules

SEVERITY_RANK = {"error": 0, "danger": 0, "critical": 0, "warning": 1, "info": 2}

#: Severity badges in plain words (the codes stay in CSS classes and the API).
SEVERITY_LABELS = {
    "error": _("error"),
    "danger": _("error"),
    "critical": _("critical"),
    "warning": _("warning"),
    "info": _("info"),
}


def severity_label(severity: str) -> str:
    """The severity in the active language (unknown severities as they are)."""
    label = SEVERITY_LABELS.get(severity)
    return str(label) if label is not None else severity


@dataclass(frozen=True)
class Diagnostic:
    """One flag described: ``severity`` (``error``/``warning``/``info``), texts and admin commands."""

    code: str
    params: dict[str, Any]
    severity: str
    title: str
    detail: str
    commands: tuple[str, ...]

    @property
    def severity_label(self) -> str:
        """The severity in the active language, for badges."""
        return severity_label(self.severity)


def describe_flag(flag: dict[str, Any], node: str = "") -> Diagnostic:
    """Describe one stored ``{"code": str, "params": {...}}`` flag in the active language.

    ``node`` fills ``%(node)s`` in the commands.
    """
    code = str(flag.get("code", ""))
    params = flag.get("params") or {}
    try:
        text = flag_rules.describe(flag, node=node)
        return Diagnostic(
            code=code,
            params=dict(params),
            severity=str(text.severity),
            title=str(text.title),
            detail=str(text.detail),
            commands=tuple(str(c) for c in text.commands),
        )
    except (AttributeError, KeyError, TypeError, ValueError):
        detail = ", ".join(f"{key}={value}" for key, value in sorted(params.items()))
        return Diagnostic(
            code=code, params=dict(params), severity="warning", title=code, detail=detail, commands=()
        )


def describe_flags(flags: list[Any], node: str = "") -> list[Diagnostic]:
    """Describe every flag, most severe first (stable within a severity)."""
    described = [describe_flag(flag, node) for flag in flags if isinstance(flag, dict)]
    return sorted(described, key=lambda d: SEVERITY_RANK.get(d.severity, 1))


def worst_severity(flags: list[Any]) -> str:
    """The most severe severity among ``flags`` ("" when there are none)."""
    described = describe_flags(flags)
    return described[0].severity if described else ""
