# A record is mapped in each namespace it was seen in (namespaces may share a partition).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('external', '0001_initial'),
    ]

    operations = [
        migrations.AddConstraint(
            model_name='externalrecord',
            constraint=models.UniqueConstraint(fields=('resource', 'record_id', 'namespace'), name='external_record_seen'),
        ),
        migrations.RemoveConstraint(
            model_name='externalrecord',
            name='external_record_id',
        ),
    ]
