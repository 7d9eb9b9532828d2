"""Start-up checks of the operator's address settings (docs/operator-guide.md, "Inference services" and "Workspace
sign-in"): a PORTAL_SERVICE_URL_TEMPLATE every service can be given an address from, a PORTAL_SERVICE_INGRESS_CLASS
that names an IngressClass and comes with a template, and a PORTAL_NOTEBOOK_ACCESS the portal knows, whose "portal"
sign-in can find each notebook from its address. Errors stop ``manage.py`` commands and the server from starting,
with every problem listed; an ingress class without a template is a warning (no Ingress would ever be made)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from jobs.service.render import url_template_problems
from vocab.names import DNS1123_SUBDOMAIN


@checks.register(checks.Tags.compatibility)
def service_address_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    template = str(getattr(settings, "PORTAL_SERVICE_URL_TEMPLATE", "") or "")
    ingress_class = str(getattr(settings, "PORTAL_SERVICE_INGRESS_CLASS", "") or "")
    messages: list[checks.CheckMessage] = [
        checks.Error(problem, id="jobs.E001") for problem in url_template_problems(template, bool(ingress_class))
    ]
    if ingress_class and (len(ingress_class) > 253 or not DNS1123_SUBDOMAIN.fullmatch(ingress_class)):
        messages.append(checks.Error(
            f"PORTAL_SERVICE_INGRESS_CLASS {ingress_class!r} is not an IngressClass name: use the lowercase name "
            "`kubectl get ingressclass` lists (letters, digits, '-' and '.').", id="jobs.E002",
        ))  # fmt: skip
    if ingress_class and not template:
        messages.append(checks.Warning(
            f"PORTAL_SERVICE_INGRESS_CLASS is {ingress_class!r} but PORTAL_SERVICE_URL_TEMPLATE is empty, so no "
            "service gets an Ingress; set the template (e.g. https://{name}-{team}.apps.example.com).",
            id="jobs.W001",
        ))  # fmt: skip
    return messages


@checks.register(checks.Tags.compatibility)
def notebook_access_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    access = str(getattr(settings, "PORTAL_NOTEBOOK_ACCESS", "token"))
    template = str(getattr(settings, "PORTAL_NOTEBOOK_URL_TEMPLATE", ""))
    if access not in ("token", "portal"):
        return [checks.Error(
            f"PORTAL_NOTEBOOK_ACCESS {access!r} is not a way to sign into notebooks: use token (Jupyter asks for the "
            "token shown to the owner) or portal (the ingress asks the portal; docs/operator-guide.md).",
            id="jobs.E003",
        )]  # fmt: skip
    if access == "portal" and ("{name}" not in template or "?" in template or "#" in template):
        return [checks.Error(
            f"PORTAL_NOTEBOOK_URL_TEMPLATE {template!r} must name {{name}} in its host or path, with no query or "
            "fragment, for PORTAL_NOTEBOOK_ACCESS=portal: the portal finds the notebook a request is for from it.",
            id="jobs.E004",
        )]  # fmt: skip
    return []
