"""The VM request and its state machine.

Status changes happen only through ``VMRequest`` methods (``approve``, ``reject``, ...). Each one
is a compare-and-swap under a row lock (``VMRequest._transition``): it reads the current status,
refuses with ``TransitionError`` when the status is not one the action may start from
(``choices.TRANSITIONS``), else updates the row and appends one ``VMRequestEvent`` in the same
transaction. Two approvers, a double click or a redelivered Celery message can therefore never
both win.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Protocol

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce
from django.dispatch import Signal
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from gpuinventory.reservations import Holder, release
from vmrequests.choices import (
    ACTION_VERB,
    LIVE_STATES,
    OPEN_STATES,
    STATUS_BADGE,
    TERMINAL_STATES,
    TRANSITIONS,
    DeletionReason,
    EventAction,
    VMMode,
    VMRequestStatus,
)
from vmrequests.models.events import VMRequestEvent
from vmrequests.models.images import VmImage
from vmrequests.models.limits import MAX_CPU_CORES, MAX_DEVICES, MAX_JUSTIFICATION_LENGTH, MAX_MEMORY_GIB
from vmrequests.models.teams import Team
from vmrequests.sshkeys import MAX_PUBLIC_KEY_LENGTH

#: Sent after the transaction of a status change commits: ``sender=VMRequest``,
#: ``request`` (the updated row), ``event`` (the ``VMRequestEvent``). Notifications and webhooks
#: listen to it (``vmrequests/apps.py``).
request_transitioned = Signal()


class TransitionError(Exception):
    """A status change was refused: the request is not in a state the action may start from.

    Attributes:
        request_id: the request's primary key. action: the refused ``EventAction``.
        current: the status the request is in now.
    """

    def __init__(self, request_id: int, action: str, current: str) -> None:
        self.request_id = request_id
        self.action = action
        self.current = current
        label = ACTION_VERB.get(EventAction(action), action) if action in EventAction.values else action
        status = VMRequestStatus(current).label if current in VMRequestStatus.values else current
        super().__init__(
            _("Request #%(id)s is %(status)s; it cannot be %(action)s.")
            % {"id": request_id, "status": status, "action": label}
        )


class PolicyRule(Protocol):
    """What ``VMRequest.approve_by_policy`` reads of the rule that approved: its primary key and
    its words (``vmrequests.models.rules.AutoApprovalRule`` is one)."""

    pk: Any

    def describe(self) -> str:
        """The rule in words, written into the decision note."""
        ...


class VMRequestQuerySet(QuerySet["VMRequest"]):
    """Query helpers; ``visible_to`` is the one visibility rule (CONVENTIONS). Who may do what
    to a visible request is ``vmrequests.policy``."""

    def visible_to(self, user: Any) -> VMRequestQuerySet:
        """Requests ``user`` may see: superusers all; others their own, those they filed for
        someone else (``submitted_by``: a ticketing system's service account), and every request
        of a team they are a member or an approver of. Anonymous users none."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_superuser:
            return self
        teams = Team.objects.filter(Q(members=user) | Q(approvers=user)).values("pk")
        return self.filter(Q(requester=user) | Q(submitted_by=user) | Q(team__in=teams))

    def with_ticket(self, account: Any, source: str, ticket_id: str) -> VMRequestQuerySet:
        """The request (at most one) with ticket ``source``/``ticket_id`` filed by ``account``.

        A ticket identifies a request per filing account (#14): the ``submitted_by`` account
        (a ticketing system's service account), else the requester who filed it themselves.
        One account's tickets never collide with another's, so no one can take a ticket ID
        before the ticketing system does, and no answer reveals another account's tickets.
        Enforced by the constraint ``vmrequest_unique_ticket_per_account``.
        """
        filed = Q(submitted_by=account) | Q(submitted_by__isnull=True, requester=account)
        return self.filter(filed, ticket_source=source, ticket_id=ticket_id)

    def open(self) -> VMRequestQuerySet:
        """Requests holding (or about to hold) devices: approved, provisioning, running."""
        return self.filter(status__in=OPEN_STATES)


def vmi_name_for(pk: int, username: str, name: str = "") -> str:
    """The deterministic VMI name of a request: the requested ``name`` when given (already a
    DNS-1123 label), else ``<username as a DNS-1123 label, ≤ 40 chars>-vm-<pk>`` (≤ 63 chars).

    ``"Alice.Smith@corp"``, 42 → ``"alice-smith-corp-vm-42"``; a name with no usable characters
    gives ``"user-vm-42"``.
    """
    if name:
        return name
    slug = re.sub(r"[^a-z0-9]+", "-", username.lower()).strip("-")[:40].strip("-") or "user"
    return f"{slug}-vm-{pk}"


class VMRequest(models.Model):
    """One analyst's request for a GPU VM, from submission to deletion.

    Sizes: ``cpu_cores`` (cores), ``memory_gib`` (GiB), ``device_count`` devices of
    ``resource_name`` (the exact ``nvidia.com/...`` name from node allocatable, DOMAIN.md §2).
    For a vGPU type no node advertises yet (available after re-profiling a node)
    ``resource_name`` is ``""`` until provisioning reads it from allocatable; ``vgpu_type`` (bare,
    ``T4-8Q``) is set for every vGPU request. ``vmi_name``/``vmi_namespace`` are fixed at
    submission (``vmi_name_for``) so that provisioning is idempotent. Status: see
    ``vmrequests/choices.py``; change it only through the methods below.
    """

    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="vm_requests",
        verbose_name=_("requester"),
    )
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        help_text="the account that filed it on the requester's behalf (ticketing system)",
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="requests", verbose_name=_("team"))
    mode = models.CharField(_("mode"), max_length=20, choices=VMMode.choices)
    resource_name = models.CharField(_("GPU resource"), max_length=253, blank=True)
    vgpu_type = models.CharField(_("vGPU type"), max_length=40, blank=True)
    gpu_model = models.CharField(_("GPU model"), max_length=100, blank=True)
    device_count = models.PositiveIntegerField(
        _("devices"), default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_DEVICES)]
    )
    cpu_cores = models.PositiveIntegerField(
        _("CPU cores"), validators=[MinValueValidator(1), MaxValueValidator(MAX_CPU_CORES)]
    )
    memory_gib = models.PositiveIntegerField(
        _("memory (GiB)"), validators=[MinValueValidator(1), MaxValueValidator(MAX_MEMORY_GIB)]
    )
    image = models.ForeignKey(VmImage, on_delete=models.PROTECT, related_name="+", verbose_name=_("image"))
    ssh_public_key = models.CharField(_("SSH public key"), max_length=MAX_PUBLIC_KEY_LENGTH)
    lease_days = models.PositiveIntegerField(_("lease (days)"), validators=[MinValueValidator(1)])
    justification = models.CharField(_("justification"), max_length=MAX_JUSTIFICATION_LENGTH)
    ticket_source = models.CharField(_("ticket source"), max_length=50, blank=True)
    ticket_id = models.CharField(_("ticket ID"), max_length=100, blank=True)
    status = models.CharField(
        _("status"),
        max_length=20,
        choices=VMRequestStatus.choices,
        default=VMRequestStatus.SUBMITTED,
        db_index=True,
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    decided_by_policy = models.BooleanField(default=False)
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    decision_note = models.TextField(_("decision note"), blank=True)
    vmi_name = models.CharField(_("VMI name"), max_length=63, blank=True)
    vmi_namespace = models.CharField(_("VMI namespace"), max_length=63)
    node_name = models.CharField(_("node"), max_length=253, blank=True)
    ip_address = models.GenericIPAddressField(_("IP address"), null=True, blank=True)
    failure_reason = models.TextField(_("failure reason"), blank=True)
    deletion_reason = models.CharField(
        _("deletion reason"), max_length=20, choices=DeletionReason.choices, blank=True
    )
    lease_end = models.DateTimeField(_("lease end"), null=True, blank=True)
    lease_warning_sent_at = models.DateTimeField(null=True, blank=True)
    extension_days_requested = models.PositiveIntegerField(
        _("extension requested (days)"), null=True, blank=True
    )
    extension_reason = models.TextField(_("extension reason"), blank=True)
    lease_extended_days = models.PositiveIntegerField(
        _("lease extended by (days)"),
        default=0,
        help_text=_("Days added to the lease by granted extensions, in total."),
    )
    vmi_created_at = models.DateTimeField(_("VMI created at"), null=True, blank=True)
    created = models.DateTimeField(_("created"), auto_now_add=True, db_index=True)
    updated = models.DateTimeField(_("updated"), auto_now=True)

    #: What a request asks for, in the order pages and the API show it: the GPU (``mode``,
    #: ``resource_name``/``vgpu_type``, ``gpu_model``, ``device_count``), the VM's size
    #: (``cpu_cores``, ``memory_gib``) and its ``image``.
    SPEC_FIELDS = (
        "mode",
        "resource_name",
        "vgpu_type",
        "gpu_model",
        "device_count",
        "cpu_cores",
        "memory_gib",
        "image",
    )

    objects = VMRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-pk"]
        verbose_name = _("VM request")
        verbose_name_plural = _("VM requests")
        permissions = [
            ("approve_vmrequest", "Can approve or reject VM requests"),
            ("submit_for_others", "Can submit VM requests on behalf of another user (requested_for)"),
        ]
        constraints = [
            # One request per ticket and filing account (VMRequestQuerySet.with_ticket).
            models.UniqueConstraint(
                Coalesce("submitted_by", "requester"),
                "ticket_source",
                "ticket_id",
                condition=~Q(ticket_id=""),
                name="vmrequest_unique_ticket_per_account",
            ),
            models.UniqueConstraint(
                fields=["vmi_namespace", "vmi_name"],
                condition=Q(status__in=sorted(LIVE_STATES)) & ~Q(vmi_name=""),
                name="vmrequest_unique_live_vmi",
            ),
        ]
        indexes = [models.Index(fields=["team", "status"], name="vmrequest_team_status")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.vmi_name or '?'} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("vmrequests:vmrequest", args=[self.pk])

    # --- derived -------------------------------------------------------------------------

    @property
    def holder(self) -> Holder:
        """Who holds this request's reservation (``gpuinventory.reservations``)."""
        return Holder("vmrequest", self.pk)

    @property
    def is_terminal(self) -> bool:
        """True when nothing more will happen (deleted, rejected, cancelled, failed)."""
        return self.status in TERMINAL_STATES

    @property
    def badge(self) -> str:
        """CSS tone of the status badge."""
        return STATUS_BADGE[VMRequestStatus(self.status)]

    @property
    def gpu_label(self) -> str:
        """What the request asks for, e.g. ``"nvidia.com/GA100_A100_PCIE_40GB × 2"`` or ``"T4-16Q"``."""
        what = self.resource_name or self.vgpu_type
        return f"{what} × {self.device_count}" if self.device_count > 1 else what

    @property
    def virtctl_commands(self) -> list[str]:
        """How to reach the VM with ``virtctl`` (KubeVirt's client; works from outside the
        cluster, unlike the pod-network IP): the ``ssh`` line, then the serial ``console`` line."""
        return [
            f"virtctl ssh {self.image.login_user}@vmi/{self.vmi_name} -n {self.vmi_namespace}",
            f"virtctl console {self.vmi_name} -n {self.vmi_namespace}",
        ]

    def lease_end_if_started(self, start: Any = None) -> Any:
        """When the lease would end if the VM ran from ``start`` (default now)."""
        return (start or timezone.now()) + timedelta(days=self.lease_days)

    # --- lease and extensions ----------------------------------------------------------------

    @property
    def lease_total_days(self) -> int:
        """The lease's whole length in days from its start: the days asked for at submission
        plus every granted extension (``lease_extended_days``)."""
        return self.lease_days + self.lease_extended_days

    def extension_days_left(self, max_lease_days: int | None = None) -> int:
        """Days an extension may still add: the team's maximum lease (``max_lease_days``,
        default ``team.max_lease_days``) minus ``lease_total_days``; never below 0. The maximum
        caps the lease in total, not each extension (7 days + 23 more = 30 at most)."""
        limit = self.team.max_lease_days if max_lease_days is None else max_lease_days
        return max(0, limit - self.lease_total_days)

    @property
    def lease_end_if_extended(self) -> Any:
        """Where the lease end moves if the pending extension is granted; None without one (or
        before the lease started)."""
        if self.lease_end is None or self.extension_days_requested is None:
            return None
        return self.lease_end + timedelta(days=self.extension_days_requested)

    # --- transitions -----------------------------------------------------------------------

    def _transition(
        self,
        action: str,
        *,
        actor: Any = None,
        actor_label: str = "",
        message: str = "",
        data: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> VMRequestEvent:
        """Compare-and-swap ``status`` for ``action`` and append its event (one transaction).

        Raises:
            TransitionError: the request's current status is not one ``action`` starts from
                (illegal transition, or another actor won the race). Nothing is written.
        """
        allowed_from, to_status = TRANSITIONS[action]
        fields = dict(fields or {})
        with transaction.atomic():
            current = (
                VMRequest.objects.select_for_update()
                .filter(pk=self.pk)
                .values_list("status", flat=True)
                .first()
            )
            if current not in allowed_from:
                raise TransitionError(self.pk, action, str(current))
            now = timezone.now()
            fields.update(status=to_status, updated=now)
            won = VMRequest.objects.filter(pk=self.pk, status=current).update(**fields)
            if not won:  # pragma: no cover - the row lock makes this unreachable on PostgreSQL
                raise TransitionError(self.pk, action, str(current))
            for name, value in fields.items():
                setattr(self, name, value)
            if to_status in TERMINAL_STATES:
                release(self.holder)
            event = VMRequestEvent.objects.create(
                request=self,
                actor=actor,
                actor_label=actor_label,
                action=action,
                from_status=current,
                to_status=to_status,
                message=message,
                data=data or {},
            )
            transaction.on_commit(
                lambda: request_transitioned.send(sender=VMRequest, request=self, event=event)
            )
        return event

    def record(
        self,
        action: str,
        message: str,
        *,
        actor: Any = None,
        actor_label: str = "",
        data: dict[str, Any] | None = None,
    ) -> VMRequestEvent:
        """Append a timeline entry that does not change the status (a provisioning step, a note)."""
        return VMRequestEvent.objects.create(
            request=self,
            actor=actor,
            actor_label=actor_label,
            action=action,
            from_status=self.status,
            to_status=self.status,
            message=message,
            data=data or {},
        )

    def approve(self, by: Any, note: str = "", *, data: dict[str, Any] | None = None) -> VMRequestEvent:
        """submitted → approved by a person. Call through ``vmrequests.approval.approve``, which
        checks capacity and quota and writes the reservation in the same transaction."""
        return self._transition(
            EventAction.APPROVE,
            actor=by,
            message=note,
            data=data,
            fields={"decided_by": by, "decided_at": timezone.now(), "decision_note": note},
        )

    def approve_by_policy(self, rule: PolicyRule, *, data: dict[str, Any] | None = None) -> VMRequestEvent:
        """submitted → approved by an auto-approval rule (actor "policy")."""
        note = str(_("Auto-approved by rule: %(rule)s") % {"rule": rule.describe()})
        return self._transition(
            EventAction.AUTO_APPROVE,
            actor_label="policy",
            message=note,
            data={**(data or {}), "rule_id": rule.pk},
            fields={"decided_by_policy": True, "decided_at": timezone.now(), "decision_note": note},
        )

    def retry(self, by: Any, note: str = "", *, data: dict[str, Any] | None = None) -> VMRequestEvent:
        """failed → approved again (call through ``vmrequests.approval.retry``, which re-checks
        capacity and quota and reserves again); clears the failure and the VMI creation time."""
        return self._transition(
            EventAction.RETRY,
            actor=by,
            message=note,
            data=data,
            fields={
                "decided_by": by,
                "decided_at": timezone.now(),
                "decision_note": note,
                "failure_reason": "",
                "vmi_created_at": None,
                "node_name": "",
                "ip_address": None,
            },
        )

    def reject(self, by: Any, reason: str) -> VMRequestEvent:
        """submitted → rejected. ``reason`` is required.

        Raises:
            ValueError: blank reason. TransitionError: not submitted.
        """
        if not reason.strip():
            raise ValueError("a rejection needs a reason")
        return self._transition(
            EventAction.REJECT,
            actor=by,
            message=reason,
            fields={"decided_by": by, "decided_at": timezone.now(), "decision_note": reason},
        )

    def cancel(self, by: Any, note: str = "") -> VMRequestEvent:
        """submitted | approved → cancelled (the requester changed their mind); frees the reservation."""
        return self._transition(EventAction.CANCEL, actor=by, message=note)

    def start_provisioning(self, message: str = "") -> VMRequestEvent:
        """approved → provisioning (the worker took it)."""
        return self._transition(EventAction.START_PROVISIONING, actor_label="worker", message=message)

    def mark_running(self, node_name: str, ip_address: str | None, message: str = "") -> VMRequestEvent:
        """provisioning → running on ``node_name``; the lease starts now."""
        now = timezone.now()
        return self._transition(
            EventAction.MARK_RUNNING,
            actor_label="worker",
            message=message,
            data={"node": node_name, "ip": ip_address},
            fields={
                "node_name": node_name,
                "ip_address": ip_address,
                "lease_end": self.lease_end_if_started(now),
            },
        )

    def mark_failed(self, reason: str, *, data: dict[str, Any] | None = None) -> VMRequestEvent:
        """provisioning | running → failed with a plain-words ``reason``; frees the reservation."""
        return self._transition(
            EventAction.MARK_FAILED,
            actor_label="worker",
            message=reason,
            data=data,
            fields={"failure_reason": reason},
        )

    def start_deletion(self, reason: str, by: Any = None, note: str = "") -> VMRequestEvent:
        """provisioning | running → deleting for ``reason`` (a ``DeletionReason``)."""
        return self._transition(
            EventAction.START_DELETION,
            actor=by,
            actor_label="" if by else "worker",
            message=note or str(DeletionReason(reason).label),
            fields={"deletion_reason": reason},
        )

    def mark_deleted(self, reason: str = "", message: str = "") -> VMRequestEvent:
        """deleting | running → deleted (the VMI is gone); frees the reservation. ``reason`` is
        needed only when the VMI vanished while running (``DeletionReason.DELETED_OUTSIDE``)."""
        fields = {"deletion_reason": reason} if reason else {}
        return self._transition(
            EventAction.MARK_DELETED, actor_label="worker", message=message, fields=fields
        )
