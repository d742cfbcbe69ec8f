"""Property-based proof over our own OpenAPI schema: every operation, valid and invalid data,
with a valid key: no 5xx, and every response conforms to the schema (status, content type, body).
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.helpers import Keys

EXAMPLES_PER_OPERATION = 10
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def application(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """The project's WSGI application, keeping the test's database connection open.

    Django closes connections when a request starts and finishes; inside a test that
    would end the test's transaction, so (as Django's test client does) not here.
    """
    from memoryadmin.wsgi import application as django_application

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        response = django_application(environ, start_response)
        try:
            return [b"".join(response)]
        finally:
            close = getattr(response, "close", None)
            if close is not None:
                close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


# The import takes an export zip: generated bodies go as the bytes they are.
schemathesis.serializer.alias("application/zip", "application/octet-stream")


def _load_schema() -> Any:
    # Read once, at collection: the schema route touches no database.
    loaded = schemathesis.openapi.from_wsgi("/api/schema/", application)
    loaded.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        max_examples=EXAMPLES_PER_OPERATION,
        deterministic=True,
    )
    return loaded


schema = _load_schema()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.django_db
def test_every_operation_answers_within_its_schema(case: Any, keys: Keys) -> None:
    case.call_and_validate(headers={"x-api-key": keys.owner}, checks=CHECKS)
