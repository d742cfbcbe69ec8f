"""The overview of a project's environment: counts over the last 30 days and the state of
its memory, with the geometry of the server-drawn SVG charts (no script draws them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Case, CharField, Count, F, FloatField, Max, Q, Sum, Value, When
from django.db.models.functions import Cast, TruncDate
from django.utils import timezone

from memoryadmin.agents.models import Session
from memoryadmin.core.environments import check_environment
from memoryadmin.memory.models import AuditEntry, Document, Project, Resource
from memoryadmin.memory.providers import kinds_keeping_documents
from memoryadmin.memory.services.audit import ACTOR_KIND_FILTERS, ACTOR_KINDS

DAYS = 30
# Fewer days with anything to count than this draw no chart (a lone bar says nothing).
MIN_DAYS = 2
TOP = 8
WRITERS = tuple(ACTOR_KINDS)
WRITER_NAMES = ACTOR_KINDS
# The SVG's coordinate system (it scales to the page's width).
WIDTH, HEIGHT, BAR_GAP = 600, 140, 2


@dataclass(frozen=True)
class Segment:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str
    href_query: str  # the audit log's filter behind it; "" for the sessions list


@dataclass
class DayChart:
    """Bars per day (stacked by series), their segments, and the numbers as a table."""

    days: list[date]
    series: list[str]
    counts: dict[str, list[int]]  # series -> one count per day
    segments: list[Segment] = field(default_factory=list)
    peak: int = 0

    @property
    def rows(self) -> list[tuple[date, list[int], int]]:
        return [
            (
                day,
                [self.counts[s][i] for s in self.series],
                sum(self.counts[s][i] for s in self.series),
            )
            for i, day in enumerate(self.days)
        ]

    @property
    def totals(self) -> list[int]:
        return [sum(self.counts[s]) for s in self.series]

    @property
    def total(self) -> int:
        return sum(self.totals)

    @property
    def days_counted(self) -> int:
        return sum(1 for _, _, total in self.rows if total)

    @property
    def enough_history(self) -> bool:
        return self.days_counted >= MIN_DAYS


def _start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def _days(today: date) -> list[date]:
    return [today - timedelta(days=DAYS - 1 - i) for i in range(DAYS)]


def _lay_out(chart: DayChart, queries: dict[str, str]) -> DayChart:
    per_day = [sum(chart.counts[s][i] for s in chart.series) for i in range(len(chart.days))]
    chart.peak = max(per_day, default=0)
    scale = (HEIGHT - 4) / chart.peak if chart.peak else 0
    slot = WIDTH / len(chart.days)
    for i, day in enumerate(chart.days):
        top = float(HEIGHT)
        for series in chart.series:
            count = chart.counts[series][i]
            if not count:
                continue
            height = max(count * scale, 1.5)
            top -= height
            chart.segments.append(
                Segment(
                    x=round(i * slot + BAR_GAP / 2, 2),
                    y=round(top, 2),
                    width=round(slot - BAR_GAP, 2),
                    height=round(height, 2),
                    css=f"series-{series}",
                    title=f"{day:%b %d}: {count} {WRITER_NAMES.get(series, series)}",
                    href_query=queries[series].format(day=day.isoformat()),
                )
            )
    return chart


def _per_day(rows: Any, days: list[date], series: list[str]) -> dict[str, list[int]]:
    index = {day: i for i, day in enumerate(days)}
    counts = {s: [0] * len(days) for s in series}
    for row in rows:
        day = row["day"]
        if isinstance(day, str):  # SQLite may hand dates back as text
            day = date.fromisoformat(day)
        if day in index and row["series"] in counts:
            counts[row["series"]][index[day]] += row["n"]
    return counts


def writes_per_day(*, project: Project, environment: str, today: date) -> DayChart:
    """Document changes per day, by who made them: agent sessions, owners (page and CLI)
    and API keys, from the audit log (every change is an entry)."""
    days = _days(today)
    rows = (
        AuditEntry.objects.filter(
            project=project,
            environment=environment,
            action__startswith="document.",
            created_at__gte=_start(days[0]),
        )
        .annotate(
            day=TruncDate("created_at"),
            series=Case(
                When(ACTOR_KIND_FILTERS["agent"], then=Value("agent")),
                When(ACTOR_KIND_FILTERS["key"], then=Value("key")),
                default=Value("owner"),
                output_field=CharField(),
            ),
        )
        .values("day", "series")
        .annotate(n=Count("id"))
    )
    chart = DayChart(days=days, series=list(WRITERS), counts=_per_day(rows, days, list(WRITERS)))
    queries = {kind: f"action=document.*&by={kind}&since={{day}}&until={{day}}" for kind in WRITERS}
    return _lay_out(chart, queries)


def sessions_per_day(*, project: Project, environment: str, today: date) -> DayChart:
    """Sessions created per day, and recall failures (provider calls that failed) per day."""
    days = _days(today)
    start = _start(days[0])
    sessions = (
        Session.objects.filter(project=project, environment=environment, created_at__gte=start)
        .annotate(day=TruncDate("created_at"), series=Value("sessions", output_field=CharField()))
        .values("day", "series")
        .annotate(n=Count("id"))
    )
    failures = (
        AuditEntry.objects.filter(
            project=project,
            environment=environment,
            action="provider.failed",
            detail__operation="recall",
            created_at__gte=start,
        )
        .annotate(day=TruncDate("created_at"), series=Value("failures", output_field=CharField()))
        .values("day", "series")
        .annotate(n=Count("id"))
    )
    series = ["sessions", "failures"]
    counts = _per_day([*sessions, *failures], days, series)
    chart = DayChart(days=days, series=series, counts=counts)
    queries = {
        "sessions": "",
        "failures": "action=provider.failed&since={day}&until={day}",
    }
    return _lay_out(chart, queries)


@dataclass(frozen=True)
class ResourceUse:
    resource_id: str
    max_bytes: int
    documents: int
    total_bytes: int
    largest: int

    @property
    def fill(self) -> float:
        """The fullest document's share of maxBytes (a limit holds per document)."""
        return min(self.largest / self.max_bytes, 1.0) if self.max_bytes else 0.0

    @property
    def percent(self) -> int:
        return round(self.largest * 100 / self.max_bytes) if self.max_bytes else 0

    @property
    def bar_width(self) -> float:
        return round(self.fill * WIDTH, 2)


