"""VM request API: list/create/retrieve, the actions, the timeline; teams and images.

Visibility is ``VMRequest.objects.visible_to`` (404 for requests the caller may not see); who
may do what is ``vmrequests.policy`` (the services call it; every request carries its answer for
the caller as ``allowed_actions``), mapped to problem details here: ``NotAllowed`` → 403
``not-allowed`` (409 ``invalid-transition`` with ``current_status`` when the request's state
refused it, as for a lost race: ``TransitionError``), ``ApprovalRefused`` → 409
``approval-refused``, ``ValueError`` → 400. The actions are the pages' actions: approve, reject,
cancel, release, terminate, retry, extend, extension-decision. Token scopes: ``scope_for_action``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from portal.api.pagination import StandardPagination
from portal.api.problems import ProblemError
from portal.api.schema import list_problem_responses, problem_responses
from portal.models import TokenScope
from vmrequests import approval, policy
from vmrequests.api.creation import CreateOutcome, create_request
from vmrequests.api.serializers import (
    ExtendSerializer,
    ExtensionDecisionSerializer,
    NoteSerializer,
    RejectSerializer,
    TeamSerializer,
    VmImageSerializer,
    VMRequestCreateSerializer,
    VMRequestEventSerializer,
    VMRequestSerializer,
    with_caller_roles,
)
from vmrequests.filtersets import VMRequestFilterSet
from vmrequests.models import Team, TransitionError, VmImage, VMRequest, VMRequestEvent
from vmrequests.validation import user_teams

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Any unique string (≤ 255 characters). The same key again returns the request it created "
    "(200) when the body is the same, 409 when it differs.",
)


@extend_schema_view(
    list=extend_schema(
        summary="List VM requests you may see",
        responses={200: VMRequestSerializer, **list_problem_responses(400, 401, 403, 429)},
    ),
    retrieve=extend_schema(
        summary="One VM request",
        responses={200: VMRequestSerializer, **problem_responses(401, 403, 404, 429)},
    ),
)
class VMRequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[VMRequest]):
    """VM requests the caller may see (their own, and their teams'; admins all)."""

    serializer_class = VMRequestSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = VMRequestFilterSet
    pagination_class = StandardPagination
    scope_for_action = {
        "list": TokenScope.READ,
        "retrieve": TokenScope.READ,
        "events": TokenScope.READ,
        "create": TokenScope.WRITE,
        "cancel": TokenScope.WRITE,
        "release": TokenScope.WRITE,
        "extend": TokenScope.WRITE,
        "approve": TokenScope.APPROVE,
        "reject": TokenScope.APPROVE,
        "terminate": TokenScope.APPROVE,
        "retry": TokenScope.APPROVE,
        "extension_decision": TokenScope.APPROVE,
    }

    def get_queryset(self) -> QuerySet[VMRequest]:
        """``visible_to(user)``, newest first, with the related rows the serializer reads."""
        return (
            VMRequest.objects.visible_to(self.request.user)
            .select_related("team", "image", "requester", "submitted_by", "decided_by")
            .order_by("-created", "-pk")
        )

    def get_serializer_context(self) -> dict[str, Any]:
        """DRF's context plus one ``policy.Viewer`` of the caller for every row's ``allowed_actions``."""
        return {**super().get_serializer_context(), "policy_viewer": policy.Viewer(self.request.user)}

    def _respond(self, req: VMRequest, code: int = status.HTTP_200_OK) -> Response:
        req = self.get_queryset().get(pk=req.pk)
        return Response(VMRequestSerializer(req, context=self.get_serializer_context()).data, status=code)

    # --- create ------------------------------------------------------------------------------

    @extend_schema(
        summary="Create a VM request (idempotent on ticket ID and Idempotency-Key)",
        request=VMRequestCreateSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={
            201: OpenApiResponse(VMRequestSerializer, description="Created."),
            200: OpenApiResponse(
                VMRequestSerializer,
                description="The same ticket ID or Idempotency-Key with the same content: the existing request.",
            ),
            **problem_responses(400, 401, 403, 409, 429),
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Validate as the browser form does, then submit; see ``vmrequests.api.creation``."""
        body = VMRequestCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = request.headers.get("Idempotency-Key", "").strip()
        if len(key) > 255:
            raise ProblemError(
                400,
                "validation-error",
                _("The Idempotency-Key header is longer than 255 characters."),
                errors=[
                    {"field": "Idempotency-Key", "code": "max_length", "detail": _("At most 255 characters.")}
                ],
            )
        outcome: CreateOutcome = create_request(request.user, dict(body.validated_data), key)
        return self._respond(
            outcome.request, status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK
        )

    # --- timeline ----------------------------------------------------------------------------

    @extend_schema(
        summary="The request's timeline (oldest first)",
        responses={200: VMRequestEventSerializer(many=True), **problem_responses(401, 403, 404, 429)},
    )
    @action(detail=True, methods=["get"], serializer_class=VMRequestEventSerializer, filter_backends=[])
    def events(self, request: Request, pk: str | None = None) -> Response:
        """Every timeline entry of the request, paginated, oldest first."""
        req = self.get_object()
        events = VMRequestEvent.objects.filter(request=req).select_related("actor").order_by("created", "pk")
        page = self.paginate_queryset(events)  # type: ignore[arg-type]
        data = VMRequestEventSerializer(page, many=True).data  # type: ignore[arg-type]
        return self.get_paginated_response(data)

    # --- actions -----------------------------------------------------------------------------

    def _act(
        self, body_class: type[BaseSerializer[Any]], run: Callable[[VMRequest, dict[str, Any]], Any]
    ) -> Response:
        body = body_class(data=self.request.data)
        body.is_valid(raise_exception=True)
        req = self.get_object()
        try:
            run(req, dict(body.validated_data))
        except approval.NotAllowed as exc:
            if exc.is_conflict:
                raise ProblemError(
                    409, "invalid-transition", str(exc), extra={"current_status": req.status}
                ) from exc
            raise ProblemError(403, "not-allowed", str(exc)) from exc
        except TransitionError as exc:
            raise ProblemError(
                409, "invalid-transition", str(exc), extra={"current_status": exc.current}
            ) from exc
        except approval.ApprovalRefused as exc:
            problems = exc.verdict.problems()
            raise ProblemError(
                409,
                "approval-refused",
                " ".join(problems),
                errors=[{"field": None, "code": "capacity", "detail": p} for p in problems],
                extra={"alternatives": [a.describe() for a in exc.verdict.alternatives]},
            ) from exc
        except ValueError as exc:
            raise ProblemError(
                400,
                "validation-error",
                str(exc),
                errors=[{"field": None, "code": "invalid", "detail": str(exc)}],
            ) from exc
        return self._respond(req)

    @extend_schema(
        summary="Approve (approvers of the team; re-checks capacity and quota)",
        request=NoteSerializer,
        responses={200: VMRequestSerializer, **problem_responses(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve: the worker then creates the VMI (re-profiling a node first when planned)."""
        return self._act(NoteSerializer, lambda req, d: approval.approve(req, request.user, d["note"]))

    @extend_schema(
        summary="Reject with a reason (approvers of the team)",
        request=RejectSerializer,
        responses={200: VMRequestSerializer, **problem_responses(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject; the requester reads ``reason``."""
        return self._act(RejectSerializer, lambda req, d: approval.reject(req, request.user, d["reason"]))

    @extend_schema(
        summary="Cancel before it runs (requester, its filer, or an approver)",
        request=NoteSerializer,
        responses={200: VMRequestSerializer, **problem_responses(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel a submitted or approved request (its reservation is freed)."""
        return self._act(NoteSerializer, lambda req, d: approval.cancel(req, request.user, d["note"]))

    @extend_schema(
        summary="Release a VM: the requester's (or its filer's) \"I am done\"",
        request=NoteSerializer,
        responses={200: VMRequestSerializer, **problem_responses(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """End the VM early: the worker deletes the VMI, the request becomes deleted."""
        return self._act(NoteSerializer, lambda req, d: approval.release(req, request.user, d["note"]))

    @extend_schema(
        summary="Terminate a VM: an approver's forced stop, with the reason the requester is mailed",
        request=RejectSerializer,
        responses={200: VMRequestSerializer, **problem_responses(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def terminate(self, request: Request, pk: str | None = None) -> Response:
        """Stop a provisioning or running VM of someone else (approvers of the team): the worker
        deletes the VMI; ``reason`` goes to the timeline and the requester's mail."""
        return self._act(RejectSerializer, lambda req, d: approval.terminate(req, request.user, d["reason"]))

    @extend_schema(
        summary="Retry a failed request (approvers of the team; re-checks capacity and quota)",
        request=NoteSerializer,
        responses={200: VMRequestSerializer, **problem_responses(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """Approve a failed request again: devices reserved anew, the worker provisions it again."""
        return self._act(NoteSerializer, lambda req, d: approval.retry(req, request.user, d["note"]))

    @extend_schema(
        summary="Ask for a longer lease (requester or its filer)",
        request=ExtendSerializer,
        responses={200: VMRequestSerializer, **problem_responses(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str | None = None) -> Response:
        """Ask for ``days`` more lease on a running VM; an approver decides (``extension-decision``)."""
        return self._act(
            ExtendSerializer,
            lambda req, d: approval.request_extension(req, request.user, d["days"], d["reason"]),
        )

    @extend_schema(
        summary="Grant or refuse a pending lease extension (approvers of the team)",
        request=ExtensionDecisionSerializer,
        responses={200: VMRequestSerializer, **problem_responses(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"], url_path="extension-decision")
    def extension_decision(self, request: Request, pk: str | None = None) -> Response:
        """Grant (the lease end moves) or refuse the pending extension."""
        return self._act(
            ExtensionDecisionSerializer,
            lambda req, d: approval.decide_extension(req, request.user, approve=d["approve"], note=d["note"]),
        )


@extend_schema_view(
    list=extend_schema(
        summary="Your teams (admins: every team)",
        responses={200: TeamSerializer, **list_problem_responses(401, 403, 429)},
    ),
    retrieve=extend_schema(
        summary="One team", responses={200: TeamSerializer, **problem_responses(401, 403, 404, 429)}
    ),
)
class TeamViewSet(viewsets.ReadOnlyModelViewSet[Team]):
    """Teams the caller is a member or an approver of (admins: all), with quotas and lease policy."""

    serializer_class = TeamSerializer
    lookup_field = "slug"
    pagination_class = StandardPagination

    def get_queryset(self) -> QuerySet[Team]:
        """Visible teams; members/approvers prefetched as just the caller (for ``role``)."""
        user = self.request.user
        base = (
            Team.objects.all()
            if user.is_superuser
            else Team.objects.filter(pk__in=user_teams(user).values("pk"))
        )
        return with_caller_roles(base.order_by("name").prefetch_related("quotas"), user)


@extend_schema_view(
    list=extend_schema(
        summary="Images you may request",
        responses={200: VmImageSerializer, **list_problem_responses(401, 403, 429)},
    ),
    retrieve=extend_schema(
        summary="One image", responses={200: VmImageSerializer, **problem_responses(401, 403, 404, 429)}
    ),
)
class VmImageViewSet(viewsets.ReadOnlyModelViewSet[VmImage]):
    """Enabled VM images, by name."""

    serializer_class = VmImageSerializer
    queryset = VmImage.objects.filter(enabled=True).order_by("name")
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    pagination_class = StandardPagination
