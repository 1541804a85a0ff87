"""URLs of the API; a project includes them under a prefix: ``path("api/", include(...))``.

Names are ``tool_calling:<basename>-<action>``, e.g. ``tool_calling:run-detail``.
"""

from rest_framework.routers import DefaultRouter

from tool_calling.api import views

app_name = "tool_calling"

router = DefaultRouter()
router.register("tools", views.ToolViewSet, basename="tool")
router.register("conversations", views.ConversationViewSet, basename="conversation")
router.register("runs", views.RunViewSet, basename="run")

urlpatterns = router.urls
