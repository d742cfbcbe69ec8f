"""Finds and repairs stored strings that break the string rule (see core/strings.py).

Earlier versions accepted NUL and unpaired surrogates. SQLite kept them (JSON
columns as escapes, text columns as they came); a row holding an unpaired
surrogate cannot be rendered, so every list that includes it failed. The
repair replaces each offending code point with U+FFFD, in place: revisions stay
as they are (the text is what the writer sent, minus what could never be
shown), byte counts follow the repaired text, and each repaired row is audited
(in its project, or without one for a row of none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db import models, transaction
from django.db.models import CharField, F, Value

from memoryadmin.core.strings import value_repair
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.audit import audit_record

STRING_FIELDS = (models.CharField, models.TextField, models.JSONField)
# How far (in foreign keys) a row may be from its project.
PROJECT_HOPS = 3


@dataclass(frozen=True)
class Finding:
    model: type[models.Model]
    pk: Any
    fields: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.model._meta.label} {self.pk}: {', '.join(self.fields)}"


def _our_models() -> list[type[models.Model]]:
    return [m for m in apps.get_models() if m.__module__.startswith("memoryadmin.")]


def _string_fields(model: type[models.Model]) -> list[str]:
    return [
        f.attname
        for f in model._meta.concrete_fields
        if isinstance(f, STRING_FIELDS) and not f.is_relation
    ]


def doctor_scan() -> Iterator[Finding]:
    """Every stored row with a string that breaks the rule, model by model."""
    for model in _our_models():
        names = _string_fields(model)
        if not names:
            continue
        rows = model._default_manager.order_by("pk").values_list("pk", *names)
        for pk, *values in rows.iterator(chunk_size=1000):
            bad = tuple(
                name
                for name, value in zip(names, values, strict=True)
                if value_repair(value) != value
            )
            if bad:
                yield Finding(model, pk, bad)


def _path_to(
    model: type[models.Model],
    wanted: Callable[[type[models.Model]], str | None],
    hops: int = PROJECT_HOPS,
) -> str | None:
    """The lookup from a row of `model` to what `wanted` finds on it or on a row it points to."""
    here = wanted(model)
    if here is not None or hops == 0:
        return here
    for field in model._meta.concrete_fields:
        target = field.related_model if field.many_to_one else None
        if isinstance(target, type):
            rest = _path_to(target, wanted, hops - 1)
            if rest is not None:
                return f"{field.name}__{rest}"
    return None


def _project(model: type[models.Model]) -> str | None:
    return "pk" if model is Project else None


def _environment(model: type[models.Model]) -> str | None:
    names = {f.name for f in model._meta.concrete_fields}
    return "environment" if "environment" in names else None


def doctor_repair(*, finding: Finding, actor: str) -> bool:
    """Repairs one row, audited `doctor.repair` in the row's project and environment, or
    without a project for a row of none (an all-projects key, a job): every change is in
    the log. False when the row is gone."""
    model = finding.model
    with transaction.atomic():
        row = model._default_manager.select_for_update().filter(pk=finding.pk)
        current = row.values(*finding.fields).first()
        if current is None:
            return False
        changes = {name: value_repair(value) for name, value in current.items()}
        field_names = {f.name for f in model._meta.concrete_fields}
        if "text" in changes and "bytes" in field_names:
            changes["bytes"] = len(changes["text"].encode("utf-8"))
        row.update(**changes)
        project, environment = _path_to(model, _project), _path_to(model, _environment)
        where = row.values(
            in_project=F(project) if project else Value(None, output_field=CharField()),
            in_environment=F(environment) if environment else Value(""),
        ).get()
        audit_record(
            project_id=None if where["in_project"] is None else str(where["in_project"]),
            environment=where["in_environment"] or "",
            actor=actor,
            action="doctor.repair",
            detail={
                "model": model._meta.label,
                "id": str(finding.pk),
                "fields": list(finding.fields),
            },
        )
    return True
