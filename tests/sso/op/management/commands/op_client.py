"""Register (or update) the portal as a confidential RS256 client, and make the signing key if there is none."""

from django.core.management import call_command
from django.core.management.base import BaseCommand
from oidc_provider.models import Client, ResponseType, RSAKey


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--client-secret", required=True)
        parser.add_argument("--redirect-uri", required=True)
        parser.add_argument("--post-logout-uri", required=True)

    def handle(self, *args, **options):
        if not RSAKey.objects.exists():
            call_command("creatersakey")
        client, _ = Client.objects.update_or_create(
            client_id=options["client_id"],
            defaults={
                "name": "GPU portal",
                "client_type": "confidential",
                "client_secret": options["client_secret"],
                "jwt_alg": "RS256",
                "require_consent": True,
                "reuse_consent": True,
                "_redirect_uris": options["redirect_uri"],
                "_post_logout_redirect_uris": options["post_logout_uri"],
            },
        )
        client.response_types.set([ResponseType.objects.get(value="code")])
