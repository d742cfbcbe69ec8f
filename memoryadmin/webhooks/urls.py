from __future__ import annotations

from django.urls import path

from memoryadmin.webhooks import views

WEBHOOKS = "projects/<str:p>/webhooks"

urlpatterns = [
    path(WEBHOOKS, views.WebhookListView.as_view(), name="api-webhooks"),
    path(f"{WEBHOOKS}/<str:w>", views.WebhookDetailView.as_view(), name="api-webhook"),
    path(
        f"{WEBHOOKS}/<str:w>/rotate-secret",
        views.WebhookRotateView.as_view(),
        name="api-webhook-rotate",
    ),
    path(
        f"{WEBHOOKS}/<str:w>/deliveries",
        views.DeliveryListView.as_view(),
        name="api-webhook-deliveries",
    ),
    path(
        f"{WEBHOOKS}/<str:w>/deliveries/<str:d>/redeliver",
        views.RedeliverView.as_view(),
        name="api-webhook-redeliver",
    ),
]
