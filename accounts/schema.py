"""OpenAPI description of the API token scheme (drf-spectacular reads it when it builds the schema)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class APITokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.APITokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A portal API token (API tokens, in the page header): `Authorization: Bearer gpp_…`.",
        }
