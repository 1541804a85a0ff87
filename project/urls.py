"""URLs of the example project."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The REST API of tool_calling mounts here when tool_calling.api lands (its own issue):
    #     path("api/", include("tool_calling.api.urls")),
]
