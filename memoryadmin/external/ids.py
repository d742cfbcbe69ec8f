"""Stable record ids for external providers, and their durable mapping (spec 004).

`external_memory_id(provider_id, external_id)` is spec 004's
`createExternalMemoryId`: a pure function, so the same provider record always
gets the same id, in every process and after every restart. The provider id
names one provider instance: its kind and the resource that declares it
(project, environment, resource id). The mapping table keeps the way back
from our id to the provider's, scoped to the namespace the record lives in.
"""

from __future__ import annotations

import hashlib

from django.db import IntegrityError, transaction

from memoryadmin.core.errors import NotFound
from memoryadmin.external.models import ExternalRecord
from memoryadmin.memory.models import Resource

ID_PREFIX = "xm_"


def provider_id(resource: Resource) -> str:
    return f"{resource.kind}:{resource.project_id}/{resource.environment}/{resource.resource_id}"


def external_memory_id(provider: str, external_id: str) -> str:
    digest = hashlib.sha256(f"{provider}\n{external_id}".encode()).hexdigest()
    return ID_PREFIX + digest[:32]


def record_id_for(*, resource: Resource, namespace: str, external_id: str) -> str:
    """Our id for a provider record, remembered durably; the same id every time."""
    record_id = external_memory_id(provider_id(resource), external_id)
    if not ExternalRecord.objects.filter(resource=resource, record_id=record_id).exists():
        try:
            with transaction.atomic():
                ExternalRecord.objects.create(
                    resource=resource,
                    namespace=namespace,
                    record_id=record_id,
                    external_id=external_id,
                )
        except IntegrityError:
            # Another request mapped it first: the id is the same either way.
            pass
    return record_id


def records_map(*, resource: Resource, namespace: str, external_ids: list[str]) -> dict[str, str]:
    """Our ids for many provider records at once (one query for those already mapped)."""
    wanted = {external_memory_id(provider_id(resource), e): e for e in external_ids}
    known = set(
        ExternalRecord.objects.filter(resource=resource, record_id__in=wanted).values_list(
            "record_id", flat=True
        )
    )
    for record_id, external_id in wanted.items():
        if record_id not in known:
            record_id_for(resource=resource, namespace=namespace, external_id=external_id)
    return {external_id: record_id for record_id, external_id in wanted.items()}


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
    ExternalRecord.objects.filter(resource=resource, record_id=record_id).delete()
