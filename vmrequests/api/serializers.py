"""Serializers of the VM request API.

Output: ``VMRequestSerializer`` (the request as the API and webhooks show it),
``VMRequestEventSerializer`` (one timeline entry), ``TeamSerializer``, ``VmImageSerializer``.
Input: ``VMRequestCreateSerializer`` (shape, types and the model's length caps only; the request
rules run in ``vmrequests.validation.validate``, the same as for the browser form) and one small
serializer per action.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.core.validators import MaxLengthValidator
from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.strict import StrictSerializer
from vmrequests import policy
from vmrequests.choices import DeletionReason, VMMode, VMRequestStatus
from vmrequests.models import (
    MAX_CPU_CORES,
    MAX_DEVICES,
    MAX_MEMORY_GIB,
    GpuQuota,
    Team,
    VmImage,
    VMRequest,
    VMRequestEvent,
)
from vmrequests.validation import MAX_NAME_LENGTH, model_cap


def _blank_choice(choices: Sequence[tuple[str, Any]], help_text: str) -> serializers.ChoiceField:
    """A read-only choice output that may also be ``""``. Declared because DRF drops
    ``allow_blank`` from read-only model fields, and the schema would then forbid the ``""`` a
    blank model field has."""
    return serializers.ChoiceField(choices=choices, allow_blank=True, read_only=True, help_text=help_text)


def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


class ActionDecisionSerializer(serializers.Serializer[Any]):
    """The policy's answer for one action and the caller (``vmrequests.policy``)."""

    allowed = serializers.BooleanField(read_only=True)
    reason = serializers.CharField(read_only=True, help_text='Why not, in plain words; "" when allowed.')
    kind = serializers.ChoiceField(
        choices=["", "role", "status", "rule", "state"],
        allow_blank=True,
        read_only=True,
        help_text='"" when allowed; "role" and "rule": the action would be 403 not-allowed; "status" and '
        '"state": 409 invalid-transition (the request is not in a state the action starts from).',
    )


#: ``allowed_actions``: one ``ActionDecisionSerializer`` per action of ``policy.ACTIONS``.
AllowedActionsSerializer = type(
    "AllowedActionsSerializer",
    (serializers.Serializer,),
    {
        "__doc__": "Every action of the request and whether the caller may run it now.",
        **{
            name: ActionDecisionSerializer(read_only=True, help_text=str(rule.label))
            for name, rule in policy.ACTIONS.items()
        },
    },
)


class VMRequestSerializer(serializers.ModelSerializer[VMRequest]):
    """One VM request. Sizes: ``cpu_cores`` (cores), ``memory_gib`` (GiB), ``device_count``
    devices of ``resource_name`` (``""`` while a vGPU type waits for a re-profile) or of
    ``vgpu_type``. Times are ISO 8601 UTC. ``ssh_command`` (``virtctl ssh ...``) is set while
    the VM runs. ``lease_extended_days``: days granted extensions added (the lease is
    ``lease_days`` + these, at most the team's ``max_lease_days``). ``allowed_actions``: the
    policy's answer for the caller, per action (``null`` without a caller: webhook payloads)."""

    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    image: serializers.SlugRelatedField[VmImage] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    requester = serializers.SerializerMethodField()
    submitted_by = serializers.SerializerMethodField()
    decided_by = serializers.SerializerMethodField()
    ssh_command = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    allowed_actions = serializers.SerializerMethodField()
    deletion_reason = _blank_choice(DeletionReason.choices, '"" until deleted.')

    class Meta:
        model = VMRequest
        fields = [
            "id",
            "url",
            "status",
            "team",
            "requester",
            "submitted_by",
            "ticket_source",
            "ticket_id",
            *VMRequest.SPEC_FIELDS,
            "ssh_public_key",
            "lease_days",
            "justification",
            "vmi_namespace",
            "vmi_name",
            "node_name",
            "ip_address",
            "ssh_command",
            "decided_by",
            "decided_by_policy",
            "decided_at",
            "decision_note",
            "failure_reason",
            "deletion_reason",
            "lease_end",
            "extension_days_requested",
            "extension_reason",
            "lease_extended_days",
            "vmi_created_at",
            "created",
            "updated",
            "allowed_actions",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField())
    def get_requester(self, obj: VMRequest) -> str:
        return obj.requester.get_username()

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_submitted_by(self, obj: VMRequest) -> str | None:
        return _username(obj.submitted_by)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_decided_by(self, obj: VMRequest) -> str | None:
        return _username(obj.decided_by)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_ssh_command(self, obj: VMRequest) -> str | None:
        """``virtctl ssh <login user>@vmi/<VMI> -n <namespace>`` while the VM runs (the same line
        as the request page; the IP is on the pod network, rarely reachable from outside)."""
        if obj.status != "running" or not obj.vmi_name:
            return None
        return obj.virtctl_commands[0]

    @extend_schema_field(AllowedActionsSerializer(allow_null=True))
    def get_allowed_actions(self, obj: VMRequest) -> dict[str, dict[str, Any]] | None:
        """``{action: {"allowed", "reason", "kind"}}`` for the caller (``policy.allowed_actions``);
        one ``policy.Viewer`` per response (``context["policy_viewer"]``). None without a caller."""
        request = self.context.get("request")
        user = getattr(request, "user", None)
        if user is None:
            return None
        viewer = self.context.get("policy_viewer")
        if not isinstance(viewer, policy.Viewer) or viewer.user is not user:
            viewer = policy.Viewer(user)
        return {
            name: {"allowed": decision.allowed, "reason": decision.reason, "kind": decision.kind}
            for name, decision in policy.allowed_actions(user, obj, viewer=viewer).items()
        }

    @extend_schema_field(serializers.CharField())
    def get_url(self, obj: VMRequest) -> str:
        """The request's page in the portal (absolute when the API request is known)."""
        path = obj.get_absolute_url()
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path


