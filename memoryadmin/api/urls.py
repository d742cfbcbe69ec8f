from __future__ import annotations

from django.urls import path

from memoryadmin.api import (
    erasure_views,
    incident_views,
    key_views,
    memory_views,
    operation_views,
    record_views,
    schema,  # noqa: F401  (registers the x-api-key scheme for the OpenAPI schema)
    secret_views,
    session_views,
    views,
    webhook_views,
)

DOCUMENTS = "projects/<str:p>/memory/<str:r>/documents"
ERASURES = "projects/<str:p>/memory/erasures"
INCIDENTS = "projects/<str:p>/memory/incidents"
KEYS = "projects/<str:p>/api-keys"
OPERATIONS = "projects/<str:p>/memory/operations"
PROPOSALS = "projects/<str:p>/memory/proposals"
RECORDS = "projects/<str:p>/memory/<str:r>/records"
SESSION = "sessions/<str:session_id>"
WEBHOOKS = "projects/<str:p>/webhooks"

urlpatterns = [
    # First, the hot paths (a document's read and write, a session's recall and tool
    # calls): Django tries the routes in order, and no route of another shape matches
    # their paths (six and four segments), so the order changes nothing else.
    path(f"{DOCUMENTS}/<str:doc_id>", views.DocumentDetailView.as_view(), name="api-document"),
    path(f"{SESSION}/memory/recall", session_views.RecallView.as_view(), name="api-session-recall"),
    path(
        f"{SESSION}/memory/tool-calls",
        session_views.ToolCallView.as_view(),
        name="api-session-tool-calls",
    ),
    path("projects", views.ProjectListView.as_view(), name="api-projects"),
    path("projects/<str:p>", views.ProjectDetailView.as_view(), name="api-project"),
    path(
        "projects/<str:p>/deployments",
        views.DeploymentListView.as_view(),
        name="api-deployments",
    ),
    path(
        "projects/<str:p>/deployments/<str:d>",
        views.DeploymentDetailView.as_view(),
        name="api-deployment",
    ),
    path(
        "projects/<str:p>/deployments/<str:d>/promote",
        views.DeploymentPromoteView.as_view(),
        name="api-deployment-promote",
    ),
    path("projects/<str:p>/memory", views.MemoryInventoryView.as_view(), name="api-memory"),
    path(DOCUMENTS, views.DocumentListView.as_view(), name="api-documents"),
    path(
        f"{DOCUMENTS}/<str:doc_id>/versions",
        views.DocumentVersionsView.as_view(),
        name="api-document-versions",
    ),
    path(
        f"{DOCUMENTS}/<str:doc_id>/versions/<str:revision>/readers",
        views.VersionReadersView.as_view(),
        name="api-version-readers",
    ),
    # A resource's own routes, before the project-wide lists of the same shape: a
    # resource may be called "incidents", "operations" or "proposals", and no incident,
    # operation or proposal id is "restore" or "records" (theirs start inc_, mop_, prop_).
    path(
        "projects/<str:p>/memory/<str:r>/restore",
        views.ResourceRestoreView.as_view(),
        name="api-resource-restore",
    ),
    path(RECORDS, record_views.RecordListView.as_view(), name="api-records"),
    path(f"{RECORDS}/<str:rec>", record_views.RecordDetailView.as_view(), name="api-record"),
    path(
        f"{RECORDS}/<str:rec>/history",
        record_views.RecordHistoryView.as_view(),
        name="api-record-history",
    ),
    # After the document routes: a resource may be called "operations", and no
    # operation id is "documents".
    path(OPERATIONS, operation_views.OperationListView.as_view(), name="api-operations"),
    path(INCIDENTS, incident_views.IncidentListView.as_view(), name="api-incidents"),
    path(f"{INCIDENTS}/<str:i>", incident_views.IncidentDetailView.as_view(), name="api-incident"),
    path(
        f"{INCIDENTS}/<str:i>/contain",
        incident_views.IncidentContainView.as_view(),
        name="api-incident-contain",
    ),
    path(
        f"{OPERATIONS}/<str:o>", operation_views.OperationDetailView.as_view(), name="api-operation"
    ),
    path(
        f"{OPERATIONS}/<str:o>/retry",
        operation_views.OperationRetryView.as_view(),
        name="api-operation-retry",
    ),
    path(
        f"{OPERATIONS}/<str:o>/discard",
        operation_views.OperationDiscardView.as_view(),
        name="api-operation-discard",
    ),
    # After the document routes: a resource may be called "proposals".
    path(PROPOSALS, views.ProposalListView.as_view(), name="api-proposals"),
    path(f"{PROPOSALS}/<str:proposal_id>", views.ProposalDetailView.as_view(), name="api-proposal"),
    path(
        f"{PROPOSALS}/<str:proposal_id>/approve",
        views.ProposalApproveView.as_view(),
        name="api-proposal-approve",
    ),
    path(
        f"{PROPOSALS}/<str:proposal_id>/reject",
        views.ProposalRejectView.as_view(),
        name="api-proposal-reject",
    ),
    path(
        f"{DOCUMENTS}/<str:doc_id>/versions/<str:revision>/restore",
        memory_views.DocumentRestoreView.as_view(),
        name="api-document-version-restore",
    ),
    path(
        f"{DOCUMENTS}/<str:doc_id>/versions/<str:revision>/redact",
        memory_views.VersionRedactView.as_view(),
        name="api-document-version-redact",
    ),
    path("projects/<str:p>/audit", memory_views.AuditListView.as_view(), name="api-audit"),
    path(
        "projects/<str:p>/memory/export",
        memory_views.MemoryExportView.as_view(),
        name="api-memory-export",
    ),
    path(
        "projects/<str:p>/memory/search",
        memory_views.MemorySearchView.as_view(),
        name="api-memory-search",
    ),
    path(
        "projects/<str:p>/memory/import",
        memory_views.MemoryImportView.as_view(),
        name="api-memory-import",
    ),
    # After the resource routes: a resource may be called "erasures" (no erasure id is
    # "documents", "records" or "restore").
    path(ERASURES, erasure_views.ErasureListView.as_view(), name="api-erasures"),
    path(f"{ERASURES}/<str:e>", erasure_views.ErasureDetailView.as_view(), name="api-erasure"),
    path("erasure-key", erasure_views.ErasureKeyView.as_view(), name="api-erasure-key"),
    path(KEYS, key_views.ApiKeyListView.as_view(), name="api-keys"),
    path(f"{KEYS}/<str:k>/revoke", key_views.ApiKeyRevokeView.as_view(), name="api-key-revoke"),
    path(f"{KEYS}/<str:k>/rotate", key_views.ApiKeyRotateView.as_view(), name="api-key-rotate"),
    # Sessions and the memory runtime, then secrets and webhooks.
    path("sessions", session_views.SessionListView.as_view(), name="api-sessions"),
    path(SESSION, session_views.SessionDetailView.as_view(), name="api-session"),
    path(f"{SESSION}/end", session_views.SessionEndView.as_view(), name="api-session-end"),
    path(f"{SESSION}/events", session_views.SessionEventsView.as_view(), name="api-session-events"),
    path(f"{SESSION}/revert", session_views.SessionRevertView.as_view(), name="api-session-revert"),
    path(
        f"{SESSION}/recalls", session_views.SessionRecallsView.as_view(), name="api-session-recalls"
    ),
    path(f"{SESSION}/memory/cancel", session_views.CancelView.as_view(), name="api-session-cancel"),
    path("projects/<str:p>/secrets", secret_views.SecretListView.as_view(), name="api-secrets"),
    path(
        "projects/<str:p>/secrets/<str:name>",
        secret_views.SecretDetailView.as_view(),
        name="api-secret",
    ),
    path(WEBHOOKS, webhook_views.WebhookListView.as_view(), name="api-webhooks"),
    path(f"{WEBHOOKS}/<str:w>", webhook_views.WebhookDetailView.as_view(), name="api-webhook"),
    path(
        f"{WEBHOOKS}/<str:w>/rotate-secret",
        webhook_views.WebhookRotateView.as_view(),
        name="api-webhook-rotate",
    ),
    path(
        f"{WEBHOOKS}/<str:w>/test", webhook_views.WebhookTestView.as_view(), name="api-webhook-test"
    ),
    path(
        f"{WEBHOOKS}/<str:w>/deliveries",
        webhook_views.DeliveryListView.as_view(),
        name="api-webhook-deliveries",
    ),
    path(
        f"{WEBHOOKS}/<str:w>/deliveries/<str:d>/redeliver",
        webhook_views.RedeliverView.as_view(),
        name="api-webhook-redeliver",
    ),
]
