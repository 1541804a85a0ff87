"""URLs of the example project."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

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
    # The REST API of tool_calling (README.md, "HTTP API"); its URL names are "tool_calling:...".
    path("api/", include("tool_calling.api.urls")),
    # The chat page (tool_calling.contrib.chat): the front door, with its login and logout pages.
    # Last, so that admin/ and api/ keep their paths; its URL names are "tool_calling_chat:...".
    path("", include("tool_calling.contrib.chat.urls")),
]
