from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.decorators.gzip import gzip_page
from drf_spectacular.views import SpectacularSwaggerView

from accounts.api.urls import router as portal_router
from accounts.api.urls import urlpatterns as accounts_api_paths
from accounts.api.views import MeView
from accounts.sso_forms import PortalAuthenticationForm
from accounts.sso_views import PortalLogoutView
from core.api.routers import IdRouter
from gpus.api.urls import router as gpus_router
from jobs.api.streams import TeamEventStreamView
from jobs.teams.api.templates import TemplateDetailView, TemplateListView
from jobs.teams.api.views import MemberSharesView, PeopleUsageView, PreemptionView, UsageView
from jobs.urls import api_router as jobs_router
from planner.api.urls import router as planner_router
from planner.api.urls import urlpatterns as planner_api_paths
from telemetry.api.views import TelemetryIngestView, UtilisationView

from . import views
from .api_schema import SchemaView
from .metrics import metrics_view

# One API root listing every app's endpoints; a detail URL takes an id in ASCII digits (else 404) unless its
# viewset names its own lookup pattern (nodes: by name).
# The jobs' routes first, and the router's before the other API paths: Django tries a request's path against each
# pattern in order and lists every one it tried, so a pipeline's poll (GET jobs/{id}/) tries 2 of these, not 29
# (bench/api_cpu.py --profile detail: resolving the URL took half the CPU it took before). No two patterns here
# match the same path, and the schema sorts its paths, so the order changes nothing else.
api_router = IdRouter()
for app_router in (jobs_router, gpus_router, planner_router, portal_router):
    api_router.registry.extend(app_router.registry)

api_patterns = [
    *api_router.urls,
    path("me/", MeView.as_view(), name="me"),
    path("teams/<slug:slug>/events/stream/", TeamEventStreamView.as_view(), name="team-events-stream"),
    path("teams/<slug:slug>/member-shares/", MemberSharesView.as_view(), name="team-member-shares"),
    path("teams/<slug:slug>/preemption/", PreemptionView.as_view(), name="team-preemption"),
    path("teams/<slug:slug>/templates/", TemplateListView.as_view(), name="team-templates"),
    path("teams/<slug:slug>/templates/<slug:name>/", TemplateDetailView.as_view(), name="team-template"),
    *accounts_api_paths,
    *planner_api_paths,
]

urlpatterns = [
    path("api/v1/telemetry/samples/", TelemetryIngestView.as_view(), name="telemetry-ingest"),
    path("api/v1/utilisation/", UtilisationView.as_view(), name="utilisation"),
    path("api/v1/usage/", UsageView.as_view(), name="usage"),
    path("api/v1/usage/people/", PeopleUsageView.as_view(), name="usage-people"),
    # The API before the pages (no pattern of theirs matches a path under api/v1/): a pipeline's request is
    # resolved without first trying, and listing as tried, every page's URL pattern.
    path("api/v1/", include((api_patterns, "api"))),
    path("", views.overview, name="overview"),
    path(
        "login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True, authentication_form=PortalAuthenticationForm),
        name="login",
    ),
    path("logout/", PortalLogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("", include("accounts.urls")),
    path("", include("accounts.sso_urls")),
    path("", include("gpus.urls")),
    path("", include("jobs.urls")),
    path("", include("planner.urls")),
    path("admin/", admin.site.urls),
    # Generated once a process (portal/api_schema.py); gzipped for a browser that accepts it.
    path("api/schema/", gzip_page(SchemaView.as_view()), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
]

# A path under /api/ that matches nothing (or an id that is not a number) answers JSON like the rest of the API.
handler404 = "portal.views.not_found"
