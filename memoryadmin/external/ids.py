"""Stable record ids for external providers, and their durable mapping (spec 004).

`external_memory_id(provider_id, external_id)` is spec 004's
`createExternalMemoryId`: a pure function, so the same provider record always
gets the same id, in every process and after every restart. The provider id
names one provider instance: its kind and the resource that declares it
(project, environment, resource id). The mapping table keeps the way back
from our id to the provider's, in each namespace the record was seen in.
"""

from __future__ import annotations

import hashlib

from memoryadmin.core.errors import NotFound
from memoryadmin.external.models import EXTERNAL_ID_MAX_BYTES, ExternalRecord
from memoryadmin.memory.limits import utf8_len
from memoryadmin.memory.models import Resource

ID_PREFIX = "xm_"


def provider_id(resource: Resource) -> str:
    return f"{resource.kind}:{resource.project_id}/{resource.environment}/{resource.resource_id}"


def external_memory_id(provider: str, external_id: str) -> str:
    digest = hashlib.sha256(f"{provider}\n{external_id}".encode()).hexdigest()
    return ID_PREFIX + digest[:32]


def external_id_valid(value: object) -> bool:
    """Whether a provider's record id can be remembered: a string of 1 to
    EXTERNAL_ID_MAX_BYTES UTF-8 bytes (answers holding NUL were refused when read)."""
    return isinstance(value, str) and 0 < utf8_len(value) <= EXTERNAL_ID_MAX_BYTES


def records_map(*, resource: Resource, namespace: str, external_ids: list[str]) -> dict[str, str]:
    """Our ids for provider records seen in `namespace`, each remembered durably there.

    A record is mapped in every namespace it was seen in: namespaces that share
    one provider partition (a fixed scope or bank) see the same records, with
    the same ids. One query finds those already mapped, one INSERT adds the
    rest, whatever their number; a row another request inserted meanwhile is
    left as it is (the id is the same either way), so no savepoint is needed.
    """
    provider = provider_id(resource)
    ids = {external_id: external_memory_id(provider, external_id) for external_id in external_ids}
    if not ids:
        return {}
    known = set(
        ExternalRecord.objects.filter(
            resource=resource, namespace=namespace, record_id__in=ids.values()
        ).values_list("record_id", flat=True)
    )
    missing = [
        ExternalRecord(
            resource=resource, namespace=namespace, record_id=record_id, external_id=external_id
        )
        for external_id, record_id in ids.items()
        if record_id not in known
    ]
    if missing:
        ExternalRecord.objects.bulk_create(missing, ignore_conflicts=True)
    return ids


def external_id_of(*, resource: Resource, namespace: str, record_id: str) -> str:
    """The provider's id of one of our records in this namespace; NotFound otherwise."""
    external_id = (
        ExternalRecord.objects.filter(resource=resource, namespace=namespace, record_id=record_id)
        .values_list("external_id", flat=True)
        .first()
    )
    if external_id is None:
        raise NotFound(
            f"No record '{record_id}' in namespace '{namespace}' of '{resource.resource_id}'."
        )
    return external_id


def record_forget(*, resource: Resource, record_id: str) -> None:
    """The record is gone at the provider: from every namespace that saw it."""
    ExternalRecord.objects.filter(resource=resource, record_id=record_id).delete()


def namespaces_seen(*, resource: Resource, limit: int) -> list[str]:
    """The namespaces records of a resource were seen in (at most `limit`, by name)."""
    rows = ExternalRecord.objects.filter(resource=resource).values_list("namespace", flat=True)
    return list(rows.distinct().order_by("namespace")[:limit])
