from __future__ import annotations

from django.urls import path

from memoryadmin.agents import views

SESSION = "sessions/<str:session_id>"

urlpatterns = [
    path("sessions", views.SessionListView.as_view(), name="api-sessions"),
    path(SESSION, views.SessionDetailView.as_view(), name="api-session"),
    path(f"{SESSION}/end", views.SessionEndView.as_view(), name="api-session-end"),
    path(f"{SESSION}/events", views.SessionEventsView.as_view(), name="api-session-events"),
    path(f"{SESSION}/revert", views.SessionRevertView.as_view(), name="api-session-revert"),
    path(f"{SESSION}/recalls", views.SessionRecallsView.as_view(), name="api-session-recalls"),
    path(f"{SESSION}/memory/recall", views.RecallView.as_view(), name="api-session-recall"),
    path(f"{SESSION}/memory/cancel", views.CancelView.as_view(), name="api-session-cancel"),
    path(
        f"{SESSION}/memory/tool-calls", views.ToolCallView.as_view(), name="api-session-tool-calls"
    ),
]