class VMRequestEventSerializer(serializers.ModelSerializer[VMRequestEvent]):
    """One timeline entry: who (``actor``: a username, or ``policy``/``worker``/``system``),
    ``action``, ``from_status`` → ``to_status``, ``message``, structured ``data``."""

    actor = serializers.SerializerMethodField()
    request: serializers.PrimaryKeyRelatedField[VMRequest] = serializers.PrimaryKeyRelatedField(
        read_only=True
    )
    from_status = _blank_choice(VMRequestStatus.choices, '"" for the first entry.')

    class Meta:
        model = VMRequestEvent
        fields = [
            "id",
            "request",
            "created",
            "actor",
            "action",
            "from_status",
            "to_status",
            "message",
            "data",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField())
    def get_actor(self, obj: VMRequestEvent) -> str:
        return obj.actor.get_username() if obj.actor is not None else obj.actor_label


def _capped(length: int, **kwargs: Any) -> serializers.CharField:
    """A text field of at most ``length`` characters, refused with Django's message and code
    (``max_length``) so the API and the browser form word the refusal alike; drf-spectacular
    reads the validator as the schema's ``maxLength``."""
    return serializers.CharField(validators=[MaxLengthValidator(length)], **kwargs)


class VMRequestCreateSerializer(StrictSerializer):
    """The body of ``POST /api/v1/vm-requests/``.

    GPU: ``resource_name`` (exact, e.g. ``nvidia.com/GA107GL_A2000_12GB``) or, for vGPU,
    ``vgpu_type`` (bare, e.g. ``T4-8Q``; a type no node offers yet is placed by re-profiling an
    idle node). ``team`` may be left out when the requester is in exactly one team; ``cpu_cores``,
    ``memory_gib`` default to the image's, ``lease_days`` to the team's default.
    ``requested_for``: a username; needs the ``vmrequests.submit_for_others`` permission.
    Only types and lengths are checked here; the rules are ``vmrequests.validation``'s.
    """

    team = serializers.SlugField(
        validators=[MaxLengthValidator(model_cap(Team, "slug"))], required=False, help_text="team slug"
    )
    mode = serializers.ChoiceField(choices=VMMode.choices)
    resource_name = _capped(model_cap(VMRequest, "resource_name"), required=False, allow_blank=True)
    vgpu_type = _capped(model_cap(VMRequest, "vgpu_type"), required=False, allow_blank=True)
    device_count = serializers.IntegerField(min_value=1, max_value=MAX_DEVICES, default=1)
    cpu_cores = serializers.IntegerField(min_value=1, max_value=MAX_CPU_CORES, required=False)
    memory_gib = serializers.IntegerField(min_value=1, max_value=MAX_MEMORY_GIB, required=False)
    image = _capped(model_cap(VmImage, "name"), help_text="image name (GET /api/v1/images/)")
    name = _capped(MAX_NAME_LENGTH, required=False, allow_blank=True, help_text="VMI name")
    ssh_public_key = _capped(model_cap(VMRequest, "ssh_public_key"), allow_blank=True)
    lease_days = serializers.IntegerField(min_value=1, max_value=3650, required=False)
    justification = _capped(model_cap(VMRequest, "justification"), allow_blank=True)
    ticket_source = _capped(model_cap(VMRequest, "ticket_source"), required=False, allow_blank=True)
    ticket_id = _capped(model_cap(VMRequest, "ticket_id"), required=False, allow_blank=True)
    requested_for = _capped(
        model_cap(get_user_model(), "username"), required=False, allow_blank=True, help_text="username"
    )


