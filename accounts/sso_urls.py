"""Single sign-on's URLs (included once by portal/urls.py): the OpenID Connect flow and the mapping page."""

from django.urls import path

from . import sso_views

urlpatterns = [
    path("oidc/authenticate/", sso_views.SsoStartView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", sso_views.SsoCallbackView.as_view(), name="oidc_authentication_callback"),
    path("sso/mappings/", sso_views.mapping_list, name="sso-mapping-list"),
    path("sso/mappings/<int:pk>/delete/", sso_views.mapping_delete, name="sso-mapping-delete"),
]
