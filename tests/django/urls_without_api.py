"""A URLconf without tool_calling's API: JSONErrorMiddleware then changes nothing."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
