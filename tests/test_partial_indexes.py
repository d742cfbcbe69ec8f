"""Look-ups through a partial index say the index's condition in their statement's text
(`core.rows.NotBlank`), so every plan can use it (PostgreSQL).

An index that leaves blank values out (a recall's optional request id, a job's optional
line) serves a query only where the planner can prove the query's rows are not blank.
`field = %s` proves it for the value a plan is made for, but a prepared statement soon
gets one plan for any value, and a subquery's `field = OuterRef(...)` never proves it:
those plans fell back on reading all of a session's recalls or every job ever run.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.agents.models import Recall, Session
from memoryadmin.agents.services.reverts import session_revert_plan
from memoryadmin.memory.models import Document, DocumentVersion
from memoryadmin.runner import jobs
from memoryadmin.runner.models import Job, JobState

pytestmark = pytest.mark.postgres

SESSIONS = "/api/managed-agents/sessions"


def _plan(sql: str, parameters: list[str] | None = None) -> str:
    """PostgreSQL's plan of `sql` (as logged: its parameters written in). With
    `parameters`, those values are sent as parameters and the plan is the one for any
    value: what a prepared statement settles on after a few executions."""
    with connection.cursor() as cursor:
        if parameters is None:
            cursor.execute(f"EXPLAIN {sql}")
            return "\n".join(row[0] for row in cursor.fetchall())
        for number, value in enumerate(parameters, 1):
            assert sql.count(f"'{value}'") == 1, (value, sql)
            sql = sql.replace(f"'{value}'", f"${number}")
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            cursor.execute(f"PREPARE generic_check AS {sql}")
            cursor.execute(
                f"EXPLAIN EXECUTE generic_check({', '.join(['NULL'] * len(parameters))})"
            )
            plan = "\n".join(row[0] for row in cursor.fetchall())
            cursor.execute("DEALLOCATE generic_check")
        finally:
            cursor.execute("RESET plan_cache_mode")
    return plan


def test_a_retried_recall_is_found_through_its_request_ids_index_in_any_plan(
    api: APIClient, session: Session
) -> None:
    url = f"{SESSIONS}/{session.id}/memory/recall"
    body = {"use": ["notes"], "requestId": "mreq-1"}
    first = api.post(url, body, format="json")
    with CaptureQueriesContext(connection) as captured:
        again = api.post(url, body, format="json")
    assert (again.status_code, again.json()) == (200, first.json())
    table = Recall._meta.db_table
    (look_up,) = [q["sql"] for q in captured if f'FROM "{table}"' in q["sql"]]
    plan = _plan(look_up, [session.id, "mreq-1"])
    # Not the session's recalls read one by one (recall_newest_first), nor all of them.
    assert "unique_recall_request" in plan, plan
    assert "Seq Scan" not in plan, plan


@pytest.fixture
def job_history(db: None) -> None:
    """A runner some time in: thousands of finished jobs in forty lines, a few waiting."""
    past = timezone.now() - timedelta(days=1)
    Job.objects.bulk_create(
        Job(
            name="memoryadmin.webhooks.delivery",
            line=f"endpoint-{n % 40}",
            state=JobState.DONE,
            run_after=past,
            finished_at=past,
            max_attempts=5,
        )
        for n in range(4000)
    )
    Job.objects.bulk_create(
        Job(name="memoryadmin.webhooks.delivery", line=f"endpoint-{n}", run_after=past)
        for n in range(5)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")


def test_whether_a_job_waits_in_its_line_is_read_through_the_lines_index(
    job_history: None,
) -> None:
    """The sweep's and every claim's check for an earlier open job of the same line is a
    subquery on the job's own line: it read every job ever run for each due one."""
    with CaptureQueriesContext(connection) as captured:
        due = jobs.jobs_due()
    assert len(due) == 5
    (sweep,) = captured.captured_queries
    plan = _plan(sweep["sql"])
    assert "job_line" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_a_sweep_asks_only_each_lines_first_job_whether_it_waits(job_history: None) -> None:
    """Jobs waiting behind the first of their line (an endpoint that is down, its deliveries
    piling up) are never its turn: the sweep asks the line's index about the first open job
    of each line only, not about every job behind it (it asked about each one, on every
    sweep: about 0.1 s a sweep with 10,000 jobs waiting in one line)."""
    past = timezone.now() - timedelta(days=1)
    Job.objects.bulk_create(
        Job(name="memoryadmin.webhooks.delivery", line="endpoint-down", run_after=past)
        for _ in range(2000)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
    with CaptureQueriesContext(connection) as captured:
        due = jobs.jobs_due()
    first_down = Job.objects.filter(line="endpoint-down").order_by("pk").first()
    assert first_down is not None
    assert len(due) == 6
    assert first_down.pk in due
    (sweep,) = captured.captured_queries
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sweep['sql']}")
        (plan,) = cursor.fetchone()
    probes = [
        node["Actual Loops"]
        for node in _nodes(plan[0]["Plan"])
        if node.get("Index Name") == "job_line"
    ]
    assert probes, plan
    # Six lines have open jobs: each probe of the line's index runs once for each at most.
    assert max(probes) <= 6, probes


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def test_a_lines_next_job_is_found_through_the_lines_index_in_any_plan(
    job_history: None,
) -> None:
    ended = Job.objects.filter(line="endpoint-3", state=JobState.DONE).first()
    assert ended is not None
    with CaptureQueriesContext(connection) as captured:
        jobs._next_in_line(ended)
    (look_up,) = captured.captured_queries
    plan = _plan(look_up["sql"], ["endpoint-3"])
    assert "job_line" in plan, plan


def test_what_a_session_wrote_is_read_through_the_writers_index_in_any_plan(
    session: Session, workshop: Document
) -> None:
    """A session's revert starts from the versions it wrote (`version_by_session`, which
    leaves out the writes of no session): not every version of the documents it could
    have written."""
    DocumentVersion.objects.bulk_create(
        DocumentVersion(
            document=workshop,
            revision=f"r{n}",
            writer_kind="owner",
            action="replace",
            created_at=timezone.now(),
        )
        for n in range(3000)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {DocumentVersion._meta.db_table}")
    with CaptureQueriesContext(connection) as captured:
        session_revert_plan(session=session)
    (written,) = [q["sql"] for q in captured if "writer_session_id" in q["sql"]]
    plan = _plan(written, [session.id])
    assert "version_by_session" in plan, plan
