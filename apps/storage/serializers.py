"""Input and output shapes of the credentials and presigned-URL APIs."""

from __future__ import annotations

from rest_framework import serializers


class CredentialsOutputSerializer(serializers.Serializer):
    access_key_id = serializers.CharField()
    secret_access_key = serializers.CharField()
    session_token = serializers.CharField()
    expires_at = serializers.DateTimeField()
    bucket = serializers.CharField()
    prefix = serializers.CharField()
    endpoint_url = serializers.CharField()
    region = serializers.CharField()


class RevokeInputSerializer(serializers.Serializer):
    """One credential by its access key id, or all of the caller's (``all: true``)."""

    access_key_id = serializers.CharField(required=False, max_length=32)
    all = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs: dict) -> dict:
        if bool(attrs.get("access_key_id")) == bool(attrs.get("all")):
            raise serializers.ValidationError("give either access_key_id or all: true")
        return attrs


class RevokeOutputSerializer(serializers.Serializer):
    revoked = serializers.IntegerField()


class PresignInputSerializer(serializers.Serializer):
    operation = serializers.ChoiceField(choices=["put", "get"])
    # The key is checked by the service (its rules name the problem); no trimming here.
    key = serializers.CharField(trim_whitespace=False, max_length=4096)
    expires_in = serializers.IntegerField(required=False)


class PresignOutputSerializer(serializers.Serializer):
    url = serializers.CharField()
    expires_at = serializers.DateTimeField()
