"""URLs of the example project."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from oauth2_provider import urls as oauth2_urls
from oauth2_provider.views import OAuthServerMetadataView

urlpatterns = [
    path("admin/", admin.site.urls),
    # The OpenAPI schema of the API (docs/openapi.yaml is its checked-in copy) and Swagger UI to
    # browse and try it. Before the API's include, whose router owns the rest of api/.
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/schema/swagger-ui/",
        SpectacularSwaggerView.as_view(url_name="schema"),
        name="swagger-ui",
    ),
    # The REST API of tool_calling (docs/api.md); its URL names are "tool_calling:...".
    path("api/", include("tool_calling.api.urls")),
    # The OAuth 2.1 authorization server whose access tokens /mcp/ accepts (settings.py,
    # TOOL_CALLING_MCP_RESOURCE): authorize and token endpoints under o/, and its RFC 8414
    # metadata at the root, where MCP clients look for it. The /mcp/ endpoint's own metadata
    # (RFC 9728) is served by tool_calling.asgi.with_mcp.
    path("o/", include((oauth2_urls.base_urlpatterns, "oauth2_provider"))),
    path(
        ".well-known/oauth-authorization-server",
        OAuthServerMetadataView.as_view(),
        name="oauth-authorization-server",
    ),
    # The chat page (tool_calling.contrib.chat): the front door, with its login and logout pages.
    # Last, so that admin/ and api/ keep their paths; its URL names are "tool_calling_chat:...".
    path("", include("tool_calling.contrib.chat.urls")),
]
