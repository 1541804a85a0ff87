"""URLs of the chat page; a project includes them: ``path("", include(...))``.

Names are ``tool_calling_chat:<name>``: ``index``, ``conversation``, ``login``, ``logout``. The
login and logout pages are Django's own views (``django.contrib.auth.views``) with the chat
page's templates; point ``LOGIN_URL`` at ``tool_calling_chat:login``, or at your own page.
"""

from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from tool_calling.contrib.chat import views

app_name = "tool_calling_chat"

urlpatterns = [
    path("", views.index, name="index"),
    path("conversations/<uuid:pk>/", views.conversation, name="conversation"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="tool_calling_chat/login.html",
            redirect_authenticated_user=True,
            next_page=reverse_lazy("tool_calling_chat:index"),
        ),
        name="login",
    ),
    path(
        "logout/",
        auth_views.LogoutView.as_view(next_page=reverse_lazy("tool_calling_chat:login")),
        name="logout",
    ),
]
