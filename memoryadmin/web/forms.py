"""Forms of the Memory page. Field rules come from memory.limits, the same checks the API runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator
from django.utils.http import urlencode

from memoryadmin.core.errors import DomainError, LimitExceeded
from memoryadmin.core.inputs import parse_date
from memoryadmin.core.strings import strings_check
from memoryadmin.erasures.services import named_documents
from memoryadmin.memory.limits import (
    SUMMARY_MAX_BYTES,
    TITLE_MAX_BYTES,
    check_document_id,
    check_summary,
    check_text,
    check_title,
)
from memoryadmin.memory.models import Resource
from memoryadmin.memory.services.audit import ACTOR_KINDS, AuditFilter
from memoryadmin.memory.services.tombstones import document_id_check_free
from memoryadmin.webhooks.outbox import EVENT_TYPES

FIELD_NAMES = ("text ", "title ", "summary ")


def sentence(message: str) -> str:
    """A service message as a sentence on the page: "text is ..." reads "The text is ..."."""
    if message.startswith(FIELD_NAMES):
        return f"The {message}"
    return message[:1].upper() + message[1:]


def _checked(check: Callable[[str], object], value: str) -> str:
    try:
        check(value)
    except DomainError as exc:
        raise forms.ValidationError(sentence(exc.message), code=exc.code) from exc
    return value


class StrictForm(forms.Form):
    """Every form of the page: the string rule over every field, naming the field."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for name, value in list(cleaned.items()):
            try:
                strings_check(value, field=name)
            except DomainError as exc:
                self.add_error(name, exc.message)
        return cleaned


class DateField(forms.DateField):
    """An ISO 8601 date read by the kernel's parser: ASCII digits only (Django's own
    field also reads a year written in Arabic-Indic or fullwidth digits)."""

    def to_python(self, value: Any) -> date | None:
        if value in self.empty_values:
            return None
        if isinstance(value, date):
            return value
        try:
            return parse_date(str(value).strip(), field=str(self.label or "date"))
        except DomainError as exc:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from exc


def text_field() -> forms.CharField:
    # Whitespace is content: never strip, and let the byte limit speak for size.
    return forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false", "class": "mono"}),
    )


