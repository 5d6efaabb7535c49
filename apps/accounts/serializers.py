from rest_framework_simplejwt.serializers import (  # placeholder, replaced by accounts work
    TokenObtainPairSerializer,
    TokenRefreshSerializer,
)

__all__ = ["TokenObtainPairSerializer", "TokenRefreshSerializer"]
