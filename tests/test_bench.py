"""`make bench` runs: a tiny run of bench/api.py end to end (seed, gunicorn, one
measured row, round trips) on the suite's database, with production settings and
static files collected into an empty folder, as on a fresh clone.

What the bench measures is not asserted (speed is never judged by a test); that it
produces its report is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import suite_database_url

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.django_db


def _database_url() -> str:
    """On PostgreSQL, the suite's own test database (test_<name>[_gwN]): the benches make
    theirs beside it, named after it (bench_test_<name>_gw0), so that concurrent suites
    and xdist workers never share one. On SQLite, none: the benches use files of their own."""
    if connection.vendor == "postgresql":
        return suite_database_url()
    return ""


def test_the_bench_runs_and_writes_its_report(tmp_path: Path) -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    env["DJANGO_STATIC_ROOT"] = str(tmp_path / "static")
    if url := _database_url():
        # The bench makes its own database beside the suite's (see _database_url).
        env["DATABASE_URL"] = url
    report = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            "bench/api.py",
            "--documents",
            "200",
            "--seconds",
            "0.2",
            "--pairs",
            "1",
            "--only",
            "GET one document req/s ÷ bare view",
            # A throughput row of writes, with the writers' prose.
            "--only",
            "prose",
            # A latency row: its pair is one run whose two sides take turns.
            "--only",
            "÷ page 1",
            "--json",
            str(report),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    data = json.loads(report.read_text())
    assert data["documents"] == 200
    assert data["database"] == connection.vendor
    assert [row["measure"] for row in data["rows"]] == [
        "GET one document req/s ÷ bare view, one SELECT by key",
        "conditional PUT of 2,000 characters of prose req/s ÷ bare view writing the same",
        "list page 3 ÷ page 1",
    ]
    assert data["rows"][0]["ratio"] > 0
    [(floor_writes, prose_writes)] = data["rows"][1]["pairs"]  # requests a second
    assert floor_writes > 0
    assert prose_writes > 0
    assert data["rows"][1]["ratio"] == pytest.approx(prose_writes / floor_writes)
    [(first_page, deep_page)] = data["rows"][2]["pairs"]
    # Seconds: the medians of the two sides' requests, taking turns.
    assert 0 < first_page < 1
    assert 0 < deep_page < 1
    assert data["rows"][2]["ratio"] == pytest.approx(deep_page / first_page)
    assert data["roundTrips"]["GET document"] == 1
    assert "| GET one document" in done.stdout


def test_the_incident_bench_finds_exactly_the_seeded_nodes(tmp_path: Path) -> None:
    """`make bench-incidents`, small: the trace must find the seed's truth (the script
    exits non-zero otherwise), then the containment runs, then the erasure of the poison's
    text (which exits non-zero if a version still holds it)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    env["MEMORYADMIN_DEV_SECRETS"] = "1"
    if url := _database_url():
        env["DATABASE_URL"] = url
    report = tmp_path / "incidents.json"
    done = subprocess.run(
        [
            sys.executable,
            "bench/incidents.py",
            "--documents",
            "400",
            "--sessions",
            "200",
            "--traces",
            "1",
            "--json",
            str(report),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "exactly the seeded ones" in done.stderr
    rows = json.loads(report.read_text())["rows"]
    assert [row["measure"] for row in rows] == [
        "trace p95 (421 nodes, 3 hops)",
        "containment of the whole graph",
        "erasure of one text",
    ]
