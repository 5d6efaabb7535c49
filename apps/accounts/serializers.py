"""Input/output serializers of the auth endpoints: email + password login, refresh (rotating),
logout, ``me``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import update_last_login
from rest_framework import exceptions, serializers
from rest_framework_simplejwt.exceptions import AuthenticationFailed
from rest_framework_simplejwt.serializers import (
    TokenObtainPairSerializer as BaseTokenObtainPairSerializer,
)
from rest_framework_simplejwt.serializers import (
    TokenObtainSerializer as BaseTokenObtainSerializer,
)
from rest_framework_simplejwt.serializers import (
    TokenRefreshSerializer as BaseTokenRefreshSerializer,
)
from rest_framework_simplejwt.settings import api_settings

from .services import RefreshRefused, refresh_token_rotate, token_family_start
from .tokens import RefreshToken


class TokenObtainPairSerializer(BaseTokenObtainPairSerializer):
    """``{email, password}`` -> ``{access, refresh}``; one answer for every kind of refusal."""

    token_class = RefreshToken

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["email"] = serializers.EmailField(write_only=True, max_length=254)
        # The browser's device id: bound into both tokens, it names the device that executes
        # the tool calls of the sessions it sends to.
        self.fields["device_id"] = serializers.CharField(
            write_only=True, required=False, allow_blank=True, max_length=128
        )

    def validate(self, attrs: dict[str, Any]) -> dict[str, str]:
        device_id = attrs.pop("device_id", "")
        # Emails are stored lower-cased (UserManager, User.clean), so match them that way.
        try:
            # TokenObtainSerializer's: authentication only; the pair comes from a new family.
            BaseTokenObtainSerializer.validate(
                self, {**attrs, "email": attrs["email"].strip().lower()}
            )
        except exceptions.AuthenticationFailed as exc:
            # simplejwt's flavour puts the code in the body: {"detail", "code"}, like the rest.
            raise AuthenticationFailed(
                self.error_messages["no_active_account"], "no_active_account"
            ) from exc
        data = token_family_start(user=self.user, device_id=device_id)
        if api_settings.UPDATE_LAST_LOGIN:
            update_last_login(None, self.user)
        return data


class TokenRefreshSerializer(BaseTokenRefreshSerializer):
    """``{refresh}`` -> ``{access, refresh}``: the refresh token is used up and replaced
    (``refresh_token_rotate``); 401 with the refusal's code otherwise."""

    token_class = RefreshToken

    def validate(self, attrs: dict[str, Any]) -> dict[str, str]:
        try:
            return refresh_token_rotate(token=attrs["refresh"])
        except RefreshRefused as exc:
            raise AuthenticationFailed(exc.detail, exc.code) from None


class RefreshInputSerializer(serializers.Serializer):
    refresh = serializers.CharField(max_length=4096)


class ErrorOutputSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField(required=False)


class TokenPairOutputSerializer(serializers.Serializer):
    access = serializers.CharField()
    refresh = serializers.CharField()


class MeOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    email = serializers.EmailField()


class JwkSerializer(serializers.Serializer):
    kid = serializers.CharField()
    kty = serializers.ChoiceField(choices=["RSA", "EC", "OKP"])
    alg = serializers.ChoiceField(choices=["RS256", "ES256", "EdDSA"])
    use = serializers.CharField()
    n = serializers.CharField(required=False)
    e = serializers.CharField(required=False)
    crv = serializers.CharField(required=False)
    x = serializers.CharField(required=False)
    y = serializers.CharField(required=False)


class JwksSerializer(serializers.Serializer):
    keys = JwkSerializer(many=True)
