"""A URLconf for tests/django/test_api_errors.py: the project's, plus plain Django views under
``api/`` that fail the ways a project's own views (or Django itself) fail before DRF answers."""

from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import HttpResponse
from django.urls import include, path
from django.views import View

from project.urls import urlpatterns as project_urlpatterns


def suspicious(request):
    raise SuspiciousOperation("a header this view refuses")


def forbidden(request):
    raise PermissionDenied


def broken(request):
    raise RuntimeError("postgres://user:hunter2@db/secret is down")


def form(request):
    """A plain view, so the CSRF middleware checks unsafe requests (DRF's views are exempt)."""
    return HttpResponse("ok")


class OnlyGet(View):
    http_method_names = ["get"]

    def get(self, request):
        return HttpResponse("ok")


extra = [
    path("suspicious/", suspicious),
    path("forbidden/", forbidden),
    path("broken/", broken),
    path("form/", form),
    path("only-get/", OnlyGet.as_view()),
]

urlpatterns = [path("api/_test/", include(extra)), *project_urlpatterns]
