"""The planner's API: admins make, read and cancel plan runs; team leads read them (their teams' rows only);
everybody else gets 403. Thin: planner.validation checks requests, planner.runs changes runs."""

from __future__ import annotations

import io

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, generics, renderers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from accounts.permissions import IsAuthenticatedWithTokenScope

from .. import access, export, runs, validation
from ..models import PlanRun
from .serializers import PlanRequestSerializer, PlanRunDetailSerializer, PlanRunSerializer

ERRORS = {
    403: OpenApiResponse(description="Not signed in, a read-only token, or not an admin (leads may only read)."),
    404: OpenApiResponse(description="No such plan run."),
}


class CSVRenderer(renderers.BaseRenderer):
    """Lets a client that asks for text/csv reach the export (the response is built by the view)."""

    media_type = "text/csv"
    format = "csv"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, bytes) else str(data).encode()


class PlannerPermission(IsAuthenticatedWithTokenScope):
    """Reading: admins and team leads. Anything else: admins (access.can_run)."""

    def has_permission(self, request, view):
        if not super().has_permission(request, view):
            return False
        if request.method in ("GET", "HEAD", "OPTIONS"):
            self.message = "The capacity planner is for portal admins and team leads."
            return access.can_read(request.user)
        self.message = "Only portal admins can start or cancel plan runs."
        return access.can_run(request.user)


@extend_schema_view(
    list=extend_schema(
        summary="List plan runs",
        description="Newest first, without results.",
        responses={200: PlanRunSerializer(many=True), **ERRORS},
    ),
    retrieve=extend_schema(
        summary="One plan run: state, progress and results", responses={200: PlanRunDetailSerializer, **ERRORS}
    ),
)
@extend_schema(tags=["planner"])
class PlanRunViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = PlanRun.objects.select_related("created_by")
    permission_classes = [PlannerPermission]
    filterset_class = None
    ordering_fields = ["created_at", "id"]

    def get_serializer_class(self):
        return PlanRunSerializer if self.action == "list" else PlanRunDetailSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.action == "list":
            queryset = queryset.defer("results")
        return queryset

    @extend_schema(
        summary="Start a plan run (admins)",
        description="Replays the window's history (the last ``days``, or ``start``..``end``, at most 90 days, not in "
        "the future) against the fleet as it is (the baseline; ``cluster`` limits it to one cluster) and each "
        "proposal (each names its cluster), in the background. Every problem with the request is answered at once, "
        "under the path of the field it is about (``proposals[0].changes[1].nodes``; an unknown ``cluster`` names "
        "the clusters there are). Poll the run for progress; its results arrive when it succeeds.",
        request=PlanRequestSerializer,
        responses={
            202: PlanRunDetailSerializer,
            400: OpenApiResponse(description="The request is invalid; each field path says what to change."),
            **ERRORS,
        },
    )
    def create(self, request, *args, **kwargs):
        try:
            checked = validation.validate_request(request.data)
        except validation.PlanInvalid as invalid:
            raise exceptions.ValidationError(invalid.errors) from None
        run = runs.create_run(request.user, checked)
        return Response(
            PlanRunDetailSerializer(run, context=self.get_serializer_context()).data, status=status.HTTP_202_ACCEPTED
        )

    @extend_schema(
        summary="Cancel a queued or running plan run (admins)",
        description="A queued run ends now; a running one stops at the worker's next check (a second or two): poll "
        "it until its state is cancelled. 409 when it has already ended.",
        request=None,
        responses={
            200: PlanRunDetailSerializer,
            409: OpenApiResponse(description="The run has already ended."),
            **ERRORS,
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = self.get_object()
        try:
            run = runs.cancel_run(request.user, run)
        except runs.RunEnded as ended:
            return Response({"detail": str(ended)}, status=status.HTTP_409_CONFLICT)
        return Response(PlanRunDetailSerializer(run, context=self.get_serializer_context()).data)


@extend_schema(tags=["planner"])
class PlanRunResultsCSV(generics.GenericAPIView):
    """GET /api/v1/planner/runs/{id}/results.csv (a view of its own: the router would add a slash after .csv)."""

    queryset = PlanRun.objects.all()
    permission_classes = [PlannerPermission]
    renderer_classes = [renderers.JSONRenderer, CSVRenderer]
    serializer_class = None
    filterset_class = None
    pagination_class = None
    lookup_url_kwarg = "id"

    def finalize_response(self, request, response, *args, **kwargs):
        # An error (404, 403, 409) answers JSON even when CSV was asked for.
        if response.status_code >= 400 and isinstance(getattr(request, "accepted_renderer", None), CSVRenderer):
            request.accepted_renderer, request.accepted_media_type = renderers.JSONRenderer(), "application/json"
        return super().finalize_response(request, response, *args, **kwargs)

    @extend_schema(
        operation_id="v1_planner_runs_results_csv",
        summary="A plan run's results as CSV",
        description="One row per scenario × (total | team | class | cluster, the last over a fleet) with the "
        "metric columns: "
        + ", ".join(export.COLUMNS)
        + ". A team lead gets the team rows of their own teams only. 409 until the run has succeeded.",
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            409: OpenApiResponse(description="The run has no results (not succeeded)."),
            **ERRORS,
        },
    )
    def get(self, request, id: int):
        run = self.get_object()
        if run.results is None:
            return Response(
                {"detail": f"Plan run #{run.pk} is {run.state}; it has no results."}, status=status.HTTP_409_CONFLICT
            )
        return csv_response(run, access.results_for(request.user, run.results))


def csv_response(run: PlanRun, results: dict) -> HttpResponse:
    out = io.StringIO()
    export.write_csv(out, results)
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="plan-run-{run.pk}.csv"'
    return response
