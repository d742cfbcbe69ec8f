from __future__ import annotations

from django.urls import path

from memoryadmin.providers import views

urlpatterns = [
    path("projects/<str:p>/secrets", views.SecretListView.as_view(), name="api-secrets"),
    path(
        "projects/<str:p>/secrets/<str:name>",
        views.SecretDetailView.as_view(),
        name="api-secret",
    ),
]
