from rest_framework_simplejwt.tokens import AccessToken  # placeholder, replaced by accounts work

__all__ = ["AccessToken"]
