"""Describes the portal's bearer tokens to drf-spectacular (imported from PortalConfig.ready)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class APITokenScheme(OpenApiAuthenticationExtension):
    target_class = "portal.authentication.APITokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A portal API token (Account › API tokens): `Authorization: Bearer gpp_…`.",
        }


class NodeAgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "gpus.api.telemetry.NodeAgentTokenAuthentication"
    name = "nodeAgentToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A node agent token (`manage.py issue_agent_token <node>`): `Authorization: Bearer gpa_…`.",
        }
