"""Describes the node agent token to drf-spectacular (imported from TelemetryConfig.ready)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class NodeAgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "telemetry.api.views.NodeAgentTokenAuthentication"
    name = "nodeAgentToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A node agent token (`manage.py issue_agent_token <node>`): `Authorization: Bearer gpa_…`.",
        }
