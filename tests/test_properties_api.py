"""Property-based proof over our own OpenAPI schema: every operation, valid and invalid data,
with a valid key: no 5xx, and every response conforms to the schema (status, content type, body).
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import Keys

EXAMPLES_PER_OPERATION = 10
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _load_schema() -> Any:
    # Read once, at collection: the schema route touches no database.
    from memoryadmin.wsgi import application

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
