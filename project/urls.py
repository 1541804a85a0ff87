"""URLs of the example project."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    # The example project has no pages of its own: its front door is the admin.
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    path("admin/", admin.site.urls),
    # The REST API of tool_calling (README.md, "HTTP API"); its URL names are "tool_calling:...".
    path("api/", include("tool_calling.api.urls")),
]