class DocumentFieldsForm(StrictForm):
    """Title, summary and text, checked against the resource's current maxBytes."""

    title = forms.CharField(strip=False, max_length=TITLE_MAX_BYTES)
    summary = forms.CharField(required=False, strip=False, max_length=SUMMARY_MAX_BYTES)
    text = text_field()

    def __init__(self, *args: Any, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_bytes = max_bytes
        attrs = self.fields["text"].widget.attrs
        attrs["data-max-bytes"] = str(max_bytes)
        # The live byte counter and the field's errors (see _text_field.html).
        attrs["aria-describedby"] = "id_text_bytes id_text_error"

    def clean_title(self) -> str:
        return _checked(check_title, self.cleaned_data["title"])

    def clean_summary(self) -> str:
        return _checked(check_summary, self.cleaned_data["summary"])

    def clean_text(self) -> str:
        # Browsers send textarea line breaks as CRLF; stored text uses LF.
        text = str(self.cleaned_data["text"]).replace("\r\n", "\n")
        return _checked(lambda value: check_text(value, max_bytes=self.max_bytes), text)

    def add_domain_error(self, exc: DomainError, *, default_field: str | None = None) -> None:
        field = exc.field if isinstance(exc, LimitExceeded) else default_field
        self.add_error(field if field in self.fields else None, sentence(exc.message))


class DocumentCreateForm(DocumentFieldsForm):
    doc_id = forms.CharField(label="Document id", max_length=128)
    frozen = forms.BooleanField(
        required=False,
        label="Frozen (agents may read it but not save to it)",
    )
    field_order = ["doc_id", "title", "summary", "text", "frozen"]

    def __init__(self, *args: Any, resource: Resource, **kwargs: Any) -> None:
        super().__init__(*args, max_bytes=resource.max_bytes, **kwargs)
        self.resource = resource

    def clean_doc_id(self) -> str:
        # Whether the id is free too, so that every mistake shows at once.
        doc_id = _checked(check_document_id, self.cleaned_data["doc_id"])
        return _checked(
            lambda value: document_id_check_free(resource=self.resource, doc_id=value), doc_id
        )


class DocumentEditForm(DocumentFieldsForm):
    revision = forms.CharField(widget=forms.HiddenInput, max_length=40)


class RevisionForm(StrictForm):
    """Confirms an action on the revision the user was looking at."""

    revision = forms.CharField(widget=forms.HiddenInput, max_length=40)


class DeleteForm(RevisionForm):
    confirm_id = forms.CharField(label="Type the document id to confirm", max_length=128)

    def __init__(self, *args: Any, doc_id: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.doc_id = doc_id

    def clean_confirm_id(self) -> str:
        value = str(self.cleaned_data["confirm_id"])
        if value != self.doc_id:
            raise forms.ValidationError(
                f"Type '{self.doc_id}' exactly to delete this document.", code="mismatch"
            )
        return value


class ProposalApproveForm(DocumentFieldsForm):
    """Approves over the current revision the page showed; text and summary only when the
    approver edited them (the inbox's one-click approval sends neither)."""

    title = None  # type: ignore[assignment]  # an approval never changes the title
    revision = forms.CharField(widget=forms.HiddenInput, max_length=40)
    field_order = ["revision", "summary", "text"]


class ProposalRejectForm(StrictForm):
    reason = forms.CharField(
        max_length=500, widget=forms.Textarea(attrs={"rows": 2}), label="Reason"
    )


class ExportForm(StrictForm):
    resources = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple, label="Resources to export"
    )

    def __init__(
        self, *args: Any, resource_ids: list[str], initial: list[str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["resources"].choices = [(r, r) for r in resource_ids]  # type: ignore[attr-defined]
        self.fields["resources"].initial = resource_ids if initial is None else initial
        self.resource_ids = resource_ids


class LoginForm(AuthenticationForm):
    """Django's login form, with the username's length checked before a login is tried
    (Django sets the field's max_length after making its validators, so it only reaches
    the HTML): a name no login can have is the form's error, never a failed login, which
    django-axes records with at most 255 characters of the name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The limit Django gives the field: the user model's (150), else 254.
        limit = self.username_field.max_length or 254
        self.fields["username"].validators.append(MaxLengthValidator(limit))


class ApiKeyForm(forms.Form):
    name = forms.CharField(required=False, max_length=200, strip=True)
    read_only = forms.BooleanField(required=False, label="Read-only")


class WebhookForm(StrictForm):
    """A webhook endpoint's settings; the URL and events are checked by the service."""

    url = forms.CharField(
        max_length=2048,
        label="URL",
        strip=True,
        widget=forms.TextInput(attrs={"size": 70, "spellcheck": "false", "class": "mono"}),
    )
    description = forms.CharField(
        required=False, max_length=200, strip=True, widget=forms.TextInput(attrs={"size": 70})
    )
    events = forms.MultipleChoiceField(
        choices=[(event, event) for event in EVENT_TYPES], widget=forms.CheckboxSelectMultiple
    )
    active = forms.BooleanField(required=False, initial=True, label="Active")


class AuditFilterForm(StrictForm):
    """The audit log's filters (a GET form); a field that does not parse is left out."""

    resource = forms.CharField(required=False, max_length=128)
    document = forms.CharField(required=False, max_length=128)
    action = forms.CharField(required=False, max_length=64)
    actor = forms.CharField(required=False, max_length=200)
    by = forms.ChoiceField(required=False, choices=[("", "anyone"), *ACTOR_KINDS.items()])
    since = DateField(required=False, label="From")
    until = DateField(required=False, label="To")

    def where(self) -> AuditFilter:
        self.is_valid()
        data = self.cleaned_data
        return AuditFilter(
            resource_id=(data.get("resource") or "").strip(),
            document_id=(data.get("document") or "").strip(),
            action=(data.get("action") or "").strip(),
            actor=(data.get("actor") or "").strip(),
            actor_kind=data.get("by") or "",
            since=data.get("since"),
            until=data.get("until"),
        )

    def query(self) -> str:
        """The filter as a query string, for the links that keep it (paging, downloads)."""
        where = self.where()
        pairs = {
            "resource": where.resource_id,
            "document": where.document_id,
            "action": where.action,
            "actor": where.actor,
            "by": where.actor_kind,
            "since": where.since.isoformat() if where.since else "",
            "until": where.until.isoformat() if where.until else "",
        }
        return urlencode({k: v for k, v in pairs.items() if v})


ROLE_CHOICES = [
    ("viewer", "viewer: reads memory"),
    ("support", "support: reads, freezes, exports, ends sessions"),
    ("owner", "owner: everything, including people and keys"),
]


class RoleForm(StrictForm):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial="viewer")


class InviteForm(RoleForm):
    method = forms.ChoiceField(
        choices=[
            ("link", "a link to set their own password (valid for 3 days)"),
            ("password", "a one-time password that I pass on"),
        ],
        initial="link",
        widget=forms.RadioSelect,
        label="Give them",
    )


class SecretForm(StrictForm):
    name = forms.CharField(max_length=64, strip=True)
    # Never rendered back: a refused form asks for the value again.
    value = forms.CharField(
        max_length=4096, strip=False, widget=forms.PasswordInput(render_value=False)
    )
    origins = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono", "spellcheck": "false"}),
        help_text="One origin a line, such as https://memory.example.com. "
        "Required for a new secret; empty keeps a rotated secret's origins.",
    )

    def clean_origins(self) -> list[str]:
        text = str(self.cleaned_data.get("origins") or "")
        return [line.strip() for line in text.splitlines() if line.strip()]


class RedactForm(StrictForm):
    reason = forms.CharField(
        label="Reason (kept in the audit log)", max_length=500, widget=forms.Textarea
    )
    confirm = forms.CharField(label="Type REDACT to confirm", max_length=16)

    def clean_confirm(self) -> str:
        value = str(self.cleaned_data["confirm"])
        if value != "REDACT":
            raise forms.ValidationError("Type REDACT exactly to redact this version.")
        return value


class ErasureForm(StrictForm):
    """What to erase: an exact text, or documents (one `resource/id` a line)."""

    text = forms.CharField(
        label="Exact text", required=False, max_length=100_000, strip=False, widget=forms.Textarea
    )
    documents = forms.CharField(
        label="Or documents, one resource/id a line",
        required=False,
        max_length=100 * 260,
        widget=forms.Textarea,
    )
    reason = forms.CharField(label="Reason (kept in the receipt)", max_length=500)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        text, documents = cleaned.get("text") or "", (cleaned.get("documents") or "").strip()
        if bool(text) == bool(documents):
            raise forms.ValidationError("Give the exact text, or documents, not both.")
        return cleaned

    def match(self) -> dict[str, Any]:
        """The match as the service reads it (the service checks what it says)."""
        text = self.cleaned_data.get("text") or ""
        if text:
            return {"text": text}
        lines = [line for line in self.cleaned_data["documents"].splitlines() if line.strip()]
        return {"documents": named_documents(lines)}


class ErasureConfirmForm(ErasureForm):
    confirm = forms.CharField(label="Type ERASE to confirm", max_length=16)

    def clean_confirm(self) -> str:
        value = str(self.cleaned_data["confirm"])
        if value != "ERASE":
            raise forms.ValidationError("Type ERASE exactly to erase for good.")
        return value
