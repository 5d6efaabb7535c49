"""Routes of accounts, included at the site root."""

from django.urls import path

from . import authorize_views, oauth_views, views

app_name = "accounts"

urlpatterns = [
    path("api/auth/token/", views.TokenObtainPairView.as_view(), name="token_obtain_pair"),
    path("api/auth/token/refresh/", views.TokenRefreshView.as_view(), name="token_refresh"),
    path("api/auth/logout/", views.LogoutView.as_view(), name="logout"),
    path("oauth2/revoke", views.RevokeView.as_view(), name="oauth2_revoke"),
    path("api/auth/me/", views.MeView.as_view(), name="me"),
    path(".well-known/jwks.json", views.JwksView.as_view(), name="jwks"),
    path("oauth2/token", oauth_views.TokenView.as_view(), name="oauth2_token"),
    path("oauth2/authorize", authorize_views.authorize, name="oauth2_authorize"),
    path("oauth2/refresh", authorize_views.RefreshView.as_view(), name="oauth2_refresh"),
    path("oauth2/providers", authorize_views.ProvidersView.as_view(), name="oauth2_providers"),
    path("oauth2/upstream/<slug:name>", authorize_views.upstream_start, name="oauth2_upstream"),
    path("oauth2/callback/<slug:name>", authorize_views.upstream_callback,
         name="oauth2_callback"),
]
