"""The durable association of memoryadmin record ids with provider record ids (spec 004).

A record of an external provider has two identifiers: the stable id our API,
page and events use (derived from the provider and its external id, see
ids.py) and the provider's own (`metadata.providerExternalId`). The
association lives here, so get, update, history and delete resolve after a
restart. A record is mapped in each namespace it was seen in: namespaces that
share one provider partition (a fixed scope or bank) resolve it alike.
"""

from __future__ import annotations

from django.db import models

from memoryadmin.memory.models import Resource

# The longest provider id kept, in UTF-8 bytes (as the http protocol's source ids): within
# the column's characters and the index's row size on every database.
EXTERNAL_ID_MAX_BYTES = 1024


class ExternalRecord(models.Model):
    resource = models.ForeignKey(Resource, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=128)
    record_id = models.CharField(max_length=64)
    external_id = models.CharField(max_length=EXTERNAL_ID_MAX_BYTES)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Also serves the look-ups by record id alone (a delete forgets every namespace's).
            models.UniqueConstraint(
                fields=["resource", "record_id", "namespace"], name="external_record_seen"
            ),
        ]
        indexes = [models.Index(fields=["resource", "namespace", "external_id"])]

    def __str__(self) -> str:
        return f"{self.resource}:{self.record_id}->{self.external_id}"