class TextField(serializers.CharField):
    """A string field that refuses other JSON types (DRF's ``CharField`` turns ``77`` into
    ``"77"``; the schema says string, so a number is a 400 with code ``invalid``)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class NoteSerializer(StrictSerializer):
    """Body of ``approve``, ``cancel``, ``release`` and ``retry``: an optional note for the timeline."""

    note = TextField(required=False, allow_blank=True, max_length=2000, default="")


class RejectSerializer(StrictSerializer):
    """Body of ``reject`` and ``terminate``: the reason the requester will read (required)."""

    reason = TextField(max_length=2000)


class ExtendSerializer(StrictSerializer):
    """Body of ``extend``: ``days`` more lease (1 to the team's maximum) and a ``reason``."""

    days = serializers.IntegerField(min_value=1, max_value=3650)
    reason = TextField(max_length=2000)


class ExtensionDecisionSerializer(StrictSerializer):
    """Body of ``extension-decision``: grant (``approve: true``) or refuse the pending extension."""

    approve = serializers.BooleanField()
    note = TextField(required=False, allow_blank=True, max_length=2000, default="")


class QuotaSerializer(serializers.ModelSerializer[GpuQuota]):
    """One quota: at most ``max_devices`` devices held at once, for ``mode``/``gpu`` (blank = any)."""

    class Meta:
        model = GpuQuota
        fields = ["mode", "gpu", "max_devices"]
        read_only_fields = fields


class TeamSerializer(serializers.ModelSerializer[Team]):
    """A team: namespace, lease policy (days), quotas, and the caller's role in it."""

    quotas = QuotaSerializer(many=True, read_only=True)
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "namespace", "default_lease_days", "max_lease_days", "quotas", "role"]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.ChoiceField(["member", "approver"])))
    def get_role(self, obj: Team) -> list[str]:
        """``member`` and/or ``approver`` for the caller (empty for an admin seeing any team)."""
        request = self.context.get("request")
        user = getattr(request, "user", None)
        if user is None:
            return []
        roles = []
        if any(m.pk == user.pk for m in obj.members.all()):
            roles.append("member")
        if any(a.pk == user.pk for a in obj.approvers.all()):
            roles.append("approver")
        return roles


class VmImageSerializer(serializers.ModelSerializer[VmImage]):
    """An image analysts may pick (``name`` is what ``POST /vm-requests/`` takes); sizes in
    cores and GiB."""

    class Meta:
        model = VmImage
        fields = [
            "name",
            "image",
            "os",
            "login_user",
            "min_memory_gib",
            "default_cpu_cores",
            "default_memory_gib",
        ]
        read_only_fields = fields


def with_caller_roles(teams: QuerySet[Team], user: Any) -> QuerySet[Team]:
    """``teams`` with ``members`` and ``approvers`` prefetched as just ``user`` (one query each,
    however large the teams), so ``user in team.members.all()`` tells the caller's role."""
    only_me = get_user_model().objects.filter(pk=user.pk or 0)
    return teams.prefetch_related(
        Prefetch("members", queryset=only_me), Prefetch("approvers", queryset=only_me)
    )