def resource_use(*, project: Project, environment: str) -> list[ResourceUse]:
    live = Q(documents__deleted=False)
    rows = (
        Resource.objects.filter(
            project=project, environment=environment, kind__in=kinds_keeping_documents()
        )
        .annotate(
            live_documents=Count("documents", filter=live),
            total=Sum("documents__bytes", filter=live),
            largest=Max("documents__bytes", filter=live),
        )
        .order_by("resource_id")
    )
    return [
        ResourceUse(
            resource_id=row.resource_id,
            max_bytes=row.max_bytes,
            documents=row.live_documents,
            total_bytes=row.total or 0,
            largest=row.largest or 0,
        )
        for row in rows
    ]


def nearest_limit(*, project: Project, environment: str) -> list[dict[str, Any]]:
    """The live documents that fill most of their resource's maxBytes."""
    rows = (
        Document.objects.live()
        .filter(resource__project=project, resource__environment=environment, bytes__gt=0)
        .annotate(
            fill=Cast(F("bytes"), FloatField()) / Cast(F("resource__max_bytes"), FloatField())
        )
        .order_by("-fill", "doc_id")
        .values("resource__resource_id", "doc_id", "title", "bytes", "resource__max_bytes", "fill")
    )
    return [
        {
            "resource_id": row["resource__resource_id"],
            "doc_id": row["doc_id"],
            "title": row["title"],
            "bytes": row["bytes"],
            "max_bytes": row["resource__max_bytes"],
            "percent": round(row["fill"] * 100),
        }
        for row in rows[:TOP]
    ]


def most_active(*, project: Project, environment: str, today: date) -> list[dict[str, Any]]:
    """The documents changed most often in the last 30 days (deleted ones included)."""
    start = _start(_days(today)[0])
    rows = (
        AuditEntry.objects.filter(
            project=project,
            environment=environment,
            action__startswith="document.",
            created_at__gte=start,
        )
        .exclude(document_id="")
        .values("resource_id", "document_id")
        .annotate(changes=Count("id"))
        .order_by("-changes", "resource_id", "document_id")
    )
    return [dict(row) for row in rows[:TOP]]


@dataclass(frozen=True)
class Overview:
    writes: DayChart
    sessions: DayChart
    resources: list[ResourceUse]
    nearest: list[dict[str, Any]]
    active: list[dict[str, Any]]
    since: date
    today: date


def overview_get(*, project: Project, environment: str) -> Overview:
    check_environment(environment)
    today = timezone.now().date()
    return Overview(
        writes=writes_per_day(project=project, environment=environment, today=today),
        sessions=sessions_per_day(project=project, environment=environment, today=today),
        resources=resource_use(project=project, environment=environment),
        nearest=nearest_limit(project=project, environment=environment),
        active=most_active(project=project, environment=environment, today=today),
        since=today - timedelta(days=DAYS - 1),
        today=today,
    )
