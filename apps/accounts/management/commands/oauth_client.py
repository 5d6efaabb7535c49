"""``manage.py oauth_client create --name NAME [--public | --jwks-uri URI] [--redirect-uri URI]...
[--grant G]...``: register a client of ``/oauth2/token`` and print ``{client_id, client_secret?}``
as JSON (the secret is shown only here; only its hash is stored). A client with ``--jwks-uri``
has no secret: it authenticates with ``private_key_jwt`` assertions signed by those keys."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.accounts.clients import oauth_client_create
from apps.accounts.models import OAuthClient


class Command(BaseCommand):
    help = "Register an OAuth2 client (token exchange or authorization code)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a client and print its id and secret")
        create.add_argument("--name", required=True)
        create.add_argument("--public", action="store_true", help="no secret (browser, app)")
        create.add_argument("--jwks-uri", default="",
                            help="private_key_jwt: the client's public keys (no secret)")
        create.add_argument("--redirect-uri", action="append", default=[], dest="redirect_uris")
        create.add_argument("--grant", action="append", default=[], dest="grants",
                            choices=OAuthClient.Grant.values)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] != "create":
            raise CommandError("unknown action")
        grants = options["grants"] or [OAuthClient.Grant.TOKEN_EXCHANGE]
        if OAuthClient.Grant.AUTHORIZATION_CODE in grants and not options["redirect_uris"]:
            raise CommandError("--grant authorization-code needs at least one --redirect-uri")
        if options["jwks_uri"] and options["public"]:
            raise CommandError("--jwks-uri is for confidential clients, not --public")
        client, secret = oauth_client_create(
            name=options["name"], public=options["public"],
            redirect_uris=options["redirect_uris"], grants=grants,
            jwks_uri=options["jwks_uri"] or None,
        )
        out: dict[str, str] = {"client_id": client.client_id}
        if secret:
            out["client_secret"] = secret
        self.stdout.write(json.dumps(out))
