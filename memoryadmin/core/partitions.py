"""Partition keys: where a (project, environment, resource, namespace) keeps its remote data.

The key is an HMAC under a server secret, so it is stable across sessions and
deployments, distinct across environments and namespaces, and reveals none of
its inputs to the provider. It identifies data; it is not a credential.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from django.conf import settings

PARTITION_PREFIX = "ocmem_v1_"
_SALT = b"memoryadmin.providers.partition.v1"


def _partition_secret() -> bytes:
    # A dedicated secret lets operators rotate DJANGO_SECRET_KEY without
    # moving every partition; without one it is derived from SECRET_KEY.
    dedicated = getattr(settings, "MEMORYADMIN_PARTITION_SECRET", "")
    if dedicated:
        return str(dedicated).encode("utf-8")
    return hmac.new(_SALT, settings.SECRET_KEY.encode("utf-8"), hashlib.sha256).digest()


def partition_key(*, project_id: str, environment: str, resource_id: str, namespace: str) -> str:
    # A JSON array keeps the inputs unambiguous: ("a-b", "c") and ("a", "b-c")
    # cannot collide.
    message = json.dumps([project_id, environment, resource_id, namespace]).encode("utf-8")
    digest = hmac.new(_partition_secret(), message, hashlib.sha256).digest()
    return PARTITION_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
