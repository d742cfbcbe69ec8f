from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path, register_converter, reverse_lazy

from memoryadmin.core.environments import Environment
from memoryadmin.web.forms import LoginForm
from memoryadmin.web.views import (
    bulk,
    deployments,
    erasures,
    export,
    imports,
    incidents,
    keys,
    operations,
    overview,
    people,
    preview,
    reading,
    records,
    redaction,
    review,
    search,
    sessions,
    signin,
    webhooks,
    writing,
)


class EnvironmentConverter:
    regex = "|".join(Environment.values)

    def to_python(self, value: str) -> Environment:
        return Environment(value)

    def to_url(self, value: str) -> str:
        return Environment(value).value


register_converter(EnvironmentConverter, "env")

app_name = "web"

PROJECT = "projects/<slug:p>/<env:e>/"
RESOURCE = PROJECT + "resources/<slug:r>/"
DOCUMENT = RESOURCE + "documents/<str:d>/"
RECORD = RESOURCE + "records/<str:rec>/"

urlpatterns = [
    path("", reading.home, name="home"),
    path(
        "login/",
        signin.LoginView.as_view(
            template_name="memoryadmin/login.html",
            authentication_form=LoginForm,
            redirect_authenticated_user=True,
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "set-password/<uidb64>/<token>/",
        signin.PasswordSetView.as_view(
            template_name="memoryadmin/password_set.html",
            success_url=reverse_lazy("web:password-set-done"),
        ),
        name="password-set",
    ),
    path(
        "set-password/done/",
        auth_views.PasswordResetCompleteView.as_view(
            template_name="memoryadmin/password_set_done.html"
        ),
        name="password-set-done",
    ),
    path("switch/", reading.switch, name="switch"),
    path("projects/<slug:p>/", reading.project_home, name="project"),
    path(PROJECT, reading.inventory, name="inventory"),
    # The document list (the hot page) and its total early: a URL is matched against
    # each pattern in turn, and no other pattern matches theirs.
    path(RESOURCE, reading.documents, name="documents"),
    path(RESOURCE + "total/", reading.documents_total, name="documents-total"),
    path(PROJECT + "audit/", reading.audit, name="audit"),
    path(PROJECT + "search/", search.search, name="search"),
    path(PROJECT + "audit/download/", reading.audit_download, name="audit-download"),
    path(PROJECT + "export/", export.export, name="export"),
    path(PROJECT + "erasures/", erasures.erasures, name="erasures"),
    path(PROJECT + "erasures/<str:erasure_id>/", erasures.erasure, name="erasure"),
    path(
        PROJECT + "erasures/<str:erasure_id>/receipt.json",
        erasures.erasure_receipt,
        name="erasure-receipt",
    ),
    path(PROJECT + "import/", imports.memory_import, name="import"),
    path(PROJECT + "agents/preview/", preview.agent_preview, name="agent-preview"),
    path(PROJECT + "webhooks/", webhooks.webhook_list, name="webhooks"),
    path(PROJECT + "webhooks/new/", webhooks.webhook_create, name="webhook-create"),
    path(PROJECT + "webhooks/<int:w>/", webhooks.webhook_detail, name="webhook"),
    path(PROJECT + "webhooks/<int:w>/edit/", webhooks.webhook_update, name="webhook-update"),
    path(PROJECT + "webhooks/<int:w>/rotate/", webhooks.webhook_rotate, name="webhook-rotate"),
    path(PROJECT + "webhooks/<int:w>/test/", webhooks.webhook_test, name="webhook-test"),
    path(PROJECT + "webhooks/<int:w>/delete/", webhooks.webhook_delete, name="webhook-delete"),
    path(
        PROJECT + "webhooks/<int:w>/deliveries/<int:d>/redeliver/",
        webhooks.delivery_redeliver,
        name="webhook-redeliver",
    ),
    path(PROJECT + "keys/", keys.key_list, name="keys"),
    path(PROJECT + "keys/new/", keys.key_create, name="key-create"),
    path(PROJECT + "keys/<int:k>/revoke/", keys.key_revoke, name="key-revoke"),
    path(PROJECT + "overview/", overview.overview, name="overview"),
    path(PROJECT + "deployments/", deployments.deployments, name="deployments"),
    path(PROJECT + "deployments/secrets/", deployments.secret_set_view, name="secret-set"),
    path(
        PROJECT + "deployments/<str:deployment_id>/",
        deployments.deployment,
        name="deployment",
    ),
    path(
        PROJECT + "deployments/<str:deployment_id>/promote/",
        deployments.deployment_promote_view,
        name="deployment-promote",
    ),
    path(PROJECT + "people/", people.people, name="people"),
    path(PROJECT + "people/grant/", people.person_grant, name="person-grant"),
    path(PROJECT + "people/invite/", people.person_invite, name="person-invite"),
    path(PROJECT + "people/<str:username>/revoke/", people.person_revoke, name="person-revoke"),
    path(PROJECT + "sessions/", sessions.session_list, name="sessions"),
    path(PROJECT + "sessions/<str:s>/", sessions.session_detail, name="session"),
    path(PROJECT + "sessions/<str:s>/end/", sessions.session_end_confirm, name="session-end"),
    path(PROJECT + "operations/<str:o>/retry/", operations.retry, name="operation-retry"),
    path(PROJECT + "operations/<str:o>/discard/", operations.discard, name="operation-discard"),
    path(PROJECT + "sessions/<str:s>/revert/", sessions.session_revert_page, name="session-revert"),
    path(PROJECT + "incidents/", incidents.incident_list, name="incidents"),
    path(PROJECT + "incidents/new/", incidents.incident_open, name="incident-create"),
    path(PROJECT + "incidents/<str:i>/", incidents.incident_detail, name="incident"),
    path(
        PROJECT + "incidents/<str:i>/contain/", incidents.incident_contain, name="incident-contain"
    ),
    path(PROJECT + "review/", review.inbox, name="review"),
    path(PROJECT + "review/count/", review.inbox_count, name="review-count"),
    path(PROJECT + "review/<str:proposal>/", review.proposal_detail, name="proposal"),
    path(PROJECT + "review/<str:proposal>/approve/", review.approve, name="proposal-approve"),
    path(PROJECT + "review/<str:proposal>/reject/", review.reject, name="proposal-reject"),
    path(RESOURCE + "new/", writing.create, name="document-create"),
    path(RESOURCE + "bulk/", bulk.documents_bulk_view, name="documents-bulk"),
    path(RESOURCE + "as-of/", reading.documents_as_of, name="documents-as-of"),
    path(RESOURCE + "as-of/restore/", writing.restore_as_of, name="documents-restore"),
    path(RESOURCE + "records/", records.records, name="records"),
    path(RESOURCE + "records/new/", records.record_create, name="record-create"),
    path(RECORD, records.record_detail, name="record"),
    path(RECORD + "edit/", records.record_edit, name="record-edit"),
    path(RECORD + "delete/", records.record_delete, name="record-delete"),
    path(DOCUMENT, reading.document_detail, name="document"),
    path(DOCUMENT + "edit/", writing.edit, name="document-edit"),
    path(DOCUMENT + "agent-writes/", writing.write_mode, name="document-agent-writes"),
    path(DOCUMENT + "freeze/", writing.freeze, name="document-freeze"),
    path(DOCUMENT + "unfreeze/", writing.unfreeze, name="document-unfreeze"),
    path(DOCUMENT + "delete/", writing.delete, name="document-delete"),
    path(DOCUMENT + "versions/<str:revision>/", reading.version_detail, name="version"),
    path(DOCUMENT + "versions/<str:revision>/restore/", writing.restore, name="version-restore"),
    path(DOCUMENT + "versions/<str:revision>/redact/", redaction.redact, name="version-redact"),
]
