"""URLs of the API; a project includes them under a prefix: ``path("api/", include(...))``.

Names are ``tool_calling:<basename>-<action>``, e.g. ``tool_calling:run-detail``.
"""

from django.urls import path
from rest_framework.routers import DefaultRouter

from tool_calling.api import events, views

app_name = "tool_calling"

router = DefaultRouter()
router.register("tools", views.ToolViewSet, basename="tool")
router.register("conversations", views.ConversationViewSet, basename="conversation")
router.register("runs", views.RunViewSet, basename="run")
router.register("tool-executions", views.ToolExecutionViewSet, basename="tool-execution")

urlpatterns = [
    # An async view (not a viewset action): an SSE stream holds no thread while it waits.
    path("runs/<uuid:pk>/events/", events.run_events, name="run-events"),
    *router.urls,
]
