"""Finished jobs by the time they finished: housekeeping removes those past their days.

Built concurrently on PostgreSQL (core/indexes.py): writes go on while it is built."""

from __future__ import annotations

from django.db import migrations, models

from memoryadmin.core.indexes import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("runner", "0003_job_lines_and_deadlines")]

    operations = [
        AddIndexOnline(
            model_name="job",
            index=models.Index(fields=["state", "finished_at"], name="job_finished"),
        ),
    ]
