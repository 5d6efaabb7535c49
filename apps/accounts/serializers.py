"""Input/output serializers of the auth endpoints: email + password login, refresh, ``me``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from rest_framework import exceptions, serializers
from rest_framework_simplejwt.exceptions import AuthenticationFailed
from rest_framework_simplejwt.serializers import (
    TokenObtainPairSerializer as BaseTokenObtainPairSerializer,
)
from rest_framework_simplejwt.serializers import (
    TokenRefreshSerializer as BaseTokenRefreshSerializer,
)
from rest_framework_simplejwt.settings import api_settings

from .selectors import user_token_valid
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
            data = super().validate({**attrs, "email": attrs["email"].strip().lower()})
        except exceptions.AuthenticationFailed as exc:
            # simplejwt's flavour puts the code in the body: {"detail", "code"}, like the rest.
            raise AuthenticationFailed(
                self.error_messages["no_active_account"], "no_active_account"
            ) from exc
        if device_id:
            refresh = self.token_class(data["refresh"])
            refresh["device_id"] = device_id
            data = {"refresh": str(refresh), "access": str(refresh.access_token)}
        return data


class TokenRefreshSerializer(BaseTokenRefreshSerializer):
    """``{refresh}`` -> ``{access}``; refused (401) when the user is gone or inactive."""

    token_class = RefreshToken

    def validate(self, attrs: dict[str, Any]) -> dict[str, str]:
        refresh = self.token_class(attrs["refresh"])
        user_id = refresh.payload.get(api_settings.USER_ID_CLAIM)
        try:
            user = get_user_model()._default_manager.get(**{api_settings.USER_ID_FIELD: user_id})
        except (get_user_model().DoesNotExist, ValueError, TypeError):
            user = None
        if not api_settings.USER_AUTHENTICATION_RULE(user):
            raise AuthenticationFailed(
                self.error_messages["no_active_account"], "no_active_account"
            )
        if not user_token_valid(user_id=user.pk, issued_at=float(refresh.payload.get("iat") or 0)):
            raise AuthenticationFailed("the token was revoked", "token_revoked")
        data = {"access": str(refresh.access_token)}
        if api_settings.ROTATE_REFRESH_TOKENS:
            refresh.set_jti()
            refresh.set_exp()
            refresh.set_iat()
            data["refresh"] = str(refresh)
        return data


class ErrorOutputSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField(required=False)


class AccessOutputSerializer(serializers.Serializer):
    access = serializers.CharField()


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
