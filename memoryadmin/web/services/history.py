"""A document's history in words: numbered versions and what each write did."""

from __future__ import annotations

from dataclasses import dataclass

from memoryadmin.memory.models import DocumentVersion, WriterKind


@dataclass(frozen=True)
class HistoryRow:
    version: DocumentVersion
    number: int  # 1 is the version the document was created with
    label: str


def _number_of(version_id: int, document_id: int) -> int:
    return DocumentVersion.objects.filter(document_id=document_id, id__lte=version_id).count()


def _patch_label(version: DocumentVersion, previous: DocumentVersion | None) -> str:
    if previous is not None and previous.agent_writes != version.agent_writes:
        return "unfroze agent writes" if version.agent_writes else "froze agent writes"
    if previous is None or previous.title != version.title:
        return f"renamed to “{version.title}”" if version.title else "renamed"
    return "edited"


def _restore_label(version: DocumentVersion) -> str:
    source = (
        DocumentVersion.objects.filter(
            document_id=version.document_id,
            id__lt=version.id,
            text=version.text,
            summary=version.summary,
        )
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    if source is None:
        return "restored an earlier version"
    return f"restored from version {_number_of(source, version.document_id)}"


def _label(version: DocumentVersion, previous: DocumentVersion | None) -> str:
    if version.action == "create":
        return "created"
    if version.action == "patch":
        return _patch_label(version, previous)
    if version.action == "restore":
        return _restore_label(version)
    if version.action == "approve":
        return "approved a proposal"
    if version.action == "review":
        return "changed the review of agent saves"
    if version.writer_kind == WriterKind.AGENT:
        return "agent save"
    return "edited"


def history_rows(versions: list[DocumentVersion]) -> list[HistoryRow]:
    """Labels one page of versions (newest first), with two queries for the whole page
    and two more per restored version (to name the version it restored)."""
    if not versions:
        return []
    oldest = versions[-1]
    number = _number_of(oldest.id, oldest.document_id)
    before = (
        DocumentVersion.objects.filter(document_id=oldest.document_id, id__lt=oldest.id)
        .order_by("-id")
        .defer("text")
        .first()
    )
    chain = [*versions, before]
    rows = []
    for index, version in enumerate(versions):
        rows.append(
            HistoryRow(
                version=version,
                number=number + (len(versions) - 1 - index),
                label=_label(version, chain[index + 1]),
            )
        )
    return rows
