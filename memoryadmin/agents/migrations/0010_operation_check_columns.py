from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("agents", "0009_operation_jobs")]

    operations = [
        migrations.RemoveField(model_name="provideroperation", name="attempts"),
        migrations.RemoveField(model_name="provideroperation", name="deadline_at"),
        migrations.RemoveField(model_name="provideroperation", name="max_attempts"),
        migrations.RemoveField(model_name="provideroperation", name="next_check_at"),
    ]
